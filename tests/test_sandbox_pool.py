"""Pre-started workers (envgym/sandbox/pool.py): a reset hands over a booted, never-used worker
on its own fresh state, and the isolation guarantees stay: one worker per episode, a fresh
state tmpfs per episode, nothing left running after close(), nothing inherited by a fork."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bundle_factory import make_notes_bundle

from envgym.bundle_env import BundleEnv
from envgym.sandbox import open_sandbox
from envgym.sandbox.pool import SPARES_ENV, max_spares, refiller
from envgym.sandbox.process import ProcessSandbox
from envgym.state import EpisodeDirs

TOOLS_EXTRA = '''

_served = 0


def served() -> int:
    """How many calls this worker process served (module globals live as long as it)."""
    global _served
    _served += 1
    return _served


def pid() -> int:
    """The worker's pid inside its sandbox."""
    import os
    return os.getpid()
'''


def _wait_ready(box: ProcessSandbox, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not (box._pool is not None and box._pool.ready()):
        assert time.monotonic() < deadline, "no spare worker was made"
        time.sleep(0.02)


@pytest.fixture
def bundle(tmp_path: Path, require_backend: Callable[[str], None]) -> Path:
    require_backend("bwrap")
    from bundle_factory import TOOLS

    return make_notes_bundle(tmp_path / "notes", tools=TOOLS + TOOLS_EXTRA)


@pytest.fixture
def env(bundle: Path) -> Iterator[BundleEnv]:
    made = BundleEnv(bundle, sandbox="bwrap", task=0)
    try:
        yield made
    finally:
        made.close()


def test_reset_hands_over_a_fresh_worker_on_fresh_state(env: BundleEnv) -> None:
    box = env.sandbox
    assert isinstance(box, ProcessSandbox) and env._pooled
    _wait_ready(box)
    env.reset()
    first_state = env._state_path
    assert env._release is not None and first_state != env._dirs.current
    assert env.sandbox.call_tool("set_note", {"key": "mine", "value": "episode 1"}).ok
    assert env.sandbox.call_tool("served", {}).value == 1
    _wait_ready(box)
    env.reset()
    assert env._release is not None, "the reset did not take the spare"
    assert env._state_path != first_state
    # A new worker (module globals start over) on pristine state (the last write is gone).
    assert env.sandbox.call_tool("served", {}).value == 1
    assert "mine" not in env.sandbox.call_tool("list_keys", {}).value
    _wait_ready(box)
    env._release_pooled()  # the reaper has unmounted the first episode's directory
    assert not first_state.exists()


def test_without_a_spare_reset_starts_the_worker_inline(env: BundleEnv) -> None:
    box = env.sandbox
    assert isinstance(box, ProcessSandbox) and box._pool is not None
    box._pool.close()  # as when every spare of the process is taken
    env.reset()
    assert env._release is None and env._state_path == env._dirs.current
    assert env.sandbox.call_tool("served", {}).value == 1


def _sandbox_processes(handles: list[object]) -> list[int]:
    alive = []
    for handle in handles:
        proc = handle.proc  # type: ignore[attr-defined]
        if proc.poll() is None:
            alive.append(proc.pid)
    return alive


@pytest.mark.usefixtures("unforked")  # reads the bwrap launch's process
def test_close_kills_the_spare_and_every_episode_worker(env: BundleEnv) -> None:
    box = env.sandbox
    assert isinstance(box, ProcessSandbox) and box._pool is not None
    handles = []
    for _ in range(3):
        env.reset()
        assert env.sandbox.call_tool("served", {}).ok
        handles.append(box._conn.handle)  # type: ignore[union-attr]
        _wait_ready(box)
    spare = box._pool._spare
    assert spare is not None
    handles.append(spare.conn.handle)
    states = [spare.state, env._state_path]
    env.close()
    assert _sandbox_processes(handles) == []
    assert not any(path.exists() for path in states)


def test_a_forked_child_does_not_inherit_the_pool(bundle: Path, tmp_path: Path) -> None:
    dirs = EpisodeDirs(bundle / "state")
    box = open_sandbox(bundle, "bwrap")
    try:
        assert isinstance(box, ProcessSandbox) and box.start_pool(dirs.lease)
        _wait_ready(box)
        # Fork once the spare has greeted: forking while its bwrap was still setting up made
        # that bwrap miss its state directory in 2 of 4 runs (cause not found yet; see the
        # sandbox-scale report).  What is tested here is only what the child does to the pool.
        spare = box._pool._spare  # type: ignore[union-attr]
        poller = select.poll()
        poller.register(spare.conn.handle.read_fd, select.POLLIN)
        assert poller.poll(30_000), "the spare never greeted"
        pid = os.fork()
        if pid == 0:  # the child: finds no spare and must not kill the parent's
            code = 0 if box._pool.take() is None else 1  # type: ignore[union-attr]
            box._pool.close()  # type: ignore[union-attr]
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        taken = box.take_pooled()
        assert taken is not None
        assert box.call_tool("served", {}).value == 1  # the parent's spare is alive and well
    finally:
        box.close()
        dirs.cleanup()


def test_spares_are_bounded_per_process(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refiller(), "limit", 0)
    env = BundleEnv(bundle, sandbox="bwrap", task=0)
    try:
        time.sleep(0.3)
        assert env.sandbox._pool is not None and not env.sandbox._pool.ready()  # type: ignore[attr-defined]
        env.reset()
        assert env._release is None and env.sandbox.call_tool("served", {}).ok
    finally:
        env.close()


def test_the_spare_budget_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPARES_ENV, "lots")
    with pytest.raises(ValueError, match="ENVGYM_SANDBOX_SPARES must be a whole number"):
        max_spares()
    monkeypatch.setenv(SPARES_ENV, "-1")
    with pytest.raises(ValueError, match="between 0 and 100000"):
        max_spares()
    monkeypatch.setenv(SPARES_ENV, "3")
    assert max_spares() == 3
