"""Registers the trip-planning family (loaded through the ``envgym.envs`` entry point)."""

from __future__ import annotations

from pathlib import Path

from envgym.registry import register_bundle


def _default_bundle() -> Path:
    from envgym.envs.trip_planning.build import default_bundle_dir

    return default_bundle_dir()


def register_envs() -> None:
    register_bundle(
        "trip-planning-v0",
        _default_bundle,
        description="Trip planning (DeepSeek-V3.2 §3.2.3): 15 tools over a city/hotel/restaurant database; "
        "plan multi-day itineraries under budget, rating, weather and transport constraints.",
    )
