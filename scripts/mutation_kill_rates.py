"""Kill rate of ``envgym check --mutation`` per shipped family (docs/CHECK.md, "Kill rates").

    .venv/bin/python scripts/mutation_kill_rates.py N [family ...]

For each family: a fresh one-task bundle of difficulty 5 (seed 0), a seeded sample of N
mutants of its verifier (all of them when N is at least their number), one JSON line.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from envgym.bundle import load_bundle
from envgym.envs.procedural_kit.build import build_procedural_bundle
from envgym.mutation_run import run_mutation

FAMILIES = ("retail_orders", "meeting_scheduling", "shipment_logistics", "trip_planning")


def build(family: str, out: Path) -> Path:
    if family == "trip_planning":
        from envgym.envs.trip_planning.build import build_bundle

        return build_bundle(out, seed=0, n_tasks=1, difficulties=(5,), include_worked_example=False)
    recipe = __import__(f"envgym.envs.{family}.build", fromlist=["RECIPE"]).RECIPE
    return build_procedural_bundle(recipe, out, seed=0, n_tasks=1, difficulties=(5,))


def main(argv: list[str]) -> None:
    n = int(argv[0])
    for family in argv[1:] or FAMILIES:
        started = time.time()
        with tempfile.TemporaryDirectory() as scratch:
            root = build(family, Path(scratch) / "b")
            report = run_mutation(load_bundle(root), max_mutants=n, seed=1).to_dict()
        report |= {
            "family": family,
            "seconds": round(time.time() - started),
            "survivor_kinds": Counter(s["kind"] for s in report["survivors"]),
        }
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
