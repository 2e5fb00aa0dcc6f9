"""Build trip-planning bundles (docs/BUNDLE.md) and the cached default bundle.

from envgym.envs.trip_planning.build import build_bundle, default_bundle_dir
build_bundle(Path("out/trip"), seed=3, n_tasks=20)
default_bundle_dir()  # ~/.cache/envgym/bundles/trip-planning-v0-<hash>, built once
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envgym.bundle import write_manifest
from envgym.bundle_write import copy_code_files, fresh_bundle_dir, write_tasks
from envgym.envs.procedural_kit.baselines import stronger_solves as first_solver
from envgym.envs.procedural_kit.build import cached_bundle
from envgym.envs.procedural_kit.local import Episode, LocalBundle, passed
from envgym.envs.procedural_kit.witness import condition_witnesses
from envgym.envs.trip_planning.baselines import baselines
from envgym.envs.trip_planning.conditions import probes
from envgym.envs.trip_planning.constraints import TripSpec
from envgym.envs.trip_planning.data import DEFAULT_N_CITIES, write_db
from envgym.envs.trip_planning.planner import Plan
from envgym.envs.trip_planning.tasks import (
    TASK_NAMES,
    GeneratedTask,
    generate_tasks,
    worked_example,
)
from envgym.envs.trip_planning.witnesses import find_witnesses
from envgym.envs.trip_planning.world import World, load_world

GENERATOR_VERSION = "trip-planning-4"  # 2: per-rule witnesses, greedy baseline, rating spread; 3: declared rules, condition witnesses; 4: top level defeats the stronger baselines
# Levels whose every task defeats the stronger baselines (envgym/envs/trip_planning/baselines.py):
# a draw that greedy + repair or the bounded exhaustive search solves is re-drawn (the kit's
# re-draw test, envgym.envs.procedural_kit.baselines.stronger_solves, run inside generate_tasks's
# planner-backed draw loop).
TOP_LEVELS = (5,)
CATEGORY = "trip planning"
_PACKAGE = Path(__file__).resolve().parent
_TEMPLATES = _PACKAGE / "bundle_files"
DESCRIPTION = (
    "Plan multi-day trips across Chinese cities with 15 database tools (DeepSeek-V3.2 §3.2.3): "
    "no repeats, everything in the day's city, hotel-price-conditioned budget tiers, rating "
    "floors, ticket caps, weather and transport rules; difficulty 1-5."
)


def build_bundle(
    out_dir: Path,
    *,
    seed: int = 0,
    n_tasks: int = 12,
    difficulties: Sequence[int] = (1, 2, 3, 4, 5),
    include_worked_example: bool = True,
    n_cities: int = DEFAULT_N_CITIES,
) -> Path:
    """Write a complete bundle into ``out_dir`` (absent or empty) and return it.

    ``n_tasks`` generated tasks cycle through ``difficulties``; the seed's worked example
    ``hangzhou-3day`` comes first when ``include_worked_example``.  Every task's witness plan
    is checked with the bundle's own verifier before the manifest is written, so a bundle
    that exists is one whose tasks are known to be solvable.
    """
    out = fresh_bundle_dir(out_dir)
    (out / "state").mkdir(parents=True, exist_ok=True)
    db_path = write_db(out / "state" / "db.sqlite", seed=seed, n_cities=n_cities)
    world = load_world(db_path)
    copy_code_files(_TEMPLATES, out)
    with LocalBundle(out).episode() as ep:
        witnesses = _RuleWitnesses(ep, world)
        tasks: list[GeneratedTask] = [worked_example(world)] if include_worked_example else []
        tasks += generate_tasks(
            world,
            seed=seed,
            n_tasks=n_tasks,
            difficulties=tuple(difficulties),
            accept=witnesses.accept,
            stronger=lambda spec: stronger_solves(ep, world, spec),
            top_levels=TOP_LEVELS,
        )
        if not tasks:
            raise ValueError("a bundle needs at least one task (n_tasks=0 and no worked example)")
        _check_witnesses(out, tasks)
        lines = [witnesses.line(t) for t in tasks]
    write_tasks(out, lines)
    write_manifest(
        out,
        name=f"trip-planning-seed{seed}",
        category=CATEGORY,
        description=DESCRIPTION,
        provenance={"agent": "procedural:trip_planning", "model": None, "seed": seed},
    )
    return out


def stronger_solves(ep: Episode, world: World, spec: TripSpec) -> str | None:
    """The first stronger baseline whose answer the task's verifier accepts, or None."""
    task = {"id": "draw", "verifier": TASK_NAMES.verifier, "metadata": spec.metadata()}
    return first_solver(lambda sub: ep.verify(sub, task), baselines(world, task["metadata"]))


def _check_witnesses(bundle_dir: Path, tasks: list[GeneratedTask]) -> None:
    """The generator's planner and the shipped verifier must agree on every witness."""
    with LocalBundle(bundle_dir).episode() as ep:
        for t in tasks:
            report = ep.verify({"answer_text": json.dumps(t.witness.answer())}, t.task)
            if not passed(report):
                failed = [
                    f"{c['name']}: {c['detail']}" for c in report["checks"] if not c["passed"]
                ]
                raise RuntimeError(f"witness of {t.task['id']} rejected by the verifier: {failed}")


class _RuleWitnesses:
    """Per-rule witnesses for every check a task's verifier reports (docs/CHECK.md).

    A draw whose rules cannot all be isolated (a tight budget can make one rule impossible to
    break alone) is vetoed and re-rolled; the worked example has no re-roll, so it fails the
    build, naming the rule, rather than ship a rule `envgym check` cannot prove enforced.
    """

    def __init__(self, ep: Episode, world: World) -> None:
        self.ep, self.world = ep, world
        self.found: dict[TripSpec, list[dict[str, Any]]] = {}

    def _search(self, spec: TripSpec, plan: Plan) -> list[str]:
        task = {"id": "draw", "verifier": TASK_NAMES.verifier, "metadata": spec.metadata()}

        def verify(sub: dict[str, Any]) -> dict[str, Any]:
            return self.ep.verify(sub, task)

        found, missing = find_witnesses(verify, self.world, spec, plan.answer())
        if not missing:
            rules = [w["rule"] for w in found]
            self.found[spec] = found + condition_witnesses(
                verify, rules, probes(self.world, spec, plan.answer())
            )
        return missing

    def accept(self, spec: TripSpec, plan: Plan) -> bool:
        return spec in self.found or not self._search(spec, plan)

    def line(self, t: GeneratedTask) -> dict[str, Any]:
        if t.spec not in self.found:
            missing = self._search(t.spec, t.witness)
            if missing:
                raise RuntimeError(f"task {t.task['id']}: no per-rule witness for {missing}")
        return {**t.task, "witnesses": self.found[t.spec]}


def default_bundle_dir(seed: int = 0) -> Path:
    """The default bundle, built once into the envgym cache and reused (the kit's
    ``cached_bundle``: keyed by the generator version, the seed, this package's source and the
    kit's, so editing either never serves a stale bundle; concurrent callers wait for one build).
    """
    return cached_bundle(
        "trip-planning",
        f"{GENERATOR_VERSION}\0{seed}",
        _PACKAGE,
        lambda out: build_bundle(out, seed=seed),
        skip=frozenset({"registration.py"}),
    )
