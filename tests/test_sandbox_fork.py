"""Forked bwrap workers (``ENVGYM_SANDBOX_FORK=1``): every isolation property, per forked child.

The attacks of test_sandbox_isolation.py run again here in fork mode (imported below, with the
backend fixture narrowed to bwrap and the switch set), then what forking adds to check: two
episodes alive at once (siblings of one fork server) see neither each other's state nor
processes, each has its own uid, no_new_privs, no capabilities and its own cgroup with the
limits, inherits no fd of the server, and no module global of one episode reaches another; a
crashing worker leaves the server and its siblings alone, a killed server is restarted, and
nothing runs after close().  docs/SANDBOX.md, "Forked workers", says which break of the code
turned each one red.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import test_sandbox_isolation as iso
from test_sandbox_isolation import (  # noqa: F401 - collected again here, in fork mode
    LIMITS,
    bundle,
    dirs,
    test_episode_state_is_bounded,
    test_host_secret_not_in_worker_environment,
    test_swap_race_cannot_touch_host_files,
    test_thread_of_call_n_cannot_forge_the_reply_to_call_n_plus_1,
    test_thread_of_episode_1_cannot_write_episode_2,
)

from envgym.sandbox import Limits, Sandbox, SandboxUnavailable, open_sandbox
from envgym.sandbox.bwrap import BwrapSandbox
from envgym.sandbox.fork import ENV_SWITCH, ForkedWorker, fork_server
from envgym.sandbox.jail import count_processes
from envgym.state import EpisodeDirs

PROBES = '''
import json
import dataclasses
import os
import resource
import socket
import subprocess
from envgym.runtime import state_dir

SEEN = []


def status() -> dict:
    """This worker's identity as the kernel holds it."""
    fields = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    with open("/proc/self/cgroup") as fh:
        cgroup = fh.read()
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return {
        "uid": os.getuid(),
        "pid": os.getpid(),
        "nnp": fields["NoNewPrivs"],
        "cap_eff": fields["CapEff"],
        "cap_prm": fields["CapPrm"],
        "cap_bnd": int(fields["CapBnd"], 16),
        "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
        "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "cgroup": cgroup,
        "fds": fds,
    }


def mark(name: str) -> list:
    """Write a file named ``name`` into this episode's state; the state's names."""
    with open(os.path.join(str(state_dir()), name), "w") as fh:
        fh.write("mine")
    return sorted(os.listdir(str(state_dir())))


def find(name: str) -> list:
    """Every path named ``name`` on a tmpfs this worker has mounted (where a state could be:
    an episode's state is a tmpfs; walking /usr too is too slow on a loaded machine)."""
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            if right.split()[0] == "tmpfs":
                points.append(left.split()[4])
    def same(path: str, device: int) -> bool:
        try:
            return os.lstat(path).st_dev == device
        except OSError:
            return False

    found = []
    for point in points:
        try:
            device = os.stat(point).st_dev
        except OSError:
            continue
        for root, dirs, files in os.walk(point):
            # This filesystem only (the root tmpfs holds the mount points of all the others).
            dirs[:] = [d for d in dirs if same(os.path.join(root, d), device)]
            found += [os.path.join(root, f) for f in files if f == name]
    return sorted(set(found))


def remember(value: str) -> dict:
    """A module global and a patched stdlib function, both as an episode leaves them."""
    seen = list(SEEN)
    SEEN.append(value)
    patched = json.dumps is not _ORIGINAL_DUMPS
    json.dumps = lambda *a, **k: "patched"
    return {"seen_before": seen, "json_was_patched": patched}


_ORIGINAL_DUMPS = json.dumps


def crash() -> str:
    """Kill this worker."""
    os.kill(os.getpid(), 9)
    return "unreachable"


def fork_bomb(n: int) -> int:
    """Start up to ``n`` sleeping processes; how many started."""
    started = 0
    for _ in range(n):
        try:
            subprocess.Popen(["/bin/sleep", "30"])
            started += 1
        except OSError:
            break
    return started


def loopback() -> str:
    """A round trip over 127.0.0.1 inside the episode's own network namespace."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=5) as client:
            peer, _ = server.accept()
            with peer:
                client.sendall(b"ping")
                return peer.recv(4).decode()
'''

CAP_SYS_ADMIN, CAP_SETPCAP, CAP_NET_ADMIN = 21, 8, 12


@pytest.fixture(autouse=True)
def fork_mode(monkeypatch: pytest.MonkeyPatch, require_backend: Callable[[str], None]) -> None:
    require_backend("bwrap")
    if os.geteuid() != 0:
        pytest.skip("forked workers need a root host")
    monkeypatch.setenv(ENV_SWITCH, "1")


@pytest.fixture
def backend() -> str:
    """The isolation module's tests, bwrap only (the switch applies to bwrap)."""
    return "bwrap"


@pytest.fixture
def box(bundle: Path, backend: str) -> Iterator[Sandbox]:  # noqa: F811 - the fixture
    with open_sandbox(bundle, backend, LIMITS) as sandbox:
        assert isinstance(sandbox, BwrapSandbox) and sandbox.fork
        yield sandbox


@pytest.fixture
def probes(make_bundle: Callable[..., Path]) -> Path:
    return make_bundle(PROBES)


@pytest.fixture
def pair(probes: Path) -> Iterator[tuple[Sandbox, Sandbox, EpisodeDirs, EpisodeDirs]]:
    """Two sandboxes of one bundle, each with an episode: two children of one fork server."""
    made = [EpisodeDirs(probes / "state", quota_bytes=8 << 20) for _ in range(2)]
    boxes = [open_sandbox(probes, "bwrap", LIMITS) for _ in range(2)]
    try:
        for sandbox, episode in zip(boxes, made):
            sandbox.reset(episode.refill())
        yield boxes[0], boxes[1], made[0], made[1]
    finally:
        for sandbox in boxes:
            sandbox.close()
        for episode in made:
            episode.cleanup()


def _value(sandbox: Sandbox, tool: str, **arguments: object) -> object:
    outcome = sandbox.call_tool(tool, dict(arguments))
    assert outcome.ok, outcome
    return outcome.value


def _handle(sandbox: Sandbox) -> ForkedWorker:
    conn = sandbox._conn  # type: ignore[attr-defined]
    assert conn is not None and isinstance(conn.handle, ForkedWorker)
    return conn.handle


def test_isolation_module_is_reused() -> None:
    # The imports above are the isolation module's own tests, not copies.
    assert (
        test_thread_of_episode_1_cannot_write_episode_2
        is iso.test_thread_of_episode_1_cannot_write_episode_2
    )


def test_siblings_see_neither_each_others_state_nor_processes(pair: tuple) -> None:
    a, b, _, _ = pair
    assert _value(a, "mark", name="only-in-a") == ["db.sqlite", "only-in-a"]
    assert _value(b, "mark", name="only-in-b") == ["db.sqlite", "only-in-b"]
    assert _value(b, "find", name="only-in-a") == []
    assert _value(a, "find", name="only-in-b") == []
    assert _value(a, "find", name="only-in-a") == ["/state/only-in-a"]  # the probe finds
    # Its own pid namespace: its init (1) and itself (2), nothing of the sibling or the server.
    assert _value(a, "status")["procs"] == [1, 2]  # type: ignore[index]
    assert _value(b, "status")["procs"] == [1, 2]  # type: ignore[index]


def test_each_child_has_its_own_uid_no_new_privs_and_no_capabilities(pair: tuple) -> None:
    a, b, dirs_a, _ = pair
    first, second = _value(a, "status"), _value(b, "status")
    a.reset(dirs_a.refill())
    third = _value(a, "status")
    uids = {s["uid"] for s in (first, second, third)}  # type: ignore[index]
    assert len(uids) == 3 and all(uid >= 1 << 20 for uid in uids)
    for seen in (first, second, third):
        assert seen["nnp"] == "1", seen  # type: ignore[index]
        assert seen["cap_eff"] == seen["cap_prm"] == "0000000000000000", seen  # type: ignore[index]
        # What the server held to build the episode is not even in the bounding set.
        held = 1 << CAP_SYS_ADMIN | 1 << CAP_SETPCAP | 1 << CAP_NET_ADMIN
        assert not seen["cap_bnd"] & held, seen  # type: ignore[index]
        # The server raised its own fd limit (a pidfd per live episode); episodes get the
        # host's, as a bwrap worker does.
        assert seen["nofile"] == list(resource.getrlimit(resource.RLIMIT_NOFILE)), seen  # type: ignore[index]


def test_each_child_is_in_its_own_cgroup_with_the_limits(probes: Path) -> None:
    limits = Limits(call_timeout_s=10, max_processes=12)
    episodes = [EpisodeDirs(probes / "state", quota_bytes=8 << 20) for _ in range(2)]
    boxes = [open_sandbox(probes, "bwrap", limits) for _ in range(2)]
    try:
        groups = []
        for sandbox, episode in zip(boxes, episodes):
            sandbox.reset(episode.refill())
            _value(sandbox, "status")
            handle = _handle(sandbox)
            if handle.group is None:
                pytest.skip("no cgroup here (rlimits only)")
            watch = handle._locate()
            assert watch is not None
            assert {handle.init, watch.worker} <= handle.group.pids()
            assert (handle.group.dirs[-1] / "pids.max").read_text().strip() == "12"
            groups.append(handle.group.dirs)
        assert groups[0] != groups[1]
        # The bound holds: a bomb stops below it (init and worker count too).
        assert _value(boxes[0], "fork_bomb", n=40) < 12  # type: ignore[operator]
    finally:
        for sandbox in boxes:
            sandbox.close()
        for episode in episodes:
            episode.cleanup()


def test_no_fd_of_the_server_reaches_a_worker(pair: tuple) -> None:
    a, _, _, _ = pair
    fds = _value(a, "status")["fds"]  # type: ignore[index]
    kinds = " ".join(fds.values())
    assert "socket:" not in kinds and "pidfd" not in kinds, fds
    assert len(fds) <= 7, fds  # 0-2, the two channel fds, the output capture, listdir's own


def test_module_globals_do_not_leak_across_episodes(pair: tuple) -> None:
    a, b, dirs_a, _ = pair
    assert _value(a, "remember", value="episode 1") == {
        "seen_before": [],
        "json_was_patched": False,
    }
    # A sibling running at the same time has its own copy.
    assert _value(b, "remember", value="sibling") == {"seen_before": [], "json_was_patched": False}
    assert _value(a, "remember", value="again")["seen_before"] == ["episode 1"]  # type: ignore[index]
    a.reset(dirs_a.refill())
    assert _value(a, "remember", value="episode 2") == {
        "seen_before": [],
        "json_was_patched": False,
    }


def test_a_crashing_child_leaves_the_server_and_its_siblings_alone(pair: tuple) -> None:
    a, b, _, _ = pair
    server = _handle(a).server
    zygote, starts = server.pid, server.starts
    assert zygote is not None
    outcome = a.call_tool("crash", {})
    assert not outcome.ok and outcome.error is not None and outcome.error.value == "crash", outcome
    assert _value(b, "mark", name="still-here") == ["db.sqlite", "still-here"]
    assert _value(a, "status")["procs"] == [1, 2]  # type: ignore[index]  # restarted
    assert (server.pid, server.starts) == (zygote, starts)
    os.kill(zygote, 0)  # alive


def test_a_killed_server_is_restarted(pair: tuple) -> None:
    a, b, dirs_a, _ = pair
    assert _value(b, "mark", name="before") == ["before", "db.sqlite"]  # b has started
    server = _handle(b).server
    zygote, starts = server.pid, server.starts
    assert zygote is not None
    os.kill(zygote, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zygote}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    # Episodes it forked died with it (their init has PDEATHSIG): the call in flight is a
    # crash, the next one restarts the worker on the same state (on the next server in turn).
    lost = b.call_tool("mark", {"name": "lost"})
    assert not lost.ok and lost.error is not None and lost.error.value == "crash", lost
    assert _value(b, "mark", name="after") == ["after", "before", "db.sqlite"]
    # Launches take the servers in turn: the killed one comes round again and starts anew.
    for _ in range(len(fork_server.__globals__["_servers"][os.getpid()]) + 1):
        a.reset(dirs_a.refill())
        assert _value(a, "status")["procs"] == [1, 2]  # type: ignore[index]
        if _handle(a).server is server:
            break
    assert server.starts == starts + 1 and server.pid not in (None, zygote)


def test_a_stalled_server_fails_no_sibling(pair: tuple, probes: Path) -> None:
    """A launch that times out on a stalled server (stopped: a starved one) retires that server
    and is tried again on a fresh one; the episodes the stalled server forked keep working (it
    used to be killed, and every sibling's next call was a crash), and the retired server is
    stopped once its last episode has ended."""
    a, b, dirs_a, dirs_b = pair
    assert _value(a, "mark", name="before") == ["before", "db.sqlite"]
    slot = _handle(a).server
    stalled = slot.pid
    assert stalled is not None and _handle(b).server is slot
    quick = dataclasses.replace(LIMITS, startup_timeout_s=2)
    episode = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    os.kill(stalled, signal.SIGSTOP)
    try:
        with open_sandbox(probes, "bwrap", quick) as late:
            late.reset(episode.refill())
            assert _value(late, "mark", name="late") == ["db.sqlite", "late"]
            assert slot.pid not in (None, stalled)  # a fresh server took the retry
        assert _value(a, "mark", name="after") == ["after", "before", "db.sqlite"]
        assert _value(b, "mark", name="b") == ["b", "db.sqlite"]
        assert _running(stalled)  # retired, not stopped: two of its episodes are alive
    finally:
        os.kill(stalled, signal.SIGCONT)
        episode.cleanup()
    a.reset(dirs_a.refill())  # each episode's end releases the retired server
    assert _running(stalled)
    b.reset(dirs_b.refill())
    deadline = time.monotonic() + 10
    while _running(stalled) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _running(stalled)
    assert _value(a, "status")["procs"] == [1, 2]  # type: ignore[index]


def test_the_wait_for_a_busy_server_is_bounded(probes: Path) -> None:
    """Launches queue for the server's one thread; a launch waits for its turn no longer than
    its start-up deadline and says so (the wait had no bound)."""
    quick = dataclasses.replace(LIMITS, startup_timeout_s=1)
    episode = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    with open_sandbox(probes, "bwrap", LIMITS) as first:
        first.reset(episode.refill())
        slot = _handle(first).server
    started = time.monotonic()
    with slot._lock, open_sandbox(probes, "bwrap", quick) as sandbox:  # held: a busy server
        try:
            sandbox.reset(episode.refill())
            outcome = sandbox.call_tool("mark", {"name": "x"})
            assert not outcome.ok and "no turn at the fork server" in str(outcome), outcome
        except SandboxUnavailable as exc:
            assert "no turn at the fork server within 1 s" in str(exc)
    assert time.monotonic() - started < 15  # a bound, not a speed: unbounded, it hangs
    episode.cleanup()


def test_servers_of_an_old_package_stop_when_idle(probes: Path, tmp_path: Path) -> None:
    """A new staged package gets servers of its own; the old ones are retired, so they stop
    (they used to linger until garbage collection)."""
    episode = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    with open_sandbox(probes, "bwrap", LIMITS) as sandbox:
        sandbox.reset(episode.refill())
        assert _value(sandbox, "mark", name="x") == ["db.sqlite", "x"]
        slot = _handle(sandbox).server
    episode.cleanup()
    old = slot.pid
    assert old is not None and _running(old)
    fresh = fork_server(tmp_path, slot.mount_at, slot.env, slot._spawn)
    assert fresh is not slot and fresh.pid is None  # a new slot, started at its first launch
    deadline = time.monotonic() + 10
    while _running(old) and time.monotonic() < deadline:  # killed; its reaping is the kernel's
        time.sleep(0.01)
    assert not _running(old) and slot.pid is None


def test_a_dropped_sandbox_leaves_no_worker(probes: Path) -> None:
    """A sandbox garbage-collected without close(): its finalizer kills the forked worker (its
    pipes are plain fds, which nothing else would close)."""
    import gc

    episode = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    sandbox = open_sandbox(probes, "bwrap", LIMITS)
    sandbox.reset(episode.refill())
    assert _value(sandbox, "mark", name="x") == ["db.sqlite", "x"]
    init = _handle(sandbox).init
    del sandbox
    gc.collect()
    deadline = time.monotonic() + 10
    while _running(init) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _running(init)
    episode.cleanup()


def test_nothing_runs_after_close(probes: Path) -> None:
    episodes = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    uids, inits = set(), set()
    with open_sandbox(probes, "bwrap", LIMITS) as sandbox:
        for _ in range(3):
            sandbox.reset(episodes.refill())
            uids.add(_value(sandbox, "status")["uid"])  # type: ignore[index]
            assert _value(sandbox, "fork_bomb", n=3) == 3
            inits.add(_handle(sandbox).init)
    episodes.cleanup()
    assert [uid for uid in uids if count_processes(uid)] == []
    assert [pid for pid in inits if _running(pid)] == []


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited init waits a moment for the server to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_forked_workers_are_the_root_hosts_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from envgym.sandbox.fork import fork_requested

    monkeypatch.delenv(ENV_SWITCH)
    assert fork_requested(root=True) and not fork_requested(root=False)
    monkeypatch.setenv(ENV_SWITCH, "0")
    assert not fork_requested(root=True)
    monkeypatch.setenv(ENV_SWITCH, "yes")
    with pytest.raises(SandboxUnavailable, match=f"{ENV_SWITCH} must be 0 or 1"):
        fork_requested(root=True)


def test_a_bad_server_count_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from envgym.sandbox.fork import SERVERS_SWITCH, server_count

    for bad in ("lots", "0", "65"):
        monkeypatch.setenv(SERVERS_SWITCH, bad)
        with pytest.raises(ValueError, match=SERVERS_SWITCH):
            server_count()
    monkeypatch.setenv(SERVERS_SWITCH, "3")
    assert server_count() == 3


@pytest.mark.parametrize("forked", [False, True])
def test_loopback_works_in_both_modes(
    probes: Path, forked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bwrap's --unshare-net brings lo up; a forked episode's init does the same (it used to be
    down: "Network is unreachable"), so a bundle using a local socket works in either mode."""
    monkeypatch.setenv(ENV_SWITCH, "1" if forked else "0")
    episode = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    try:
        with open_sandbox(probes, "bwrap", LIMITS) as sandbox:
            assert isinstance(sandbox, BwrapSandbox) and sandbox.fork == forked
            sandbox.reset(episode.refill())
            assert _value(sandbox, "loopback") == "ping"
    finally:
        episode.cleanup()
