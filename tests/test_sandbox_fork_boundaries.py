"""Forked workers (``ENVGYM_SANDBOX_FORK=1``): the boundaries the design relies on, probed.

test_sandbox_fork.py checks what a worker sees of itself and of its siblings' state; these
check what the review of the fork mode found untested: the init's own privileges and fds, the
read-only filesystems every episode shares with the fork server (also from a nested user
namespace), the kernel channels between siblings (abstract sockets, SysV IPC, uts, ptys), the
server's fds and zombies over many episodes, pre-started workers made on refill threads, and
the host-secret check with a server started after the secret was set.  Each test's docstring
says which break of the code turns it red.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bundle_factory import TOOLS, make_notes_bundle
from test_sandbox_fork import (  # noqa: F401 - fixtures, used by name
    LIMITS,
    _handle,
    _running,
    _value,
    fork_mode,
    pair,
)

from envgym.bundle_env import BundleEnv
from envgym.sandbox import Sandbox, fork, open_sandbox, pool
from envgym.sandbox.bwrap import SANDBOX_PACKAGE
from envgym.sandbox.fork import ForkedWorker
from envgym.sandbox.jail import UID_BASE, count_processes
from envgym.state import EpisodeDirs

pytestmark = pytest.mark.timeout(180)

BOUNDARY_PROBES = '''
import ctypes
import errno
import json
import os
import socket

_libc = ctypes.CDLL(None, use_errno=True)
_KEEP = []  # what this episode holds open while a sibling looks: a listener, a pty
PR_GET_SECUREBITS, PR_SET_DUMPABLE = 27, 4
MS_REMOUNT, MS_BIND = 32, 4096
IPC_CREAT, IPC_EXCL = 0o1000, 0o2000
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000  # os.unshare is Python 3.12's


def _errno(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc))


def _fields(path: str) -> dict:
    fields = {}
    with open(path) as fh:
        for line in fh:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def identity() -> dict:
    """This worker's credentials as the kernel holds them."""
    fields = _fields("/proc/self/status")
    return {
        "caps": {k: v for k, v in fields.items() if k.startswith("Cap")},
        "securebits": _libc.prctl(PR_GET_SECUREBITS, 0, 0, 0, 0),
        "resuid": list(os.getresuid()),
        "resgid": list(os.getresgid()),
        "groups": os.getgroups(),
    }


def init_view() -> dict:
    """What this worker learns of its init (pid 1), and what it may do to it."""
    fields = _fields("/proc/1/status")
    keep = ("Name", "Uid", "Gid", "NoNewPrivs", "Seccomp")
    seen = {"status": {k: v for k, v in fields.items() if k.startswith("Cap") or k in keep}}
    try:
        os.kill(1, 0)
        seen["kill"] = "allowed"
    except OSError as exc:
        seen["kill"] = _errno(exc)
    for name in ("mem", "environ"):
        try:
            fh = open(f"/proc/1/{name}", "rb")
        except OSError as exc:
            seen[name] = "open: " + _errno(exc)
            continue
        with fh:
            try:
                fh.read(1)
                seen[name] = "read"
            except OSError as exc:
                seen[name] = "read: " + _errno(exc)
    return seen


def _attempts(paths: list) -> dict:
    """Each path: create a file, make a directory, remount it writable."""
    tried = {}
    for path in paths:
        got = {}
        name = os.path.join(path, f"envgym-probe-{os.getpid()}")
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except OSError as exc:
            got["create"] = _errno(exc)
        else:
            got["create"] = "created"
            os.unlink(name)
        try:
            os.mkdir(name + ".d")
        except OSError as exc:
            got["mkdir"] = _errno(exc)
        else:
            got["mkdir"] = "made"
            os.rmdir(name + ".d")
        for label, flags in (("bind_rw", MS_REMOUNT | MS_BIND), ("sb_rw", MS_REMOUNT)):
            if _libc.mount(None, path.encode(), None, ctypes.c_ulong(flags), None) == 0:
                got[label] = "remounted"
            else:
                got[label] = errno.errorcode.get(ctypes.get_errno(), "?")
        tried[path] = got
    return tried


def _map_root(uid: int, gid: int) -> str:
    """Map this process to root of its new user namespace (the strongest unprivileged try)."""
    try:
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # else /proc/self/*_map belong to root
        with open("/proc/self/setgroups", "w") as fh:
            fh.write("deny")
        with open("/proc/self/uid_map", "w") as fh:
            fh.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as fh:
            fh.write(f"0 {gid} 1")
    except OSError as exc:
        return _errno(exc)
    return "root"


def boundaries(paths: list[str]) -> dict:
    """Writes and remounts of ``paths`` as the jail uid, then from a child in a user and mount
    namespace of its own (when the kernel lets it make them).

    Args:
        paths: where to try.
    """
    seen = {"plain": _attempts(paths)}
    uid, gid = os.getuid(), os.getgid()
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        nested = {}
        try:
            os.close(r)
            if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0:
                nested["unshare"] = "ok"
            else:
                nested["unshare"] = errno.errorcode.get(ctypes.get_errno(), "?")
            if nested["unshare"] == "ok":
                nested["map"] = _map_root(uid, gid)
                nested["cap_eff"] = _fields("/proc/self/status")["CapEff"]
                nested["attempts"] = _attempts(paths)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            nested["failed"] = repr(exc)
        finally:
            try:
                os.write(w, json.dumps(nested).encode())
            finally:
                os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(child, 0)
    seen["nested"] = json.loads(data)
    return seen


def namespaces() -> dict:
    """This worker's namespaces (their kernel ids) and host name."""
    ids = {n: os.readlink(f"/proc/self/ns/{n}") for n in ("cgroup", "ipc", "mnt", "net", "pid", "uts")}
    return {"ids": ids, "hostname": socket.gethostname()}


def set_hostname(name: str) -> str:
    """Try to rename this episode's host."""
    try:
        socket.sethostname(name)
    except OSError as exc:
        return _errno(exc)
    return socket.gethostname()


def listen(name: str) -> None:
    """Listen on the abstract Unix socket ``name`` (kept open while this worker lives)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("\\0" + name)
    sock.listen(8)
    _KEEP.append(sock)


def connect(name: str) -> str:
    """Connect to the abstract Unix socket ``name``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect("\\0" + name)
        except OSError as exc:
            return _errno(exc)
    return "connected"


def _sysv(key: int, flags: int) -> dict:
    calls = {
        "shm": lambda: _libc.shmget(key, 4096 if flags else 0, flags),
        "msg": lambda: _libc.msgget(key, flags),
        "sem": lambda: _libc.semget(key, 1 if flags else 0, flags),
    }
    found = {}
    for kind, call in calls.items():
        found[kind] = "found" if call() >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
    return found


def sysv_make(key: int) -> dict:
    """Create a shared memory segment, a message queue and a semaphore set under ``key``."""
    return _sysv(key, IPC_CREAT | IPC_EXCL | 0o666)


def sysv_find(key: int) -> dict:
    """Look the three up under ``key`` without creating them."""
    return _sysv(key, 0)


def open_pty() -> list:
    """Open a pseudo-terminal (kept open); what /dev/pts lists then."""
    _KEEP.extend(os.openpty())
    return sorted(os.listdir("/dev/pts"))


def ptys() -> list:
    """What /dev/pts lists."""
    return sorted(os.listdir("/dev/pts"))


def environment() -> dict:
    """This worker's environment."""
    return dict(os.environ)
'''

# Where each shared path stops a write: the root, /tmp and the binds are read-only mounts; the
# server's /dev (with /dev/shm in it) is a writable tmpfs owned by root, mode 0755, that no
# episode uid may write, not even as root of a user namespace of its own (host root is not
# mapped there, so CAP_DAC_OVERRIDE does not apply to its inodes).
WRITE_REFUSED = {
    "/": "EROFS",
    "/tmp": "EROFS",
    "/dev": "EACCES",
    "/dev/shm": "EACCES",
    **{str(p): "EROFS" for p in reversed(Path(SANDBOX_PACKAGE).parents[:-1])},  # /opt, ...
    SANDBOX_PACKAGE: "EROFS",  # the staged worker modules, the server's own code
    "/bundle": "EROFS",
}
# Mount points of the episode (a remount of anything else is EINVAL once the caller holds
# CAP_SYS_ADMIN over its mount namespace, as root of a nested user namespace does).
MOUNT_POINTS = {"/", "/tmp", "/dev", SANDBOX_PACKAGE, "/bundle"}
SETTLE_S = 10.0


@pytest.fixture
def probes(make_bundle: Callable[..., Path]) -> Path:
    """The bundle of ``pair`` (test_sandbox_fork's fixture takes this module's ``probes``)."""
    return make_bundle(BOUNDARY_PROBES)


@pytest.fixture
def box(probes: Path) -> Iterator[Sandbox]:
    episode = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    try:
        with open_sandbox(probes, "bwrap", LIMITS) as sandbox:
            sandbox.reset(episode.refill())
            yield sandbox
    finally:
        episode.cleanup()


def _stop_servers() -> None:
    """Stop this process's fork servers: the next forked launch starts a fresh one."""
    for server in fork._servers.get(os.getpid(), []):
        server.stop()


@pytest.fixture
def fresh_servers() -> Iterator[None]:
    """No fork server of this process runs when the test starts, nor after it."""
    _stop_servers()
    yield
    _stop_servers()


def _raised(fields: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """The named capability lines that are not all zero."""
    return {name: fields[name] for name in names if int(fields[name], 16)}


def test_worker_holds_no_capability_securebit_or_group(box: Sandbox) -> None:
    """No capability in any set the worker can use, no securebit, every uid and gid the
    episode's, no supplementary group.  Red when the worker keeps a privilege past its drop:
    a ``PR_SET_SECUREBITS`` (SECBIT_KEEP_CAPS) in zygote._worker before ``worker.serve`` (seen
    red: securebits 16); a capability set or group left would also need seal.py's own check
    gone (it refuses to run then), which this test does not rely on."""
    seen = _value(box, "identity")
    assert isinstance(seen, dict)
    caps = seen["caps"]
    assert _raised(caps, ("CapInh", "CapPrm", "CapEff", "CapAmb")) == {}, seen
    assert seen["securebits"] == 0, seen
    uid = _handle(box).uid
    assert uid is not None and uid >= UID_BASE
    assert seen["resuid"] == seen["resgid"] == [uid, uid, uid], seen
    assert seen["groups"] == [], seen


def test_init_is_unprivileged_and_out_of_the_workers_reach(box: Sandbox) -> None:
    """The init stays uid 0 (it reaps and reports), but holds no capability (bounding set
    included: zygote._drop_all_capabilities) and has no_new_privs (bwrap sets it for the server,
    a fork keeps it); the worker, another uid, can neither signal it nor read its memory or
    environment.  Red when ``_drop_all_capabilities()`` is left out of zygote._episode (seen
    red: CapEff, CapPrm, CapInh and CapAmb 0x2011c0, the bounding set full); the kill and
    /proc checks would turn red if the worker ran as the init's uid (same uid, the init's
    permitted set empty: the kill and the ptrace check pass; reasoned, not run)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        # The init drops its capabilities right after forking the worker: by the worker's first
        # reply it has, but a loaded machine may schedule them the other way round.
        seen = _value(box, "init_view")
        assert isinstance(seen, dict)
        status = seen["status"]
        raised = _raised(status, ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
        if not raised or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert raised == {}, seen
    assert status["Name"] == "envgym-init", seen
    assert status["NoNewPrivs"] == "1", seen
    assert status["Uid"].split() == ["0"] * 4, seen
    assert seen["kill"] == "EPERM", seen
    assert seen["mem"] == "open: EACCES", seen
    assert seen["environ"] == "open: EACCES", seen


def _fds(pid: int) -> dict[str, str]:
    """A process's open fds and what each is (one closed while listing is left out)."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            pass
    return found


def test_init_holds_only_its_status_pipe_and_stderr(box: Sandbox) -> None:
    """Seen from the host, the init's fds are 2 (the host's stderr file) and 3 (the status
    pipe): the server's socket, its pidfds, the mount and cgroup fds and the worker's channel
    are closed.  Red when zygote._episode skips ``os.closerange(4, ...)`` (seen red: fds 4 to
    25 open, the zygote's pidfd among them) or keeps fds 0/1 open after the fork."""
    _value(box, "identity")
    init = _handle(box).init
    deadline = time.monotonic() + SETTLE_S
    while True:
        # Polled: the init closes the worker's ends right after forking it.
        fds = _fds(init)
        if set(fds) == {"2", "3"} or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert set(fds) == {"2", "3"}, fds
    assert fds["3"].startswith("pipe:"), fds


def test_shared_filesystems_stay_read_only_even_from_a_nested_user_namespace(
    box: Sandbox, record_property: Callable[[str, object], None]
) -> None:
    """Every episode sees the server's root, /tmp, /dev and the staged modules: the same
    superblocks, so a write there would reach siblings.  Neither the jail uid nor a child that
    made its own user namespace (mapped to root there, every capability in it) and mount
    namespace can create anything there or remount them writable (the mounts it copied are
    locked read-only).  Red when the server's /tmp is a writable 01777 tmpfs (the server's jail
    spec, ``Tmpfs("/tmp", ...)``; seen red: "created"), or, reasoned, when its root is not
    remounted read-only (jail.build_argv's ``--remount-ro /``).
    The nested attempt guards against a layout a namespace root could get past (a mount not
    locked, a directory owned by a uid it can map); no envgym code break reaches it alone."""
    seen = _value(box, "boundaries", paths=list(WRITE_REFUSED))
    assert isinstance(seen, dict)
    nested = seen["nested"]
    record_property("nested_user_namespace", nested.get("unshare"))
    tries = {"jail uid": seen["plain"]}
    if nested["unshare"] == "ok":
        # Created and mapped: the strongest form of the attempt really ran.
        assert nested["map"] == "root" and int(nested["cap_eff"], 16), nested
        tries["nested root"] = nested["attempts"]
    else:
        assert nested["unshare"] in ("EPERM", "ENOSPC", "EINVAL", "ENOSYS"), nested
    for who, attempts in tries.items():
        for path, refused in WRITE_REFUSED.items():
            got = attempts[path]
            assert (got["create"], got["mkdir"]) == (refused, refused), (who, path, got)
            for remount in ("bind_rw", "sb_rw"):
                allowed = {"EPERM"} if path in MOUNT_POINTS else {"EPERM", "EINVAL"}
                assert got[remount] in allowed, (who, path, remount, got)


def test_siblings_share_no_socket_ipc_host_name_or_pty(
    pair: tuple,  # noqa: F811 - the fixture
) -> None:
    """Two live episodes of one server: an abstract socket, SysV objects, the host name and a
    pty made in one are not seen in the other.  Red (each seen) when zygote.EPISODE_NAMESPACES
    leaves out CLONE_NEWNET (the socket connects), CLONE_NEWIPC (all three found) or
    CLONE_NEWUTS (one uts namespace), or the init keeps the server's devpts (B lists A's pty)."""
    a, b, _, _ = pair
    name = f"envgym-probe-{uuid.uuid4().hex}"
    _value(a, "listen", name=name)
    assert _value(a, "connect", name=name) == "connected"  # the probe can see a listener
    assert _value(b, "connect", name=name) == "ECONNREFUSED"

    key = int.from_bytes(os.urandom(3), "little") + 1
    made = {"shm": "found", "msg": "found", "sem": "found"}
    assert _value(a, "sysv_make", key=key) == made
    assert _value(a, "sysv_find", key=key) == made
    assert _value(b, "sysv_find", key=key) == {"shm": "ENOENT", "msg": "ENOENT", "sem": "ENOENT"}

    renamed = _value(a, "set_hostname", name="episode-a")
    mine, theirs = _value(a, "namespaces"), _value(b, "namespaces")
    assert isinstance(mine, dict) and isinstance(theirs, dict)
    shared = {n for n, ident in mine["ids"].items() if theirs["ids"][n] == ident}
    assert shared == set(), (mine, theirs)
    if renamed == "EPERM":  # no CAP_SYS_ADMIN: the names can only be compared
        assert mine["hostname"] == theirs["hostname"] == "envgym"
    else:
        assert (renamed, theirs["hostname"]) == ("episode-a", "envgym")

    opened = _value(a, "open_pty")
    assert isinstance(opened, list) and len(opened) > 1 and "ptmx" in opened
    assert _value(b, "ptys") == ["ptmx"]


def _stat(pid: str) -> tuple[str, int] | None:
    """(state, ppid) of a host process, None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
    return state, int(ppid)


def _children(pid: int) -> list[str]:
    """States of ``pid``'s child processes (``Z``: exited, not reaped)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            seen = _stat(entry)
            if seen is not None and seen[1] == pid:
                found.append(seen[0])
    return found


def _server_state(pid: int) -> tuple[int, int, int]:
    """(open fds, live children, zombie children) of a fork server."""
    children = _children(pid)
    zombies = children.count("Z")
    return len(os.listdir(f"/proc/{pid}/fd")), len(children) - zombies, zombies


def _settled(pid: int, done: Callable[[tuple[int, int, int]], bool]) -> tuple[int, int, int]:
    """The server's state once ``done`` holds of it on two reads in a row, or when the
    episodes' reaping (the server reaps an init when its pidfd turns readable) has had
    SETTLE_S.  Two reads: between reaping an init and closing its pidfd the server shows one
    fd more and no child."""
    deadline = time.monotonic() + SETTLE_S
    last = None
    while True:
        state = _server_state(pid)
        if (done(state) and state == last) or time.monotonic() > deadline:
            return state
        last = state
        time.sleep(0.05)


def test_server_fds_and_zombies_return_to_baseline_after_many_episodes(probes: Path) -> None:
    """Twenty episodes (one call each) come and go; then the server holds as many fds as
    before and no zombie child.  Red when zygote._reap_children stops closing the pidfd it
    kept of an exited init or stops waiting for it (seen red with neither: 20 fds over the
    baseline, and every init of the session a zombie)."""
    episodes = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    try:
        with open_sandbox(probes, "bwrap", LIMITS) as sandbox:
            sandbox.reset(episodes.refill())
            _value(sandbox, "identity")  # a server started and one episode came and went
            server = _handle(sandbox).server
            pid, starts = server.pid, server.starts
            assert pid is not None
        fds, _, _ = _settled(pid, lambda state: state[1:] == (0, 0))
        with open_sandbox(probes, "bwrap", LIMITS) as sandbox:
            for _ in range(20):
                sandbox.reset(episodes.refill())
                _value(sandbox, "identity")
                assert _handle(sandbox).server is server
            assert _server_state(pid)[1] == 1  # the last episode's init
        assert (server.pid, server.starts) == (pid, starts)  # the same server throughout
        after = _settled(pid, lambda state: state == (fds, 0, 0))
        assert after == (fds, 0, 0), f"fds, children, zombies: {after}, baseline {fds} fds"
    finally:
        episodes.cleanup()


def test_failed_spawns_leave_the_server_as_they_found_it(probes: Path) -> None:
    """Launches that fail inside the server (a request it refuses: the wrong number of fds;
    an init that cannot prepare its episode: a pipe where the code's mount should be) leave
    no fd, child or zombie behind, and the server keeps serving.  Red when the server keeps
    the fds of a refused request or never reaps a failed init."""
    from envgym.sandbox.base import SandboxUnavailable as Unavailable
    from envgym.sandbox.fdwait import wait_readable

    episodes = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    try:
        with open_sandbox(probes, "bwrap", LIMITS) as sandbox:
            sandbox.reset(episodes.refill())
            _value(sandbox, "identity")
            server = _handle(sandbox).server
            pid = server.pid
            assert pid is not None
        baseline, _, _ = _settled(pid, lambda state: state[1:] == (0, 0))
        spec = {"config": {}, "cwd": "/", "state": False, "cgroups": 0}
        for _ in range(5):
            pipes = [os.pipe() for _ in range(3)]
            mine = [end for pair in pipes for end in pair]
            try:
                with pytest.raises(Unavailable, match="refused"):
                    server.spawn(spec, [pipes[0][0]], timeout=30)
                # request, reply, status, stderr, and a pipe for the code's mount
                theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[2][1], pipes[0][0]]
                init, pidfd, zygote = server.spawn(spec, theirs, timeout=30)
                assert wait_readable(pidfd, 30)  # it failed, and its namespace is empty
                os.close(pidfd)
                zygote.release()
            finally:
                for fd in mine:
                    os.close(fd)
        assert server.pid == pid  # the same server throughout
        after = _settled(pid, lambda state: state == (baseline, 0, 0))
        assert after == (baseline, 0, 0), f"fds, children, zombies: {after}, baseline {baseline}"
        with open_sandbox(probes, "bwrap", LIMITS) as sandbox:  # and it still serves
            sandbox.reset(episodes.refill())
            assert _value(sandbox, "identity")
            assert _handle(sandbox).server.pid == pid
    finally:
        episodes.cleanup()


def _wait_ready(sandbox: Sandbox) -> None:
    deadline = time.monotonic() + 60
    spares = sandbox._pool  # type: ignore[attr-defined]
    while not (spares is not None and spares.ready()):
        assert time.monotonic() < deadline, "no spare worker was made"
        time.sleep(0.02)


def test_pool_spares_outlive_the_threads_that_made_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_servers: None
) -> None:
    """The fork server is started by a thread that then ends (the env's constructor, run on a
    short-lived thread), a spare is launched by a refill thread that then ends too; the spare's
    first call works, on the same server, and close() leaves no process of any episode's uid and
    no init running.  Red when bwrap._spawn starts the server from the calling thread (bwrap's
    ``--die-with-parent`` fires when that *thread* exits; seen red: the spare's first call
    raises "worker did not start"), or when close() leaves a spare running (``_kill_spare``
    only releasing the state; seen red: a process of the last spare's uid left)."""
    bundle = make_notes_bundle(tmp_path / "notes", tools=TOOLS)
    refill, later = pool._Refiller(), pool._Refiller()
    monkeypatch.setattr(pool, "_refiller", [refill])
    made: list[BundleEnv | BaseException] = []

    def build() -> None:
        try:
            made.append(BundleEnv(bundle, task=0))
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            made.append(exc)

    builder = threading.Thread(target=build)
    builder.start()
    builder.join(60)
    assert not builder.is_alive() and len(made) == 1, made
    env = made[0]
    assert isinstance(env, BundleEnv), env
    handles: list[ForkedWorker] = []
    try:
        box = env.sandbox
        handles.append(_handle(box))  # describe_tools' worker, launched by the builder
        _wait_ready(box)
        spare = box._pool._spare.conn.handle  # type: ignore[attr-defined]
        assert isinstance(spare, ForkedWorker)
        handles.append(spare)
        server = spare.server
        started = (server.starts, server.pid)
        refill.executor.shutdown(wait=True)  # the threads that made the spare end here
        assert not any(thread.is_alive() for thread in refill.executor._threads)
        monkeypatch.setattr(pool, "_refiller", [later])  # the next spare: threads of its own
        env.reset()
        assert env._release is not None and _handle(box) is spare, "the spare was not taken"
        assert box.call_tool("list_keys", {}).value == ["other", "secret"]
        assert (server.starts, server.pid) == started  # no server died meanwhile
        _wait_ready(box)
        handles.append(box._pool._spare.conn.handle)  # type: ignore[attr-defined]
    finally:
        env.close()
        for done in (refill, later):
            done.executor.shutdown()
            done.reaper.shutdown()
    uids = {handle.uid for handle in handles}
    assert None not in uids and len(uids) == len(handles) == 3
    assert {uid: count_processes(uid) for uid in uids} == dict.fromkeys(uids, 0)
    assert [handle.init for handle in handles if _running(handle.init)] == []


def test_host_secret_reaches_no_server_started_after_it(
    probes: Path, monkeypatch: pytest.MonkeyPatch, fresh_servers: None
) -> None:
    """test_sandbox_isolation's secret test in fork mode, without its order dependence: the
    servers are stopped first, so the one this episode uses starts with the secret already in
    the host's environment.  Neither the worker, nor its init (/proc/1/environ inside, read
    here from the host: the worker may not), nor the server holds it.  Red when the server is
    started with the host's environment (``env=dict(os.environ)`` in its start; seen red, where
    the original test stayed green when an earlier test had started the server)."""
    secret = f"hunter2-{uuid.uuid4().hex}"
    monkeypatch.setenv("ENVGYM_TEST_API_KEY", secret)
    started = {id(s): s.starts for s in fork._servers.get(os.getpid(), [])}
    episode = EpisodeDirs(probes / "state", quota_bytes=8 << 20)
    try:
        with open_sandbox(probes, "bwrap", LIMITS) as sandbox:
            sandbox.reset(episode.refill())
            env = _value(sandbox, "environment")
            handle = _handle(sandbox)
            server = handle.server
            assert server.starts > started.get(id(server), 0)  # started after the secret
            assert server.pid is not None
            assert isinstance(env, dict) and "PATH" in env  # the worker's environment, read
            assert "ENVGYM_TEST_API_KEY" not in env and secret not in repr(env)
            for pid in (handle.init, server.pid):
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                assert b"PATH=" in environ  # the host reads it (the worker cannot: init_view)
                assert secret.encode() not in environ, pid
    finally:
        episode.cleanup()
