"""Registers the search-QA family (loaded through the ``envgym.envs`` entry point)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envgym.core import Env
from envgym.registry import register


def _bundle_dir() -> Path:
    from envgym.envs.search_qa.build import default_bundle_dir

    return default_bundle_dir()


def _make(**kwargs: Any) -> Env:
    from envgym.envs.search_qa.env import SearchQAEnv

    return SearchQAEnv(**kwargs)


def register_envs() -> None:
    register("search-qa-v0", _make, override=True, bundle_dir=_bundle_dir,
             description="Search QA (DeepSeek-V3.2 search agent, offline): multi-hop questions about "
                         "Debian packages answered with search/open/find over a local index.")  # fmt: skip
