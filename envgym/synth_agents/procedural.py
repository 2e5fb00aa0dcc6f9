"""The procedural agent: a seeded generator (envgym.synth_agents.categories) behind the pipeline."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envgym.envs.procedural_kit.spec.model import MIN_ROWS
from envgym.synth_agents.categories import find_category
from envgym.synth_agents.pipeline import Job, MakeOutcome

# A seed's database can lack what a level needs (shipment networks: 2 of 50 had no strict
# level-5 draw). Rather than hand back fewer bundles than asked, the job redraws the database
# from a derived seed, a bounded number of times; the seed used is recorded. Offsets are far
# beyond any run's job count, so a redraw never repeats another job's seed.
REDRAWS = 3
REDRAW_STRIDE = 1_000_003


@dataclass(frozen=True)
class ProceduralAgent:
    """Picklable (worker processes rebuild the category from its name)."""

    category_name: str
    tasks_per_bundle: int = 3
    difficulties: Sequence[int] = (1, 2, 3, 4, 5)
    max_rows: int | None = None  # cap every table of a spec-compiled category (a smaller world)

    def __post_init__(self) -> None:
        category = find_category(self.category_name)  # an unknown name fails here, before any job
        if self.max_rows is not None and not category.spec_written:
            raise ValueError(
                f"--max-rows applies to categories compiled from a spec; {category.name!r} is a "
                "hand-written family with fixed tables"
            )
        if self.max_rows is not None and self.max_rows < MIN_ROWS:
            raise ValueError(f"--max-rows must be at least {MIN_ROWS}, not {self.max_rows}")
        if self.tasks_per_bundle < 1:
            raise ValueError(f"--tasks-per-bundle must be at least 1, not {self.tasks_per_bundle}")
        if not self.difficulties or any(d not in (1, 2, 3, 4, 5) for d in self.difficulties):
            raise ValueError(
                f"difficulties must be a non-empty subset of 1..5, not {tuple(self.difficulties)}"
            )

    @property
    def slug(self) -> str:
        return find_category(self.category_name).slug

    @property
    def name(self) -> str:
        return "procedural:" + self.slug.replace("-", "_")

    @property
    def category(self) -> str:
        return find_category(self.category_name).name

    def make(self, job: Job, staging: Path) -> MakeOutcome:
        # Rotate the difficulty cycle with the seed so a run covers every level even with few tasks.
        shift = job.index % len(self.difficulties)
        cycle = tuple(self.difficulties[shift:]) + tuple(self.difficulties[:shift])
        category = find_category(self.category_name)
        failures: list[str] = []
        for redraw in range(REDRAWS + 1):
            seed = job.seed + redraw * REDRAW_STRIDE
            shutil.rmtree(staging, ignore_errors=True)  # a failed build may leave files
            try:
                category.build(staging, seed, self.tasks_per_bundle, cycle, self.max_rows)
            except Exception as exc:  # noqa: BLE001 - e.g. UnsolvableTask on an unlucky seed
                failures.append(f"seed {seed}: {type(exc).__name__}: {exc}")
                if type(exc).__name__ != "UnsolvableTask":
                    break  # a bug, not bad luck: another database will not help
                continue
            return MakeOutcome(
                True,
                info={
                    "difficulties": list(cycle[: self.tasks_per_bundle]),
                    "database_seed": seed,
                    "redraws": failures,
                },
            )
        return MakeOutcome(False, "build_failed", "; ".join(failures))
