"""``envgym synth --categories FILE|all --per-category K --out DIR``: build a suite (docs/SUITES.md).

K validated bundles per category through the ordinary pipeline, deduplicated across the whole
suite, split by category into train and held-out, described by ``DIR/suite.json``; journaled,
so rerunning the same command after a kill continues where it stopped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from envgym.progress import progress_bar


def suite_command(
    *,
    category: str | None,
    categories: str | None,
    per_category: int | None,
    out: Path | None,
    held_out_share: float,
    validation_share: float,
    seed: int,
    workers: int,
    tasks_per_bundle: int,
    difficulties: str,
    max_rows: int | None,
    agent: str,
    sandbox: str,
    db: str | None,
    as_json: bool,
) -> None:
    from envgym.suite_manifest import SuiteError
    from envgym.synth_agents.suite import SuiteConfig, build_suite
    from envgym.synth_agents.suite_categories import read_categories

    err = Console(stderr=True)

    def fail(message: str) -> typer.Exit:
        err.print(f"[bold red]error:[/] {message}", soft_wrap=True)
        return typer.Exit(2)

    if category is not None:
        raise fail(f"give either a CATEGORY ({category!r}) or --categories, not both")
    if categories is None or per_category is None:
        raise fail("a suite needs both --categories FILE|all and --per-category K")
    if out is None:
        raise fail("--out is required")
    if agent != "procedural":
        raise fail(f"a suite is built by the procedural agent, not --agent {agent!r}")
    store = None
    try:
        try:
            levels = tuple(int(x) for x in difficulties.split(",") if x.strip())
        except ValueError:
            raise SuiteError(
                f"--difficulties must be comma-separated integers 1..5, not {difficulties!r}"
            ) from None
        config = SuiteConfig(
            categories=read_categories(categories),
            per_category=per_category,
            seed=seed,
            held_out_share=held_out_share,
            validation_share=validation_share,
            tasks_per_bundle=tasks_per_bundle,
            difficulties=levels,
            sandbox=sandbox,
            workers=workers,
            max_rows=max_rows,
        )
        config.check()
        from envgym.store import Store

        store = Store(db)
        with progress_bar(err) as bar:
            job_bar = bar.add_task("suite", total=len(config.categories) * per_category)
            finished: dict[str, int] = {}

            def advance(name: str, done: int, total: int) -> None:
                finished[name] = done
                bar.update(job_bar, completed=sum(finished.values()), description=f"suite · {name}")

            manifest = build_suite(config, out, store, progress=advance)
    except (ValueError, RuntimeError) as exc:  # SuiteError, UnknownCategory, StoreError...
        raise fail(str(exc)) from None
    finally:
        if store is not None:
            store.close()
    payload = {"out": str(out), "suite": str(Path(out) / "suite.json"), **manifest["report"]}
    payload["splits"] = {k: len(v) for k, v in manifest["splits"].items()}
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        print_report(payload, Console(width=None if sys.stdout.isatty() else 160))


def _splits(counts: dict[str, int]) -> str:
    shown = [f"train {counts.get('train', 0)}"]
    if counts.get("validation"):
        shown.append(f"validation {counts['validation']}")
    shown.append(f"held-out {counts.get('held_out', 0)}")
    return ", ".join(shown)


def print_report(r: dict[str, Any], console: Console) -> None:
    table = Table(title=f"envgym synth · suite · {r['out']}")
    table.add_column("")
    table.add_column("value")
    tpe = r["tools_per_environment"]
    rows = [
        ("environments", str(r["environments"])),
        ("tasks", str(r["tasks"])),
        ("categories", f"{r['categories']} of {r['categories_requested']} requested"),
        ("split (categories)", _splits(r["splits"])),
        ("distinct tool names", str(r["distinct_tool_names"])),
        ("distinct tool signatures", str(r["distinct_tool_signatures"])),
        ("tools per environment", f"min {tpe['min']}, median {tpe['median']}, max {tpe['max']}"),
        ("tasks per level", ", ".join(f"{k}: {v}" for k, v in r["tasks_per_level"].items())),
        (
            "greedy solve share per level",
            ", ".join(
                f"{k}: {v['share']:.0%} of {v['tasks']}"
                for k, v in r["greedy_solve_share_per_level"].items()
            )
            or "no task names a baseline",
        ),
        ("check pass rate", f"{r['check_pass_rate']:.1%} ({r['validated']}/{r['made']} made)"),
        ("jobs", f"{r['jobs']} of {r['jobs_requested']}"),
        ("duplicates dropped", ", ".join(f"{k}: {v}" for k, v in r["duplicates"].items())),
    ]
    rows += [(f"rejected: {k}", str(v)) for k, v in sorted(r["rejected"].items())]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"manifest: {r['suite']}")
