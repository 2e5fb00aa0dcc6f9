"""Registers the meeting-scheduling family (loaded through the ``envgym.envs`` entry point)."""

from __future__ import annotations

from pathlib import Path

from envgym.registry import register_bundle


def _default_bundle() -> Path:
    from envgym.envs.meeting_scheduling.build import RECIPE
    from envgym.envs.procedural_kit.build import default_bundle_dir

    return default_bundle_dir(RECIPE)


def register_envs() -> None:
    register_bundle(
        "meeting-scheduling-v0",
        _default_bundle,
        description="Meeting scheduling across calendars: meetings in order within time-zone shifted working hours, around events and lunch, with buffers, rooms and representatives.",
    )
