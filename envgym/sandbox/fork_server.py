"""The host's end of a fork server (zygote.py runs inside it): its start, one launch's round
trip, and its retirement.

A fork server is a long-lived process whose children are every episode's init: a server that
fails a launch (dies, or stalls past the deadline) is retired, not killed, so that one slow
launch costs only itself, as it does in the bwrap mode.  docs/SANDBOX.md, "Forked workers".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envgym.sandbox.base import SandboxUnavailable
from envgym.sandbox.jail import Bind, Dir, JailSpec, Tmpfs, build_argv, python_executable
from envgym.sandbox.process import SANDBOX_BUNDLE, SANDBOX_STATE
from envgym.sandbox.worker_stage import ZYGOTE_SCRIPT

Spawn = Callable[..., "subprocess.Popen[bytes]"]  # Popen's signature (bwrap._spawn)


class ServerLost(SandboxUnavailable):
    """The fork server did not answer a launch (it died, or it stalled past the deadline).  The
    fds sent may have been used by a late fork: a retry builds fresh ones (launch_forked)."""


class _Zygote:
    """One running fork server process: its socket, its bwrap, and how many of the episodes it
    forked are alive.  A server that failed a launch is retired (it gets no more launches) and
    stopped only when its last episode ends: its episodes' inits die with it (PDEATHSIG), so
    stopping it at once would turn one stalled launch into a crash of every sibling."""

    def __init__(self, sock: socket.socket, proc: subprocess.Popen[bytes], stderr: Any) -> None:
        self.sock, self.proc, self.stderr = sock, proc, stderr
        self.pid: int | None = None  # the zygote's host pid, once it said it is ready
        self._live = 0
        self._retired = False
        self._lock = threading.Lock()

    def adopt(self) -> None:
        with self._lock:
            self._live += 1

    def release(self) -> None:
        """One of its episodes ended."""
        with self._lock:
            self._live -= 1
            done = self._retired and self._live == 0
        if done:
            self.stop()

    def retire(self) -> None:
        with self._lock:
            self._retired = True
            done = self._live == 0
        if done:
            self.stop()

    def diagnostics(self) -> str:
        if self.stderr.closed:
            return ""
        self.stderr.seek(0)
        text = self.stderr.read()[-1500:].decode(errors="replace").strip()
        return f"({text})" if text else ""

    def stop(self) -> None:
        """Kill it (the episodes it forked die with it: their init has PDEATHSIG)."""
        with self._lock:
            if self.pid is None and self.sock.fileno() < 0:
                return
            self.pid = None
            self.sock.close()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.stderr.close()

    def processes(self) -> set[int]:
        pid = self.pid
        return {pid, self.proc.pid} if pid is not None else set()


class ForkServer:
    """One fork server slot of this host process: a zygote started on first use, and a fresh one
    whenever the last died or failed a launch."""

    def __init__(self, package: Path, mount_at: str, env: dict[str, str], spawn: Spawn) -> None:
        self.package, self.mount_at, self.env = package, mount_at, env
        self._spawn = spawn  # bwrap._spawn: from a thread that lives as long as the process
        self._lock = threading.Lock()
        self._current: _Zygote | None = None
        self._retired: list[_Zygote] = []  # failed ones whose episodes are not all over yet
        self.starts = 0

    @property
    def pid(self) -> int | None:
        """The current zygote's host pid (None before the first launch or after a failure)."""
        current = self._current
        return current.pid if current is not None else None

    def spawn(
        self, spec: dict[str, Any], fds: list[int], timeout: float
    ) -> tuple[int, int, _Zygote]:
        """One launch: (host pid of the episode's init, a pidfd on it, the zygote that forked
        it).  Waits at most ``timeout`` for its turn and ``timeout`` for the server's answer."""
        if not self._lock.acquire(timeout=timeout):
            raise SandboxUnavailable(
                f"no turn at the fork server within {timeout:g} s: launches queue behind it"
            )
        try:
            zygote = self._current
            try:
                if zygote is None:
                    zygote = self._current = self._start(timeout)
                zygote.sock.settimeout(timeout)
                socket.send_fds(zygote.sock, [json.dumps(spec).encode()], fds)
                message, back, _, _ = socket.recv_fds(zygote.sock, 1 << 16, 4)
                if not message:
                    raise ConnectionResetError("the fork server closed its socket")
            except OSError as exc:
                problem = f"{exc} {zygote.diagnostics() if zygote else ''}".strip()
                self._current = None
                if zygote is not None:
                    self._retire(zygote)
                raise ServerLost(f"the fork server failed: {problem}") from None
            reply = json.loads(message)
            if "error" in reply or len(back) != 1:
                for fd in back:
                    os.close(fd)
                raise SandboxUnavailable(f"the fork server refused: {reply.get('error')}")
            zygote.adopt()
            return int(reply["pid"]), back[0], zygote
        finally:
            self._lock.release()

    def _start(self, timeout: float) -> _Zygote:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        spec = JailSpec(
            root=True,
            fork_server=True,
            mounts=(
                Bind(str(self.package), self.mount_at),
                Dir(SANDBOX_BUNDLE),  # where each episode's init moves its mounts (zygote.py)
                Dir(SANDBOX_STATE),
                Tmpfs("/tmp", mode="0755", readonly=True),
            ),
        )
        script = f"{self.mount_at}/{ZYGOTE_SCRIPT}"
        argv = build_argv(spec) + [
            str(python_executable()),
            "-I",
            "-S",
            "-B",
            script,
            str(theirs.fileno()),
        ]
        stderr = tempfile.TemporaryFile()
        try:
            proc = self._spawn(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                env=self.env,
            )
        except BaseException:
            ours.close()
            stderr.close()
            raise
        finally:
            theirs.close()
        zygote = _Zygote(ours, proc, stderr)
        try:
            ours.settimeout(timeout)
            hello = ours.recv(1 << 12)
            if not hello:
                raise ConnectionResetError(
                    f"the fork server exited at start {zygote.diagnostics()}"
                )
            zygote.pid = int(json.loads(hello)["ready"])
        except BaseException:
            zygote.stop()
            raise
        self.starts += 1
        return zygote

    def _retire(self, zygote: _Zygote) -> None:
        self._retired = [old for old in self._retired if old.pid is not None] + [zygote]
        zygote.retire()

    def retire(self) -> None:
        """No more launches here: the current zygote stops when its last episode ends."""
        with self._lock:
            zygote, self._current = self._current, None
            if zygote is not None:
                self._retire(zygote)

    def stop(self) -> None:
        """Kill every zygote of this slot now, current and retired, and their episodes."""
        with self._lock:
            zygotes, self._current, self._retired = [self._current, *self._retired], None, []
        for zygote in zygotes:
            if zygote is not None:
                zygote.stop()

    def processes(self) -> set[int]:
        """Host pids of its zygotes and their bwraps."""
        found: set[int] = set()
        for zygote in [self._current, *self._retired]:
            if zygote is not None:
                found |= zygote.processes()
        return found
