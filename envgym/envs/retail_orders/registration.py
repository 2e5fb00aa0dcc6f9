"""Registers the retail-orders family (loaded through the ``envgym.envs`` entry point)."""

from __future__ import annotations

from pathlib import Path

from envgym.registry import register_bundle


def _default_bundle() -> Path:
    from envgym.envs.procedural_kit.build import default_bundle_dir
    from envgym.envs.retail_orders.build import RECIPE

    return default_bundle_dir(RECIPE)


def register_envs() -> None:
    register_bundle(
        "retail-orders-v0",
        _default_bundle,
        description="Retail orders and returns: baskets under stock, rating, brand, weight and discounted-budget rules; returns whose refund lands in a narrow range.",
    )
