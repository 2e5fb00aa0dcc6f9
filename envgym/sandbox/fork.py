"""Forked workers: the host's end of the fork server (zygote.py) and the workers it forks.

The default on root hosts, the only ones it runs on (``ENVGYM_SANDBOX_FORK=0`` or
``BwrapSandbox(..., fork=False)`` turns it off).  One fork server per host process, in one
bwrap jail (``jail.JailSpec(fork_server=True)``), started at the first forked launch and again
whenever it died or failed a launch (fork_server.py).  A launch hands it, over a
``SOCK_SEQPACKET`` socket: the worker's pipes, a status pipe, a stderr file, detached mounts
(``open_tree(OPEN_TREE_CLONE)``) of the episode state (read-write) and of the sandbox's staged
code (read-only), and the episode cgroup's ``cgroup.procs`` files.  It answers with the host
pid of the episode's init and a pidfd on it.  Everything else (fresh tmpfs per episode, the
fresh uid and the chown, the cgroup, the line protocol, the checks after each op) is what the
normal bwrap launch does.  docs/SANDBOX.md, "Forked workers", has the isolation argument.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import os
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envgym.sandbox.base import CallError, Limits, SandboxUnavailable
from envgym.sandbox.cgroup import JailCgroup, open_cgroup
from envgym.sandbox.channel import WorkerHandle, signal_death
from envgym.sandbox.fdwait import wait_readable
from envgym.sandbox.fork_server import ForkServer, ServerLost, Spawn
from envgym.sandbox.process import SANDBOX_STATE

ENV_SWITCH = "ENVGYM_SANDBOX_FORK"  # "1": bwrap sandboxes fork their workers from a zygote
DEATH_WAIT_S = 5.0
# open_tree / mount_setattr: the same numbers on every architecture.
SYS_OPEN_TREE, SYS_MOUNT_SETATTR = 428, 442
OPEN_TREE_CLONE = 1
AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH, AT_RECURSIVE = 0x100, 0x1000, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
_libc = ctypes.CDLL(None, use_errno=True)
# The init's host pid -> a watch of it and its worker (bwrap.TreeWatch), None if not found yet.
Watch = Callable[[int], Any]


def fork_requested(root: bool) -> bool:
    """``$ENVGYM_SANDBOX_FORK``: "1" forks workers, "0" starts each with its own bwrap; unset,
    root hosts whose kernel can detach mounts fork (the default) and the others do not."""
    raw = os.environ.get(ENV_SWITCH, "")
    if raw not in ("", "0", "1"):
        raise SandboxUnavailable(f"${ENV_SWITCH} must be 0 or 1 (or unset), got {raw!r}")
    return raw == "1" if raw else root and _can_detach_mounts()


@functools.cache
def _can_detach_mounts() -> bool:
    """``open_tree`` works here (Linux 5.2+, not refused by a container's seccomp filter)."""
    fd = _libc.syscall(SYS_OPEN_TREE, -100, b"/", OPEN_TREE_CLONE | os.O_CLOEXEC)
    if fd < 0:
        return False
    os.close(fd)
    return True


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def detached_mount(path: Path, *, readonly: bool) -> int:
    """An fd on a detached bind mount of ``path`` (nosuid, nodev; read-only if asked).

    ``path`` is a host directory the host made (an episode's tmpfs, the staged code); a final
    symlink is refused, not followed."""
    flags = OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW
    fd = _libc.syscall(SYS_OPEN_TREE, -100, str(path).encode(), flags)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"open_tree {path}: {os.strerror(err)}")
    attr = _MountAttr(
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if readonly else 0), 0, 0, 0
    )
    flags = AT_EMPTY_PATH | AT_RECURSIVE
    if _libc.syscall(SYS_MOUNT_SETATTR, fd, b"", flags, ctypes.byref(attr), ctypes.sizeof(attr)):
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, f"mount_setattr {path}: {os.strerror(err)}")
    return fd


SERVERS_SWITCH = "ENVGYM_SANDBOX_FORK_SERVERS"  # fork servers per host process (default 1)
# Launches wait for their server, one at a time (a fork of the server is ~4 ms of CPU, and it
# is one thread: on a loaded machine every launch queued behind it, docs/SANDBOX.md).  More
# servers take launches in turn; 2 against 1 was not measurably faster on the loaded 2-core
# dev box, so one stays the default until measured on a quiet machine.
_servers: dict[int, list[ForkServer]] = {}  # host pid -> its servers (a forked host: its own)
_turn = itertools.count()
_servers_lock = threading.Lock()


def server_count() -> int:
    raw = os.environ.get(SERVERS_SWITCH, "")
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= 64:
            raise ValueError(f"${SERVERS_SWITCH} must be a whole number from 1 to 64, got {raw!r}")
        return int(raw)
    return 1


def fork_server(package: Path, mount_at: str, env: dict[str, str], spawn: Spawn) -> ForkServer:
    """The next of this process's fork servers (made on first use; each starts when used)."""
    with _servers_lock:
        servers = _servers.get(os.getpid())
        if not servers or servers[0].package != package:
            for stale in servers or ():  # each stops once its episodes are over
                stale.retire()
            count = server_count()
            servers = _servers[os.getpid()] = [
                ForkServer(package, mount_at, env, spawn) for _ in range(count)
            ]
        return servers[next(_turn) % len(servers)]


def server_processes() -> set[int]:
    """Host pids of this process's fork servers and their bwraps (alive while the process is:
    benchmarks counting leftover processes leave these out)."""
    found: set[int] = set()
    for server in _servers.get(os.getpid(), []):
        found |= server.processes()
    return found


class ForkedWorker(WorkerHandle):
    """A worker the fork server forked: its init's pid and pidfd, the channel, the cgroup."""

    def __init__(
        self,
        server: ForkServer,
        spec: dict[str, Any],
        mounts: list[int],
        group: JailCgroup | None,
        uid: int | None,
        timeout: float,
        watch: Watch,
    ) -> None:
        self.group, self.uid, self._watcher = group, uid, watch
        self._stderr = tempfile.TemporaryFile()
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        status_r, status_w = os.pipe()
        cgroups: list[int] = []
        theirs = [request_r, reply_w, status_w]
        try:
            for directory in group.dirs if group is not None else ():
                cgroups.append(os.open(directory / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
            fds = [request_r, reply_w, status_w, self._stderr.fileno(), *mounts, *cgroups]
            spec = {**spec, "cgroups": len(cgroups)}
            self.init, self._pidfd, self._zygote = server.spawn(spec, fds, timeout)
            self.server = server
        except BaseException:
            for fd in (request_w, reply_r, status_r):
                os.close(fd)
            self._stderr.close()
            raise
        finally:
            for fd in theirs + cgroups:
                os.close(fd)
        self.read_fd, self.write_fd, self._status = reply_r, request_w, status_r
        self._killed = False
        self._watch: Any = None

    def _locate(self) -> Any:
        if self._watch is None and not self._killed:
            self._watch = self._watcher(self.init)
            if self._watch is not None:
                # The worker answered: its start-up messages, all the file is read for, are
                # behind us (one host fd less per sandbox, as bwrap.BwrapWorker).
                self._stderr.close()
        return self._watch

    def quiet(self) -> bool:
        watch = self._locate()
        return watch is not None and watch.quiet()

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        # The init is pid 1 of the episode's pid namespace: when it dies the kernel kills the
        # rest, and its pidfd turns readable only once the namespace is empty.
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        wait_readable(self._pidfd, DEATH_WAIT_S)
        for fd in (self._pidfd, self.read_fd, self.write_fd, self._status):
            os.close(fd)
        self._stderr.close()
        if self._watch is not None:
            self._watch.close()
        if self.group is not None:
            self.group.remove()
        self._zygote.release()

    def death(self) -> tuple[CallError, str]:
        if self._killed or not wait_readable(self._pidfd, 1.0):
            return CallError.CRASH, "the sandbox closed its reply channel and was restarted"
        try:
            code = int(os.read(self._status, 64).split()[0])
        except (OSError, ValueError, IndexError):
            return CallError.CRASH, "the sandbox ended and was restarted"
        if code > 128:
            return signal_death(code - 128)
        return CallError.CRASH, f"the sandbox process exited (status {code}) and was restarted"

    def diagnostics(self) -> str:
        if self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].decode(errors="replace").strip()


def launch_forked(
    *,
    server: ForkServer,
    config: dict[str, Any],
    stage: Path,
    state: Path | None,
    limits: Limits,
    uid: int | None,
    watch: Watch,
) -> ForkedWorker:
    """A worker forked by ``server`` on ``state`` (None: no episode yet) and the staged code:
    the caller made the state writable for ``uid`` already, as for a bwrap launch.  A server
    lost during the launch is replaced and the launch tried once more, with fds of its own."""
    spec = {
        "config": config,
        "cwd": SANDBOX_STATE if state is not None else "/",
        "state": state is not None,
    }
    for attempt in (1, 2):
        mounts: list[int] = []
        group = open_cgroup(limits.memory_bytes, limits.max_processes)
        try:
            mounts.append(detached_mount(stage, readonly=True))
            if state is not None:
                mounts.append(detached_mount(state, readonly=False))
            timeout = limits.startup_timeout_s
            return ForkedWorker(server, spec, mounts, group, uid, timeout, watch)
        except BaseException as exc:
            if group is not None:
                group.remove()
            if isinstance(exc, ServerLost) and attempt == 2:
                raise ServerLost(
                    f"{exc} ({ENV_SWITCH}=0 starts each worker with a bwrap of its own instead)"
                ) from None
            if isinstance(exc, OSError):
                raise SandboxUnavailable(f"cannot fork a sandbox worker: {exc}") from None
            if not isinstance(exc, ServerLost):
                raise
        finally:
            for fd in mounts:
                os.close(fd)
    raise AssertionError("unreachable")
