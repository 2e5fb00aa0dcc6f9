"""A host process with more than 1,024 open fds can still run sandboxes and jails.

``select.select`` refuses fds >= 1024 (FD_SETSIZE): with ~146 live bwrap envs, or an HTTP
server holding ~1,100 idle sockets, every sandbox reset (which waits on the old worker's pidfd)
raised ``ValueError``.  Here the test process itself holds 1,100 extra fds, so every fd the
sandbox and the jail open afterwards is numbered above 1,024.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envgym.sandbox import open_sandbox
from envgym.sandbox.base import Limits
from envgym.sandbox.bwrap import bwrap_available
from envgym.sandbox.command_jail import CommandLimits, Mount, run_command

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not usable here")

TOOLS = '''
def ping() -> str:
    """Answer pong."""
    return "pong"
'''
EXTRA_FDS = 1100


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = EXTRA_FDS + 512
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    fds = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(EXTRA_FDS)]
    try:
        assert max(fds) >= 1024
        yield
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_sandbox_reset_call_and_kill_with_high_fds(
    many_fds: None, make_bundle: Callable[..., Path], tmp_path: Path
) -> None:
    bundle = make_bundle(TOOLS)
    with open_sandbox(bundle, "bwrap", Limits(call_timeout_s=10)) as box:
        for episode in range(2):  # the second reset kills the first worker (waits on its pidfd)
            state = tmp_path / f"episode{episode}"
            state.mkdir()
            box.reset(state)
            outcome = box.call_tool("ping", {})
            assert outcome.ok and outcome.value == "pong", outcome.message


def test_command_jail_with_high_fds(many_fds: None, tmp_path: Path) -> None:
    result = run_command(
        ["/bin/sh", "-c", "echo hi > out.txt && cat out.txt"],
        mounts=[Mount(tmp_path, "/w", writable=True)],
        workdir="/w",
    )
    assert result.ok and result.stdout == "hi\n", result


def test_command_jail_killed_on_timeout_with_high_fds(many_fds: None, tmp_path: Path) -> None:
    result = run_command(
        ["/bin/sleep", "30"], mounts=[], workdir="/", limits=CommandLimits(timeout_s=1)
    )
    assert result.timed_out and result.returncode is None, result
