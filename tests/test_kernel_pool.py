"""The kernel pool: warm kernels, a fresh namespace per episode, health checks, bounds,
crash recovery — on real jailed ipykernels.  One pool per module keeps this cheap."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgym.tools.python_kernel import KernelConfig, KernelPool, SyncKernelPool

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pool() -> Iterator[SyncKernelPool]:
    with SyncKernelPool(KernelConfig(timeout_s=10), warm=1, max_kernels=4) as p:
        yield p


def test_state_persists_across_executions_and_values_are_shown(pool: SyncKernelPool) -> None:
    with pool.acquire() as s:
        first = s.execute("x = 6 * 7\nx")
        assert (first.status, first.text) == ("ok", "42\n")
        second = s.execute("print(x + 1)\nimport sys\nprint('warn', file=sys.stderr)")
        assert (second.status, second.text) == ("ok", "43\nwarn\n")
        error = s.execute("1 / 0")
        assert error.status == "error" and error.error is not None
        assert error.text.endswith("ZeroDivisionError: division by zero")
        assert s.execute("x").text == "42\n"  # an exception does not lose the namespace


def test_runs_in_the_workspace_as_an_unprivileged_user(pool: SyncKernelPool) -> None:
    with pool.acquire() as s:
        (s.workspace / "data.csv").write_text("a,b\n1,2\n")
        s.hand_over_workspace()
        result = s.execute(
            "import os\nprint(os.getcwd(), sorted(os.listdir()), os.getuid() != 0)\nopen('data.csv').read()"
        )
        assert result.text == "/workspace ['data.csv'] True\n'a,b\\n1,2\\n'\n"
        assert s.execute("open('out.txt', 'w').write('hi')").text == "2\n"
        assert (s.workspace / "out.txt").read_text() == "hi"


def test_every_episode_gets_a_fresh_namespace_process_and_filesystem(pool: SyncKernelPool) -> None:
    first = pool.acquire()
    dirty = first.execute(
        "import os, statistics, builtins, threading, time\n"
        "secret = 'leak'\n"
        "statistics.mean = lambda *a: 'patched'\n"  # a monkeypatched module
        "builtins.leak = 1\n"  # a polluted builtin
        "open('/tmp/planted', 'w').write('x'); open('planted', 'w').write('x')\n"
        "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
        "os.getpid()"
    )
    assert dirty.status == "ok", dirty.text
    old_jail = first.session.kernel.jail
    assert old_jail is not None and old_jail.alive()
    first.close()
    second = pool.acquire()
    try:
        check = second.execute(
            "import os, statistics, builtins\n"
            "print('secret' in dir(), statistics.mean([1]), hasattr(builtins, 'leak'),\n"
            "      os.path.exists('/tmp/planted'), os.listdir(), os.getpid())"
        )
        assert check.status == "ok"
        assert check.text.startswith("False 1 False False [] ")
        # the pid namespace is fresh too, so pids repeat: the host-side process is what differs
        assert second.session.kernel.jail.pid != old_jail.pid  # type: ignore[union-attr]
        # The released kernel is killed (in the background): its jail must be gone for good,
        # with the sleeping thread and everything else it held.
        old_jail.proc.wait(timeout=10)
        assert not old_jail.alive()
        with pytest.raises(ProcessLookupError):
            os.kill(old_jail.pid, 0)
    finally:
        second.close()


def test_dead_idle_kernels_are_replaced_on_acquire(pool: SyncKernelPool) -> None:
    stats = pool.stats()
    victim = pool.pool._idle[0] if pool.pool._idle else None
    if victim is None:  # the refill is still starting it: take one and retry
        pool.acquire().close()
        pool._run(asyncio.sleep(3))
        victim = pool.pool._idle[0]
    os.killpg(victim.jail.pid, signal.SIGKILL)  # type: ignore[union-attr]
    victim.jail.proc.wait()  # type: ignore[union-attr]
    with pool.acquire() as s:
        assert s.execute("1 + 1").text == "2\n"
    assert pool.stats().replaced_unhealthy == stats.replaced_unhealthy + 1


def test_a_kernel_killed_from_outside_mid_episode_is_restarted(pool: SyncKernelPool) -> None:
    with pool.acquire() as s:
        s.execute("y = 1")
        jail = s.session.kernel.jail
        assert jail is not None
        os.killpg(jail.pid, signal.SIGKILL)
        jail.proc.wait()
        result = s.execute("print('alive')")
        assert result.restarted and result.status == "ok"
        assert result.text.startswith(
            "The Python kernel had died (killed by SIGKILL) and was restarted."
        )
        assert result.text.endswith("alive\n")
        assert s.execute("y").status == "error"  # the namespace went with the kernel
        assert s.restarts == 1


def test_a_session_cannot_be_used_after_close(pool: SyncKernelPool) -> None:
    s = pool.acquire()
    s.close()
    s.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        s.execute("1")


def test_async_api_bounded_pool_waits_and_times_out(tmp_path: object) -> None:
    async def scenario() -> None:
        async with KernelPool(KernelConfig(timeout_s=10), warm=0, max_kernels=1) as pool:
            first = await pool.acquire()  # cold: nothing warm
            assert (await first.execute("21 * 2")).text == "42\n"
            with pytest.raises(TimeoutError, match="max_kernels=1"):
                await pool.acquire(timeout_s=0.5)
            waiter = asyncio.ensure_future(pool.acquire(timeout_s=60))
            await asyncio.sleep(0.2)
            assert not waiter.done()
            await first.close()
            second = await waiter  # freed by the release
            assert (await second.execute("'ok'")).text == "'ok'\n"
            assert pool.stats().total <= 1
            await second.close()
        assert pool.root is not None and not pool.root.exists()

    asyncio.run(scenario())


def test_bad_pool_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="warm <= max_kernels"):
        KernelPool(warm=3, max_kernels=2)
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        KernelConfig(timeout_s=0)


def test_directories_of_dead_pools_are_pruned(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])  # a pid that has exited
    dead.wait()
    orphan = tmp_path / f"envgym-kernels-{dead.pid}-abc123"
    (orphan / "ws-1").mkdir(parents=True)
    mine = tmp_path / f"envgym-kernels-{os.getpid()}-live"
    mine.mkdir()

    async def scenario() -> None:
        async with KernelPool(warm=0, root=tmp_path):
            pass

    asyncio.run(scenario())
    assert not orphan.exists() and mine.exists()


_EXIT_SCRIPT = """
from envgym.tools.python_kernel import KernelConfig, SyncKernelPool
pool = SyncKernelPool(KernelConfig(preload=("numpy",)), warm=2, max_kernels=4, wait=False)
session = pool.acquire()
print(pool.pool.root, session.execute("print(1 + 1)").text.strip(), flush=True)
"""  # exits with a session leased and the refill starting kernels: the exit hook closes it all


def test_a_process_exits_promptly_with_its_pool_closed() -> None:
    """Before, closing at exit hung for 30 s ("Task was destroyed but it is pending")."""
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-2000:]
    root, printed = done.stdout.split()
    assert printed == "2"
    assert "Task was destroyed" not in done.stderr and "TimeoutError" not in done.stderr, (
        done.stderr[-2000:]
    )
    assert not Path(root).exists()  # close() ran to the end: kernels killed, workspaces unmounted
