"""The fork server ("zygote"): one warmed interpreter that forks a fresh worker per episode.

Started by the host (``fork.py``) inside one bwrap jail per host process, root hosts only, as
``python -I -S -B .../sandbox/zygote.pyc FD``; FD is a ``SOCK_SEQPACKET`` socket to the host.
It imports the worker's modules (trusted envgym code and the stdlib) once, then serves spawn
requests: each request carries a JSON spec and fds (the worker's channel pipes, a status pipe,
a stderr file, detached mounts of the episode state and the bundle's code, the episode's
cgroup files), and is answered with the host pid of the new episode's init and a pidfd on it.

What an episode gets (docs/SANDBOX.md, "Forked workers", has the argument):

* ``init``: forked by the zygote into a new pid namespace (it is its pid 1).  It dies with the
  zygote (``PR_SET_PDEATHSIG``), joins the episode's cgroup through the host's fds, makes its
  own mount, network, ipc, uts and cgroup namespaces, mounts the episode's state at /state and
  the code at /bundle (``move_mount`` of the host's detached copies), a fresh /proc for its pid
  namespace and a fresh devpts, closes every fd but the channel, forks the worker and then
  drops every capability (bounding set included); it only reaps.
* ``worker``: drops CAP_SYS_ADMIN and CAP_SETPCAP from its bounding set, sets no_new_privs
  (bwrap set it already), and runs :func:`envgym.sandbox.worker.serve`, which sets the
  rlimits and drops to the episode's fresh uid before any bundle code is read.

The zygote never runs bundle code and never sees episode data: no request carries any, the
state reaches an episode as a mount fd the zygote only passes on, and it runs no op.  Its own
memory holds the imported modules and the specs of requests (uids, limits).

Stdlib only, plus the worker's envgym modules (staged with it, worker_stage.py).
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import types
from pathlib import Path
from typing import Any, NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
EPISODE_NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
AT_FDCWD = -100
MOVE_MOUNT_F_EMPTY_PATH = 0x4
SYS_MOVE_MOUNT = 429  # the same number on every architecture (new syscalls share one table)
PR_SET_PDEATHSIG, PR_SET_NAME, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 15, 24, 38
# /proc/PID/comm of an episode's processes (their argv is the server's): for ps and benchmarks.
INIT_NAME, WORKER_NAME = b"envgym-init", b"envgym-worker"
CAP_SETPCAP, CAP_NET_ADMIN, CAP_SYS_ADMIN = 8, 12, 21
SIOCSIFFLAGS, IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x8914, 0x1, 0x8, 0x40
# What bwrap covers read-only in a fresh /proc: writable to root, harmless to read.
PROC_COVERS = ("sys", "sysrq-trigger", "irq", "bus")
# Stdlib modules bundles commonly import, paid once here instead of once per episode.  Their
# import-time state is the same for every episode (``random`` reseeds itself in every fork).
WARM = (
    "bisect",
    "collections",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "functools",
    "hashlib",
    "heapq",
    "itertools",
    "math",
    "random",
    "re",
    "statistics",
    "string",
    "traceback",
    "typing",
)

_libc = ctypes.CDLL(None, use_errno=True)
_NOFILE = (1024, 1024)  # the server's RLIMIT_NOFILE as started (episodes get this one back)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _enc(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            _enc(source), target.encode(), _enc(fstype), ctypes.c_ulong(flags), _enc(data or None)
        ),
        f"mount {target}",
    )


def _unmount(target: str) -> None:
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def _move_mount(fd: int, target: str) -> None:
    _check(
        _libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
        f"move_mount to {target}",
    )


def _prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def _name(name: bytes) -> None:
    _check(_libc.prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0), "prctl name")


def _drop_all_capabilities() -> None:
    """Bounding set emptied, then effective/permitted/inheritable cleared."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        if cap != CAP_SETPCAP:
            _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_CAPBSET_DROP, CAP_SETPCAP)  # last: dropping needs it
    from envgym.sandbox.seal import clear_capability_sets  # imported by the server's start

    clear_capability_sets()


def _bootstrap() -> None:
    """``envgym.*`` importable without the host-side package ``__init__``s (as worker.py)."""
    root = Path(__file__).resolve().parents[2]
    for name in ("envgym", "envgym.sandbox"):
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = module
    sys.modules["envgym"].sandbox = sys.modules["envgym.sandbox"]  # type: ignore[attr-defined]


def _fail(err_fd: int, message: str) -> NoReturn:
    try:
        os.write(err_fd, f"envgym fork server: {message}\n".encode(errors="replace"))
    finally:
        os._exit(125)


# -- one episode ---------------------------------------------------------------------------


def _episode(
    spec: dict[str, Any], fds: dict[str, int], cgroups: list[int], zygote: int
) -> NoReturn:
    """In the forked init (pid 1 of a new pid namespace).  Never returns."""
    err = fds["stderr"]
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _name(INIT_NAME)
        if _readable(zygote, 0):  # the server died before the line above
            os._exit(125)
        resource.setrlimit(resource.RLIMIT_NOFILE, _NOFILE)  # the server's own, raised, is not ours
        # The cgroup first: everything this episode ever runs is counted in it.
        for fd in cgroups:
            os.write(fd, b"0")
        _check(_libc.unshare(EPISODE_NAMESPACES), "unshare")
        _loopback_up()
        _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates to siblings
        _move_mount(fds["bundle"], "/bundle")
        if "state" in fds:
            _move_mount(fds["state"], "/state")
        _unmount("/proc")  # the host's, as the zygote shares the host's pid namespace
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for name in PROC_COVERS:
            path = f"/proc/{name}"
            if os.path.exists(path):
                _mount(path, path, None, MS_BIND | MS_REC)
                _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        _unmount("/dev/pts")  # the zygote's instance is every episode's: a fresh one each
        _mount(
            "devpts",
            "/dev/pts",
            "devpts",
            MS_NOSUID | MS_NOEXEC,
            "newinstance,ptmxmode=0666,mode=620",
        )
        os.setsid()
        # Only the channel survives: fds 0/1 the worker's pipes, 2 the host's stderr file;
        # the zygote's socket, its pidfd, the mounts' and cgroups' fds are closed here.
        status = fds["status"]
        os.dup2(fds["request"], 0)
        os.dup2(fds["reply"], 1)
        os.dup2(err, 2)
        os.dup2(status, 3)
        os.closerange(4, 1 << 20)
        err, status = 2, 3
        worker = os.fork()
        if worker == 0:
            os.close(status)
            _worker(spec)
        os.close(0)  # the worker's channel is the worker's: its EOF is the worker's death
        os.close(1)
        _drop_all_capabilities()
    except BaseException as exc:  # noqa: BLE001 - any failure ends this episode, nothing else
        _fail(err, f"cannot prepare the episode: {exc}")
    _reap(worker, status)


def _loopback_up() -> None:
    """``lo`` of the episode's new network namespace up (the kernel gives it 127.0.0.1 and ::1),
    as bwrap's ``--unshare-net`` does: a bundle that talks to itself over a local socket works
    alike in both modes.  Needs CAP_NET_ADMIN, which the episode's processes drop."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING)
        fcntl.ioctl(sock, SIOCSIFFLAGS, request)


def _reap(worker: int, status_fd: int) -> NoReturn:
    """pid 1's job: reap; when the worker exits report how (as bwrap: 128+signal) and exit,
    which makes the kernel kill whatever else of the namespace is left."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(125)
        if pid == worker:
            code = (
                128 + os.WTERMSIG(status)
                if os.WIFSIGNALED(status)
                else os.waitstatus_to_exitcode(status)
            )
            try:
                os.write(status_fd, f"{code}\n".encode())
            finally:
                os._exit(code & 0xFF)


def _worker(spec: dict[str, Any]) -> NoReturn:
    """The episode's worker: drop what the zygote held, then the normal worker's path."""
    code = 1
    try:
        _name(WORKER_NAME)
        _prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN)
        _prctl(PR_CAPBSET_DROP, CAP_NET_ADMIN)
        _prctl(PR_CAPBSET_DROP, CAP_SETPCAP)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        os.chdir(spec["cwd"])
        from envgym.sandbox import worker

        code = worker.serve(spec["config"])  # rlimits, then setgroups/setgid/setuid, then serve
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - reported on the host's stderr file
        try:
            os.write(2, f"envgym forked worker: {exc!r}\n".encode(errors="replace"))
        except OSError:
            pass
    os._exit(code)


# -- the server ------------------------------------------------------------------------------

FD_NAMES = ("request", "reply", "status", "stderr", "bundle")


def _spawn(
    message: bytes, received: list[int], zygote: int, own_pidns: int
) -> tuple[dict[str, Any], list[int]]:
    """One request: fork the episode's init; (reply, fds to send back)."""
    spec = json.loads(message)
    names = list(FD_NAMES) + (["state"] if spec.get("state") else [])
    if len(received) != len(names) + int(spec.get("cgroups", 0)):
        return {"error": f"expected {len(names)} fds and the cgroups', got {len(received)}"}, []
    fds = dict(zip(names, received))
    cgroups = received[len(names) :]
    _check(_libc.unshare(CLONE_NEWPID), "unshare pid")  # this process's next child only
    pid = os.fork()
    if pid == 0:
        try:
            _episode(spec, fds, cgroups, zygote)
        finally:
            os._exit(125)  # whatever happened, the child never returns into the server
    try:
        pidfd = os.pidfd_open(pid)  # before any reap: the pid cannot be reused
        # Children of later requests get namespaces of their own: back to ours for children.
        _check(_libc.setns(own_pidns, CLONE_NEWPID), "setns pid")
    except BaseException:
        # A child nobody tracks would be a zombie for the server's life: end it here.
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    return {"pid": pid}, [pidfd]


def _readable(fd: int, timeout_ms: int | None) -> bool:
    """``poll``, not ``select``: the server's fds pass 1024 with many episodes alive."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_ms))


def _reap_children(children: set[int], exited: set[int], poller: select.poll) -> None:
    """Reap the episodes' inits whose pidfds turned readable (they exited)."""
    for fd in exited:
        children.discard(fd)
        poller.unregister(fd)
        try:  # by the pidfd, never blocking: exactly the init that exited
            os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            pass
        os.close(fd)


def serve(sock_fd: int) -> int:
    sock = socket.socket(fileno=sock_fd)
    zygote = os.pidfd_open(os.getpid())  # an episode's init checks that we still live
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    children: set[int] = set()  # a pidfd on each episode's init not reaped yet
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    while True:
        events = dict(poller.poll())
        _reap_children(children, set(events) & children, poller)
        if sock.fileno() not in events:
            continue
        message, received, _, _ = socket.recv_fds(sock, 1 << 16, 32)
        if not message:
            return 0  # the host closed its end
        back: list[int] = []
        try:
            reply, back = _spawn(message, received, zygote, own_pidns)
        except Exception as exc:  # noqa: BLE001 - the host gets the reason, we keep serving
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in received:
                os.close(fd)
        for fd in back:  # kept (sending passes a copy): it tells us when to reap the init
            children.add(fd)
            poller.register(fd, select.POLLIN)
        try:
            socket.send_fds(sock, [json.dumps(reply).encode()], back)
        except OSError:
            return 0  # the host is gone: so are we (its episodes die with us, PDEATHSIG)


def main(argv: list[str]) -> int:
    global _NOFILE
    _NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)
    # A pidfd per live episode: a few thousand episodes must not run the server out of fds.
    resource.setrlimit(resource.RLIMIT_NOFILE, (_NOFILE[1], _NOFILE[1]))
    _bootstrap()
    from envgym.sandbox import runner, seal, worker  # noqa: F401 - the point: imported once, here

    for name in WARM:
        __import__(name)
    # Every object so far into the permanent generation: a child's collections then never walk
    # (and so never copy-on-write) the server's objects.
    gc.collect()
    gc.freeze()
    return serve(int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
