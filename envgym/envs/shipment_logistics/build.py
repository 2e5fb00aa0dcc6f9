"""Build shipment-logistics bundles (docs/BUNDLE.md) with the procedural kit.

from envgym.envs.shipment_logistics.build import build_bundle
build_bundle(Path("out/ship"), seed=3, n_tasks=5)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envgym.envs.procedural_kit.build import build_procedural_bundle, category_recipe

CATEGORY = "shipment logistics"
# difficulty -> share of tasks the greedy baseline may solve (docs/SYNTHESIS.md, "Rules,
# witnesses and difficulty"); the rest are draws where cheapest-route-first, in order, overloads
# a lane or overruns the budget, so only a search over route combinations meets every rule.
GREEDY_SHARE = {1: 1.0, 2: 0.6, 3: 0.4, 4: 0.2, 5: 0.0}

RECIPE = category_recipe(
    "envgym.envs.shipment_logistics",
    category=CATEGORY,
    description=(
        "Shipment logistics: route shipments over a hub network under hop, mode, hazmat and "
        "deadline rules, with shared lane capacities and a tight total budget; 7 tools; "
        "difficulty 1-5."
    ),
    baseline="greedy_routing",
    greedy_share=GREEDY_SHARE,
    max_draws=1500,
)


def build_bundle(
    out_dir: Path, *, seed: int = 0, n_tasks: int = 5, difficulties: Sequence[int] = (1, 2, 3, 4, 5)
) -> Path:
    """Write a shipment-logistics bundle with ``n_tasks`` strict tasks."""
    return build_procedural_bundle(
        RECIPE, out_dir, seed=seed, n_tasks=n_tasks, difficulties=difficulties
    )
