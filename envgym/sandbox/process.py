"""The host side of an out-of-process sandbox, shared by the bwrap and Docker backends.

A backend only says how to *launch* a worker (:meth:`ProcessSandbox._launch`), returning a
:class:`WorkerHandle`: the fds of its request/reply stream plus how to kill it and why it died.
Everything else lives here: the line protocol with wall-clock deadlines (``poll`` on
non-blocking fds, no threads), killing and lazily restarting the worker, and replaying ``load``
and the last ``reset`` so the next call after a crash works on the same episode state.

Latency matters (an RL rollout makes thousands of tool calls): one request is one ``write``,
one ``poll`` and usually one ``read`` on each side, with compact JSON.

Isolation (issue 8 item 3, docs/SANDBOX.md "Episodes and restarts"): every ``reset`` starts a
fresh worker, so no code of an earlier episode runs in a later one; and after every op the
host looks at the worker from outside (:meth:`WorkerHandle.quiet`: one thread, no other
process in the sandbox).  A worker that is not quiet is replaced before the next request, so
a thread or process a call left behind never sees another request nor the channel its reply
would travel on.  Bundle code can forge anything *within* its own call (that is the same as
the tool returning that value); the host trusts nothing the worker says about itself.
"""

from __future__ import annotations

import abc
import itertools
import json
import os
import select
import shutil
import signal
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.sandbox.base import (
    CallError,
    CallOutcome,
    Limits,
    Sandbox,
    SandboxUnavailable,
    SolveOutcome,
    ToolSpec,
)
from envgym.sandbox.runner import CODE_FILES

STARTUP_TIMEOUT_S = 60.0  # interpreter start + namespaces/container creation, under load
SANDBOX_BUNDLE = "/bundle"  # where the worker sees the bundle's code
SANDBOX_STATE = "/state"  # where the worker sees the episode state
_REPLY_SLACK = 1 << 20  # room for the reply envelope and captured output over max_reply_bytes
_encode = json.JSONEncoder(separators=(",", ":")).encode


class WorkerDied(Exception):
    """The worker is gone or unusable; the call gets ``kind`` and the worker is discarded."""

    def __init__(self, kind: CallError, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class WorkerHandle(abc.ABC):
    """One launched worker, as the host sees it."""

    read_fd: int
    write_fd: int

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill the worker and everything it started, release its fds; idempotent.

        Returns when nothing of the sandbox runs any more (or after a bounded wait), so the
        state can be handed to a new worker without a writer of the old one racing it."""

    @abc.abstractmethod
    def death(self) -> tuple[CallError, str]:
        """After EOF or :meth:`kill`: why the worker ended, in words fit for an agent."""

    @abc.abstractmethod
    def diagnostics(self) -> str:
        """Host-side details (stderr of the launcher, ...) for startup failures."""

    def quiet(self) -> bool:
        """Checked by the host from outside after each op: True when the worker is one thread
        and nothing else of the sandbox runs.  Backends that cannot see inside say True."""
        return True


def signal_death(signum: int) -> tuple[CallError, str]:
    if signum == signal.SIGXCPU:
        return CallError.TIMEOUT, "the sandbox used up its CPU-time limit and was restarted"
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return CallError.CRASH, f"the sandbox process crashed ({name}) and was restarted"


class Connection:
    """Newline-delimited JSON over a worker's fds, with deadlines."""

    def __init__(self, handle: WorkerHandle, max_line: int) -> None:
        self.handle = handle
        self.max_line = max_line
        os.set_blocking(handle.read_fd, False)
        os.set_blocking(handle.write_fd, False)
        self._readable = select.poll()
        self._readable.register(handle.read_fd, select.POLLIN)
        self._writable = select.poll()
        self._writable.register(handle.write_fd, select.POLLOUT)
        self._ids = itertools.count(1)
        self._buffer = bytearray()
        self._pending = 1  # replies owed: the hello, then one per request

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        return self.read_reply(self.send(message, deadline, timeout), deadline, timeout)

    def send(self, message: dict[str, Any], deadline: float, timeout: float) -> int:
        """Write one request; returns its id (read the reply later with :meth:`read_reply`)."""
        rid = next(self._ids)
        message["id"] = rid
        self._write((_encode(message) + "\n").encode(), deadline, timeout)
        self._pending += 1
        return rid

    def read_reply(self, rid: int, deadline: float, timeout: float) -> dict[str, Any]:
        line = self._read_line(deadline, timeout)
        try:
            reply = json.loads(line)
        except ValueError:
            raise WorkerDied(CallError.PROTOCOL, "the sandbox sent a malformed reply and was restarted") from None
        if not isinstance(reply, dict) or reply.get("id") != rid:
            raise WorkerDied(CallError.PROTOCOL, "the sandbox sent an unexpected reply and was restarted")
        self._pending -= 1
        if not self._pending and self._buffer:
            # Bytes nobody asked for: something besides the worker loop wrote to the channel,
            # so later replies cannot be trusted either.
            raise WorkerDied(CallError.PROTOCOL, "the sandbox wrote extra data to its reply channel and was restarted")
        return reply

    def _write(self, data: bytes, deadline: float, timeout: float) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.handle.write_fd, view) :]
            except BlockingIOError:
                self._wait(self._writable, deadline, timeout)
            except (BrokenPipeError, ConnectionResetError):
                raise WorkerDied(*self.handle.death()) from None

    def _read_line(self, deadline: float, timeout: float) -> bytes:
        buffer = self._buffer
        scanned = 0
        while True:
            end = buffer.find(b"\n", scanned)
            if end >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                return line
            scanned = len(buffer)
            if scanned > self.max_line:
                raise WorkerDied(CallError.PROTOCOL, "the sandbox sent an oversized reply and was restarted")
            # Poll first: the reply is rarely there yet, and a failing read costs an exception.
            self._wait(self._readable, deadline, timeout)
            try:
                chunk = os.read(self.handle.read_fd, 1 << 16)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise WorkerDied(*self.handle.death())
            if not buffer and chunk.find(b"\n") == len(chunk) - 1:
                return chunk[:-1]  # the common case: exactly one whole reply, no copying
            buffer += chunk

    def _wait(self, poller: select.poll, deadline: float, timeout: float) -> None:
        # A passed deadline means "wait no longer", not "ignore what already arrived": a
        # worker's greeting that waited while the model thought for minutes is still good.
        remaining = max(0.0, deadline - time.monotonic())
        if not poller.poll(int(remaining * 1000) + (remaining > 0)):
            if time.monotonic() >= deadline:
                raise WorkerDied(
                    CallError.TIMEOUT,
                    f"the call took longer than {timeout:g} s and was stopped; the sandbox was restarted",
                )


@dataclass(frozen=True)
class _Boot:
    """A launched worker whose hello, ``load`` and ``reset`` replies are still unread."""

    load_id: int
    reset_id: int | None
    started: float


class ProcessSandbox(Sandbox):
    """A :class:`Sandbox` whose bundle code runs in a restartable worker process."""

    backend = "process"

    def __init__(self, bundle_dir: Path, limits: Limits | None = None) -> None:
        super().__init__(bundle_dir, limits)
        # The worker sees a private copy of the code files only: not tasks.jsonl (gold data),
        # not the pristine state/, and nothing that depends on the caller's file permissions.
        self._scratch = Path(tempfile.mkdtemp(prefix="envgym-sandbox-"))
        self._live: list[WorkerHandle] = []  # the running worker, for the finalizer
        # A sandbox dropped without close() must not leave a worker (or container) behind.
        self._cleanup = weakref.finalize(self, _shutdown, self._live, self._scratch)
        self.stage = self._scratch / "bundle"
        self.stage.mkdir(mode=0o755)
        for name in CODE_FILES:
            if (self.bundle_dir / name).is_file():
                shutil.copyfile(self.bundle_dir / name, self.stage / name)
                os.chmod(self.stage / name, 0o644)
        os.chmod(self.stage, 0o755)
        self._conn: Connection | None = None
        self._boot: _Boot | None = None
        self._bound: Path | None = None  # the state dir the live worker has mounted
        self._state: Path | None = None  # the state dir of the current episode
        self._load: dict[str, Any] | None = None
        self._tainted = False  # the live worker left something running: replace it
        self._closed = False

    # -- backend hooks ---------------------------------------------------------------------
    @abc.abstractmethod
    def _launch(self, state: Path | None) -> WorkerHandle:
        """Start a worker that sees ``self.stage`` and ``state`` (if any) at SANDBOX_*.

        Makes ``state`` writable for the new worker first (see :meth:`_prepare_state`).
        """

    def _prepare_state(self, state: Path) -> None:
        """Make ``state`` writable for the live worker (e.g. chown to its uid)."""

    def worker_config(self, **extra: Any) -> str:
        config = {
            "bundle_dir": SANDBOX_BUNDLE,
            "max_reply_bytes": self.limits.max_reply_bytes,
            "max_stdout_bytes": self.limits.max_stdout_bytes,
            **extra,
        }
        return json.dumps(config, separators=(",", ":"))

    # -- the contract ----------------------------------------------------------------------
    def describe_tools(self) -> list[ToolSpec]:
        from envgym.bundle import BundleError  # host-only module; imported lazily

        try:
            self._connection()
        except WorkerDied as exc:
            raise BundleError("tools.py", f"the sandbox could not load the bundle: {exc.message}") from None
        assert self._load is not None
        if not self._load.get("ok"):
            raise BundleError(self._load.get("file") or "tools.py", self._load.get("message", ""))
        return [ToolSpec(**spec) for spec in self._load["value"]["tools"]]

    def reset(self, state_dir: Path) -> None:
        if self._closed:
            raise RuntimeError("sandbox is closed")
        state = Path(state_dir).resolve()
        if not state.is_dir():
            raise FileNotFoundError(f"episode state directory {state} does not exist")
        # A fresh worker per episode: nothing the last episode started (threads, processes,
        # patched modules, globals) can run in this one.  The old worker is dead when
        # _discard returns; the new one boots while the caller renders the first prompt and
        # the policy thinks (its replies are read at the next op).
        self._discard()
        self._state = state
        self._start()

    def call_tool(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        request = {"op": "call", "name": name, "arguments": arguments}
        return self._outcome(request, self.limits.call_timeout_s)[0]

    def solve(self, function: str, task: dict[str, Any], submit_tool: str | None) -> SolveOutcome:
        request = {"op": "solve", "function": function, "task": task, "submit_tool": submit_tool}
        outcome, reply = self._outcome(request, self.limits.solve_timeout_s)
        calls = [(str(name), dict(args)) for name, args in reply.get("calls") or []]
        return SolveOutcome(outcome=outcome, calls=calls, submission=reply.get("submission"))

    def verify(self, function: str, submission: dict[str, Any], task: dict[str, Any]) -> CallOutcome:
        request = {"op": "verify", "function": function, "submission": submission, "task": task}
        return self._outcome(request, self.limits.call_timeout_s)[0]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._discard()
        self._cleanup()

    # -- machinery -------------------------------------------------------------------------
    def _outcome(self, request: dict[str, Any], timeout: float) -> tuple[CallOutcome, dict[str, Any]]:
        start = time.perf_counter()
        try:
            conn = self._connection()
            if not self._load or not self._load.get("ok"):
                message = (self._load or {}).get("message", "the bundle failed to load")
                return CallOutcome(ok=False, error=CallError.EXCEPTION, message=message), {}
            reply = self._exchange(request, timeout, conn)
            if not conn.handle.quiet():
                # Something of this call still runs: it must not see the next request.
                self._tainted = True
        except WorkerDied as exc:
            reply = {"ok": False, "error": exc.kind.value, "message": exc.message}
        duration = time.perf_counter() - start
        if reply.get("ok"):
            outcome = CallOutcome(ok=True, value=reply.get("value"), stdout=reply.get("stdout", ""), duration_s=duration)
            return outcome, reply
        try:
            kind = CallError(reply.get("error"))
        except ValueError:
            kind = CallError.PROTOCOL
        outcome = CallOutcome(
            ok=False,
            error=kind,
            message=str(reply.get("message", "")),
            stdout=str(reply.get("stdout", "")),
            duration_s=duration,
        )
        return outcome, reply

    def _exchange(self, request: dict[str, Any], timeout: float, conn: Connection | None = None) -> dict[str, Any]:
        conn = conn or self._connection()
        try:
            return conn.request(request, timeout)
        except WorkerDied:
            self._discard()
            raise

    def _connection(self) -> Connection:
        """The live worker's connection, starting (and re-loading) a worker when needed."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        if self._tainted:
            self._discard()
        if self._conn is None:
            self._start()
        if self._boot is not None:
            self._finish_boot()
        assert self._conn is not None
        return self._conn

    def _start(self) -> None:
        """Launch a worker and queue ``load`` (+ ``reset``) behind its startup."""
        state = self._state
        handle = self._launch(state)
        self._live.append(handle)
        conn = Connection(handle, self.limits.max_reply_bytes + self.limits.max_stdout_bytes + _REPLY_SLACK)
        self._conn, self._bound = conn, state
        started = time.monotonic()
        startup = self.limits.startup_timeout_s
        deadline = started + startup
        try:
            load_id = conn.send({"op": "load"}, deadline, startup)
            reset = {"op": "reset", "state_dir": SANDBOX_STATE}
            reset_id = conn.send(reset, deadline, startup) if state is not None else None
        except WorkerDied:
            load_id, reset_id = -1, None  # the worker is already gone: _finish_boot reports it
        self._boot = _Boot(load_id, reset_id, started)
        if self._closed:
            # close() ran in another thread while this worker launched (an env pool closes a
            # cancelled episode's env while its reset runs): close() sets _closed before it
            # reads _conn, and this check comes after _conn is published, so one of the two
            # always sees the new worker and kills it (issue 8 item 9b: leaked bwrap/zombie).
            self._discard()
            raise RuntimeError("sandbox is closed")

    def _finish_boot(self) -> None:
        boot, conn = self._boot, self._conn
        assert boot is not None and conn is not None
        self._boot = None
        greeted = False
        try:
            # The start-up deadline counts from the launch and bounds the worker's start only:
            # a greeting that arrived in time is read however late the first op comes.
            startup = self.limits.startup_timeout_s
            hello = conn.read_reply(0, boot.started + startup, startup)
            greeted = bool(hello.get("ok"))
            if not greeted or boot.load_id < 0:
                raise WorkerDied(CallError.CRASH, "the sandbox worker failed to start")
            # Importing the bundle is bundle code: it gets the per-call limit, not the startup one.
            timeout = self.limits.call_timeout_s
            load = conn.read_reply(boot.load_id, time.monotonic() + timeout, timeout)
            if self._load is None or load.get("ok"):
                self._load = load
            if boot.reset_id is not None:
                reset = conn.read_reply(boot.reset_id, time.monotonic() + timeout, timeout)
                if not reset.get("ok"):
                    message = f"the sandbox could not open the episode state: {reset.get('message')}"
                    raise WorkerDied(CallError.CRASH, message)
        except WorkerDied as exc:
            handle = conn.handle
            self._discard()
            if not greeted:  # the launcher failed, not bundle code: an operator problem
                details = handle.diagnostics() or exc.message
                raise SandboxUnavailable(f"{self.backend} sandbox worker did not start: {details}") from None
            raise

    def _discard(self) -> None:
        conn, self._conn, self._bound, self._boot = self._conn, None, None, None
        self._tainted = False
        if conn is not None:
            conn.handle.kill()
        self._live.clear()


def _shutdown(live: list[WorkerHandle], scratch: Path) -> None:
    for handle in live:
        try:
            handle.kill()
        except Exception:  # at interpreter exit the engine client may be half torn down
            pass
    live.clear()
    shutil.rmtree(scratch, ignore_errors=True)
