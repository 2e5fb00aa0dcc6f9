"""Solve share per difficulty level of each baseline, over freshly generated bundles.

    nice -n 19 python scripts/difficulty_baselines.py --seeds 0 1 2 3 --tasks 25

Builds ``--tasks`` tasks (levels 1-5 in turn) on each seed's database for every procedural
family, then per task runs: the bundle's own greedy baseline (what ``envgym check`` reports as
baseline.by_difficulty), and the host baselines of envgym.envs.procedural_kit.baselines — greedy,
greedy + local repair, and the exhaustive search up to its bound — each answer judged by the
task's verifier.  Prints one markdown table (or JSON with --json): per family and level, N and
the share each baseline solved; "beyond" counts tasks past the exhaustive search's bound.
Trip-planning bundles are built without their worked example, so every task is a generated one.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envgym.envs.procedural_kit.baselines import BEYOND, EXHAUSTIVE_BOUND, judged
from envgym.envs.procedural_kit.build import baseline_solves
from envgym.envs.procedural_kit.local import LocalBundle
from envgym.envs.trip_planning.world import load_world as trip_world

FAMILIES = ("retail_orders", "shipment_logistics", "meeting_scheduling", "trip_planning")
COLUMNS = ("bundle greedy", "greedy", "greedy+repair", "exhaustive")


def measure(family: str, seed: int, n_tasks: int, bound: int) -> list[dict[str, Any]]:
    """One row per generated task: its level and each baseline's outcome."""
    build = importlib.import_module(f"envgym.envs.{family}.build")
    host = importlib.import_module(f"envgym.envs.{family}.baselines")
    trip = family == "trip_planning"  # not a kit recipe: its own build and world loader
    extra = {"include_worked_example": False} if trip else {}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = build.build_bundle(Path(tmp) / "b", seed=seed, n_tasks=n_tasks, **extra)
        load_world = trip_world if trip else build.RECIPE.load_world
        world = load_world(out / "state" / "db.sqlite")
        tasks = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
        with LocalBundle(out).episode() as episode:
            for task in tasks:
                outcome = judged(
                    lambda sub, t=task: episode.verify(sub, t),
                    host.baselines(world, task["metadata"], bound),
                )
                rows.append(
                    {
                        "family": family,
                        "seed": seed,
                        "task": task["id"],
                        "level": task["difficulty"],
                        "bundle greedy": baseline_solves(episode, task),
                        **outcome,
                    }
                )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["family"], row["level"])].append(row)
    lines = [
        "| family | level | N | " + " | ".join(COLUMNS) + " | beyond bound |",
        "|---|---|---|" + "---|" * (len(COLUMNS) + 1),
    ]
    for (family, level), group in sorted(groups.items()):
        n = len(group)
        cells = [
            f"{sum(r[c] is True for r in group)}/{n}" if c in group[0] else "n/a" for c in COLUMNS
        ]
        beyond = sum(r.get("exhaustive") == BEYOND for r in group)
        cells.append(f"{beyond}/{n}" if "exhaustive" in group[0] else "n/a")
        lines.append(f"| {family} | {level} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument("--tasks", type=int, default=25, help="tasks per seed (levels 1-5 in turn)")
    parser.add_argument(
        "--bound",
        type=int,
        default=EXHAUSTIVE_BOUND,
        help="combinations the exhaustive search may enumerate",
    )
    parser.add_argument("--json", action="store_true", help="print every row as JSON")
    parser.add_argument("--table", type=Path, help="print the table of a --json output file")
    args = parser.parse_args(argv)
    if args.table is not None:
        print(table(json.loads(args.table.read_text())))
        return 0
    rows = [
        row
        for family in args.families
        for seed in args.seeds
        for row in measure(family, seed, args.tasks, args.bound)
    ]
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
