"""Build retail-orders bundles (docs/BUNDLE.md) with the procedural kit.

from envgym.envs.retail_orders.build import build_bundle
build_bundle(Path("out/retail"), seed=3, n_tasks=5)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envgym.envs.procedural_kit.build import build_procedural_bundle, category_recipe

CATEGORY = "retail orders"
# difficulty -> share of tasks the greedy baseline may solve (docs/SYNTHESIS.md, "Rules,
# witnesses and difficulty"): the rest are draws where cheapest-per-category or
# largest-refund-first breaks a rule, so only a search finds the answer.  Levels 1-2 have no
# such draws (a basket with no rule tying products together; a 10%-wide refund range).
GREEDY_SHARE = {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.5, 5: 0.0}

RECIPE = category_recipe(
    "envgym.envs.retail_orders",
    category=CATEGORY,
    description=(
        "Retail orders and returns: shop one product per category under stock, rating, brand, "
        "weight and discounted-budget rules, or choose order lines to return so the refund lands "
        "in a narrow range under window, final-sale and restocking-fee rules; 11 tools; difficulty 1-5."
    ),
    baseline="greedy_retail",
    greedy_share=GREEDY_SHARE,
    max_draws=1500,
)


def build_bundle(
    out_dir: Path, *, seed: int = 0, n_tasks: int = 5, difficulties: Sequence[int] = (1, 2, 3, 4, 5)
) -> Path:
    """Write a retail bundle with ``n_tasks`` strict tasks; see envgym.envs.procedural_kit.build."""
    return build_procedural_bundle(
        RECIPE, out_dir, seed=seed, n_tasks=n_tasks, difficulties=difficulties
    )
