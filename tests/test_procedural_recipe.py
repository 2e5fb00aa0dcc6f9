"""envgym.envs.procedural_kit.build.category_recipe: a family's Recipe from its package's layout."""

from __future__ import annotations

import importlib

import pytest

FAMILIES = ("retail_orders", "meeting_scheduling", "shipment_logistics")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_recipe_takes_its_stronger_baselines_and_top_levels_from_its_package(
    family: str,
) -> None:
    recipe = importlib.import_module(f"envgym.envs.{family}.build").RECIPE
    baselines = importlib.import_module(f"envgym.envs.{family}.baselines")
    tasks = importlib.import_module(f"envgym.envs.{family}.tasks")
    # Without them the kit would keep top-level draws a stronger baseline solves.
    assert recipe.stronger is baselines.baselines
    assert recipe.top_levels == tasks.TOP_LEVELS == (5,)
    assert recipe.draw_task is tasks.draw_task
    assert recipe.agent == f"procedural:{family}"
