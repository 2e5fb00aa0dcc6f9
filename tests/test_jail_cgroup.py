"""A jail's processes together are bounded (cgroup.py), not only each process (RLIMIT_AS).

Four processes of 100 MiB each, every one far under the per-process limit, in a jail whose
total bound is 200 MiB: where the host gives envgym a cgroup, the kernel kills inside the jail.
Without one (``ENVGYM_JAIL_CGROUP=0`` or no usable hierarchy) the same command succeeds —
which is exactly what went wrong before the bound existed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from envgym.sandbox import cgroup
from envgym.sandbox.bwrap import bwrap_available
from envgym.sandbox.command_jail import CommandLimits, run_command

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not usable here")
needs_cgroup = pytest.mark.skipif(
    not cgroup.support()[0], reason=f"no cgroup for jails: {cgroup.describe()}"
)

MIB = 1024**2
# Each child touches 100 MiB (bytearray pages are written), holds it, and waits; the parent
# reports how many children survived.  Under a 200 MiB bound at most one fits.
HOG = r"""
import os, sys, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = bytearray(100 * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
ok = sum(os.waitpid(pid, 0)[1] == 0 for pid in kids)
print("survivors", ok)
sys.exit(0 if ok == 4 else 1)
"""
LIMITS = CommandLimits(timeout_s=60, memory_bytes=1024 * MIB, total_memory_bytes=200 * MIB)


def _hog() -> list[str]:
    return ["/usr/bin/python3", "-c", HOG]


@needs_cgroup
def test_processes_together_over_the_jail_bound_are_killed() -> None:
    result = run_command(_hog(), mounts=[], workdir="/", limits=LIMITS)
    assert not result.ok, result
    assert "survivors 4" not in result.stdout, result
    assert result.error is not None and "memory bound" in result.error, result


def test_the_same_jail_without_cgroup_has_only_per_process_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cgroup, "_detected", [("", (), "turned off for this test")])
    result = run_command(_hog(), mounts=[], workdir="/", limits=LIMITS)
    assert result.ok and "survivors 4" in result.stdout, result


@needs_cgroup
def test_the_jail_group_is_removed_afterwards() -> None:
    _, parents, _ = cgroup.support()
    before = {p: set(os.listdir(p)) for p in parents}
    run_command(["/bin/true"], mounts=[], workdir="/", limits=LIMITS)
    run_command(["/bin/sleep", "30"], mounts=[], workdir="/", limits=CommandLimits(timeout_s=0.5))
    mine = f"{cgroup.PREFIX}{os.getpid()}-"
    for parent in parents:
        left = {n for n in set(os.listdir(parent)) - before[parent] if n.startswith(mine)}
        assert not left, left


def test_describe_says_which_bound_is_active(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "_detected", [])
    monkeypatch.setenv(cgroup.ENV_SWITCH, "0")
    assert (
        cgroup.describe()
        == "jail memory bound: rlimits only (per process): turned off (ENVGYM_JAIL_CGROUP=0)"
    )
    monkeypatch.setattr(cgroup, "_detected", [])


def test_kernel_jail_limits_carry_a_total_bound() -> None:
    from envgym.sandbox.kernel_jail import JailLimits

    assert JailLimits().total_memory_bytes == 4 * 1024**3
    with pytest.raises(ValueError, match="total_memory_bytes"):
        JailLimits(total_memory_bytes=0)


@needs_cgroup
def test_kernel_jail_runs_inside_its_bounded_group(tmp_path: Path) -> None:
    """The kernel jail's program is in a fresh group with the total bound from the start (it
    joins between fork and exec), and the group is gone once the jail is killed."""
    from envgym.sandbox.kernel_jail import JailDirs, JailLimits, launch

    dirs = JailDirs(workspace=tmp_path / "ws", ipc=tmp_path / "ipc")
    for path in (dirs.workspace, dirs.ipc):
        path.mkdir()
    limits = JailLimits(total_memory_bytes=300 * MIB)
    jail = launch("http.server", ["--bind", "127.0.0.1", "8123"], dirs, limits=limits)
    try:
        assert jail.group is not None
        deadline = time.monotonic() + 20
        while jail.find_main() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert jail.main_pid is not None and jail.alive(), jail.diagnostics(dirs.ipc)
        memory = jail.group.dirs[0]
        assert jail.main_pid in jail.group.pids()
        name = "memory.max" if jail.group.kind == "v2" else "memory.limit_in_bytes"
        assert int((memory / name).read_text()) == 300 * MIB
    finally:
        jail.kill()
    assert not any(d.exists() for d in jail.group.dirs)


BUNDLE_TOOLS = '''
import os, time


def hog() -> int:
    """Fork four children of 100 MiB each; how many lived."""
    kids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            block = bytearray(100 * 1024 * 1024)
            for i in range(0, len(block), 4096):
                block[i] = 1
            time.sleep(2)
            os._exit(0)
        kids.append(pid)
    return sum(os.waitpid(pid, 0)[1] == 0 for pid in kids)
'''


def _bundle_hog(make_bundle, tmp_path: Path):
    from envgym.sandbox import open_sandbox
    from envgym.sandbox.base import Limits

    bundle = make_bundle(BUNDLE_TOOLS)
    state = tmp_path / "episode"
    state.mkdir()
    with open_sandbox(bundle, "bwrap", Limits(call_timeout_s=30, memory_bytes=200 * MIB)) as box:
        box.reset(state)
        return box.call_tool("hog", {})


@needs_cgroup
def test_bundle_worker_processes_together_are_bounded(make_bundle, tmp_path: Path) -> None:
    outcome = _bundle_hog(make_bundle, tmp_path)
    assert not outcome.ok or outcome.value < 4, outcome


def test_bundle_worker_without_cgroup_has_only_per_process_limits(
    make_bundle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cgroup, "_detected", [("", (), "turned off for this test")])
    outcome = _bundle_hog(make_bundle, tmp_path)
    assert outcome.ok and outcome.value == 4, outcome
