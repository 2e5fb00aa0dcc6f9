"""The setup cache's folder names come from instance fields (input): they never name a path."""

from __future__ import annotations

import pytest

from envgym.cache import cache_root
from envgym.envs.swe.recipe import Recipe
from envgym.envs.swe.setup_agent import env_folder


@pytest.mark.parametrize("version", ["../../x", "/etc", "a/../../b", "..", "1.2\n3", ""])
def test_a_version_never_leaves_the_cache_folder(version: str) -> None:
    folder = env_folder("https://example.org/owner/proj.git", version, Recipe(), "bwrap")
    assert folder.parent == cache_root() / "swe" / "envs"
    assert "/" not in folder.name and "\n" not in folder.name and not folder.name.startswith(".")


def test_an_ordinary_version_keeps_its_name() -> None:
    folder = env_folder("owner/proj", "1.2", Recipe(), "bwrap")
    assert folder.name.startswith("proj-1.2-")
