"""``envgym bench``: benchmarks come from the ``envgym.benchmarks`` entry-point group.

A benchmark is ``run(quick: bool) -> BenchResult``; this module prints it as a rich table or,
with ``--json``, as exactly one JSON object (DESIGN.md, benchmarks contract).
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points

from rich.console import Console
from rich.table import Table

GROUP = "envgym.benchmarks"


@dataclass(frozen=True)
class BenchResult:
    benchmark: str
    metrics: dict[str, float]
    units: dict[str, str]
    notes: dict[str, str] = field(default_factory=dict)  # metric → what it is compared with


def machine() -> dict[str, object]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }


def available() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def run_benchmark(name: str, *, as_json: bool, quick: bool, console: Console) -> BenchResult:
    eps = available()
    if name not in eps:
        raise KeyError(f"no benchmark {name!r}; available: {', '.join(sorted(eps)) or 'none'}")
    result: BenchResult = eps[name].load()(quick=quick)
    if as_json:
        payload = {
            "benchmark": result.benchmark,
            "metrics": result.metrics,
            "units": result.units,
            "machine": machine(),
        }
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        table = Table(title=f"envgym bench {result.benchmark}")
        for col in ("metric", "value", "unit", "note"):
            table.add_column(col)
        for key, value in result.metrics.items():
            table.add_row(key, f"{value:.4g}", result.units.get(key, ""), result.notes.get(key, ""))
        console.print(table)
    return result
