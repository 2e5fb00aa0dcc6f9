"""Build meeting-scheduling bundles (docs/BUNDLE.md) with the procedural kit.

from envgym.envs.meeting_scheduling.build import build_bundle
build_bundle(Path("out/meet"), seed=3, n_tasks=5)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envgym.envs.procedural_kit.build import build_procedural_bundle, category_recipe

CATEGORY = "meeting scheduling"
# difficulty -> share of tasks the greedy baseline may solve (docs/SYNTHESIS.md, "Rules,
# witnesses and difficulty"); the rest are draws where placing each meeting at its earliest
# slot takes the only slot another meeting has, so only a search over start times succeeds.
GREEDY_SHARE = {1: 1.0, 2: 1.0, 3: 0.8, 4: 0.5, 5: 0.0}

RECIPE = category_recipe(
    "envgym.envs.meeting_scheduling",
    category=CATEGORY,
    description=(
        "Meeting scheduling across calendars: place non-overlapping meetings on one day within every "
        "attendee's time-zone shifted working hours, around their events and lunch, with buffers, "
        "in the smallest free room, picking a team representative; 9 tools; difficulty 1-5."
    ),
    baseline="greedy_schedule",
    greedy_share=GREEDY_SHARE,
    max_draws=1500,  # a draw where greedy fails is rare at levels 3-4 (about 1 in 60-100)
)


def build_bundle(
    out_dir: Path, *, seed: int = 0, n_tasks: int = 5, difficulties: Sequence[int] = (1, 2, 3, 4, 5)
) -> Path:
    """Write a meeting-scheduling bundle with ``n_tasks`` strict tasks."""
    return build_procedural_bundle(
        RECIPE, out_dir, seed=seed, n_tasks=n_tasks, difficulties=difficulties
    )
