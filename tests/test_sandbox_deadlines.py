"""Deadlines that measure what they name: the start-up deadline bounds the worker's start only.

A model's first turn can take longer than the start-up deadline (CPU inference, long thinking,
big batches).  The worker started at ``reset`` greets long before; its greeting must still be
read when the first tool call comes, however late (the episode must not error because its
model was slow).  The deadline is shortened here (1 s, then a 3 s first turn) so the test proves
the property without waiting the real 60 s.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from envgym.sandbox import Limits, open_sandbox

TOOLS = '''
from envgym.runtime import state_dir


def ping(x: int) -> int:
    """Echo x plus one.

    Args:
        x: a number.
    """
    return x + 1


def files() -> list:
    """The names in the episode state."""
    return sorted(p.name for p in state_dir().iterdir())
'''


@pytest.fixture
def bundle(make_bundle: Callable[..., Path]) -> Path:
    return make_bundle(TOOLS)


def test_slow_first_turn_does_not_lose_the_episode(
    bundle: Path, tmp_path: Path, require_backend: Callable[[str], None]
) -> None:
    require_backend("bwrap")
    state = tmp_path / "episode"
    shutil.copytree(bundle / "state", state)
    limits = Limits(call_timeout_s=5, startup_timeout_s=1.0)
    with open_sandbox(bundle, "bwrap", limits) as box:
        box.reset(state)
        time.sleep(3.0)  # the model's first turn: three times the start-up deadline
        outcome = box.call_tool("ping", {"x": 41})
        assert outcome.ok, outcome.message
        assert outcome.value == 42
        assert box.call_tool("files", {}).ok


def test_startup_deadline_is_a_limit() -> None:
    assert Limits().startup_timeout_s == 60.0
    assert Limits(startup_timeout_s=2.5).startup_timeout_s == 2.5
