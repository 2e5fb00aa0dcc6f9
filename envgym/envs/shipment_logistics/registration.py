"""Registers the shipment-logistics family (loaded through the ``envgym.envs`` entry point)."""

from __future__ import annotations

from pathlib import Path

from envgym.registry import register_bundle


def _default_bundle() -> Path:
    from envgym.envs.procedural_kit.build import default_bundle_dir
    from envgym.envs.shipment_logistics.build import RECIPE

    return default_bundle_dir(RECIPE)


def register_envs() -> None:
    register_bundle(
        "shipment-logistics-v0",
        _default_bundle,
        description="Shipment logistics: routes through a hub network under hop, mode, hazmat and deadline rules with shared lane capacities and a tight budget.",
    )
