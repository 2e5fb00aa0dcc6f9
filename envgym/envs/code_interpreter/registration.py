"""Registers the code-interpreter family (loaded through the ``envgym.envs`` entry point)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from envgym.core import Env
from envgym.registry import register

FAMILIES = {
    "code-interpreter-v0": ("all", "math, logic and data-science problems"),
    "code-interpreter-math-v0": ("math", "reasoning-gym arithmetic, number theory and algebra"),
    "code-interpreter-logic-v0": (
        "logic",
        "reasoning-gym puzzles: grids, sudoku, Brainf*ck, sorting",
    ),
    "code-interpreter-data-v0": ("data", "questions over generated CSV and SQLite datasets"),
}


def _bundle_dir(family: str) -> Path:
    from envgym.envs.code_interpreter.build import default_bundle_dir

    return default_bundle_dir(family)


def _make(family: str, **kwargs: Any) -> Env:
    from envgym.envs.code_interpreter.env import CodeInterpreterEnv

    if "bundle" not in kwargs:
        kwargs["bundle"] = _bundle_dir(family)
    return CodeInterpreterEnv(**kwargs)


def register_envs() -> None:
    for env_id, (family, what) in FAMILIES.items():
        register(
            env_id,
            partial(_make, family),
            description=f"Code interpreter (DeepSeek-V3.2 §3.2.3) on a jailed Jupyter kernel: {what}.",
            bundle_dir=partial(_bundle_dir, family),
            override=True,
        )
