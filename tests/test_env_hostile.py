"""Hostile tools seen through ``env.step``: an error observation, the episode goes on."""

from __future__ import annotations

from pathlib import Path

import pytest
from bundle_factory import TOOLS, make_notes_bundle

from envgym.bundle_env import BundleEnv
from envgym.sandbox import Limits

HOSTILE = (
    TOOLS
    + '''

def spin(seconds: int) -> str:
    """Loop forever.

    Args:
        seconds: ignored.
    """
    while True:
        pass


def hog(gigabytes: int) -> int:
    """Allocate memory.

    Args:
        gigabytes: how much.
    """
    return len(bytearray(gigabytes * 1024**3))


def die(code: int) -> str:
    """Exit the worker.

    Args:
        code: exit status.
    """
    import os

    os._exit(code)


def peek(path: str) -> str:
    """Read any file.

    Args:
        path: the file.
    """
    with open(path) as f:
        return f.read()
'''
)


def _call(name: str, args: str, cid: str) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
        ],
    }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    root = make_notes_bundle(tmp_path_factory.mktemp("hostile") / "b", tools=HOSTILE)
    env = BundleEnv(root, sandbox="bwrap", limits=Limits(call_timeout_s=2.0, memory_bytes=1024**3))
    yield env
    env.close()


@pytest.mark.parametrize(
    ("name", "args", "kind"),
    [
        ("spin", '{"seconds": 1}', "timeout"),
        ("hog", '{"gigabytes": 10}', "memory"),
        ("die", '{"code": 3}', "crash"),
    ],
)
def test_hostile_call_is_an_observation_and_the_episode_continues(
    env: BundleEnv, name: str, args: str, kind: str
) -> None:
    env.reset(seed=0)
    env.step(_call("set_note", '{"key": "secret", "value": "mango"}', "w"))
    obs, _, terminated, truncated, info = env.step(_call(name, args, "h"))
    assert obs["messages"][-1]["role"] == "tool"
    assert obs["messages"][-1]["content"].startswith(f"Error: {name} failed ({kind})")
    assert info["errors"] == {kind: 1}
    assert not terminated and not truncated
    # the worker was restarted on the same episode state: the write above survived
    obs, *_ = env.step(_call("get_note", '{"key": "secret"}', "r"))
    assert obs["messages"][-1]["content"] == "mango"


def test_reading_outside_the_bundle_is_refused(env: BundleEnv, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    env.reset(seed=0)
    obs, *_ = env.step(_call("peek", f'{{"path": "{secret}"}}', "p"))
    content = obs["messages"][-1]["content"]
    assert content.startswith("Error: peek failed (exception)")
    assert "host secret" not in content
    assert "FileNotFoundError" in content or "PermissionError" in content
