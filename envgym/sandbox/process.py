"""The host side of an out-of-process sandbox, shared by the bwrap and Docker backends.

A backend only says how to *launch* a worker (:meth:`ProcessSandbox._launch`), returning a
:class:`WorkerHandle`: the fds of its request/reply stream plus how to kill it and why it died.
Everything else lives here: the line protocol with wall-clock deadlines (``poll`` on
non-blocking fds, no threads), killing and lazily restarting the worker, and replaying ``load``
and the last ``reset`` so the next call after a crash works on the same episode state.

Latency matters (an RL rollout makes thousands of tool calls): one request is one ``write``,
one ``poll`` and usually one ``read`` on each side, with compact JSON.

Isolation (docs/SANDBOX.md "Episodes and restarts"): every ``reset`` starts a
fresh worker, so no code of an earlier episode runs in a later one; and after every op the
host looks at the worker from outside (:meth:`WorkerHandle.quiet`: one thread, no other
process in the sandbox).  A worker that is not quiet is replaced before the next request, so
a thread or process a call left behind never sees another request nor the channel its reply
would travel on.  Bundle code can forge anything *within* its own call (that is the same as
the tool returning that value); the host trusts nothing the worker says about itself.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.runtime import CODE_DATA, CODE_FILES
from envgym.sandbox.base import (
    CallError,
    CallOutcome,
    Limits,
    Sandbox,
    SandboxUnavailable,
    SolveOutcome,
    ToolSpec,
    call_limit,
)
from envgym.sandbox.bytecode import compile_stage
from envgym.sandbox.channel import Connection, WorkerDied, WorkerHandle, signal_death
from envgym.sandbox.pool import WorkerPool, reap

__all__ = ["Connection", "ProcessSandbox", "WorkerDied", "WorkerHandle", "signal_death"]

STARTUP_TIMEOUT_S = 60.0  # interpreter start + namespaces/container creation, under load
SANDBOX_BUNDLE = "/bundle"  # where the worker sees the bundle's code
SANDBOX_STATE = "/state"  # where the worker sees the episode state
DEATH_WAIT_S = 5.0  # what a backend's kill() waits at most for its sandbox to be empty
_REPLY_SLACK = 1 << 20  # room for the reply envelope and captured output over max_reply_bytes


@dataclass(frozen=True)
class _Boot:
    """A launched worker whose hello, ``load`` and ``reset`` replies are still unread."""

    load_id: int
    reset_id: int | None
    started: float


class ProcessSandbox(Sandbox):
    """A :class:`Sandbox` whose bundle code runs in a restartable worker process."""

    backend = "process"
    loads_bytecode = False  # whether workers run the host's interpreter (bytecode.py)

    def __init__(self, bundle_dir: Path, limits: Limits | None = None) -> None:
        super().__init__(bundle_dir, limits)
        # The worker sees a private copy of the code files (and the data they read at import,
        # CODE_DATA) only: not tasks.jsonl (gold data),
        # not the pristine state/, and nothing that depends on the caller's file permissions.
        self._scratch = Path(tempfile.mkdtemp(prefix="envgym-sandbox-"))
        self._live: list[WorkerHandle] = []  # the running worker, for the finalizer
        self._pool: WorkerPool[_Spare] | None = None
        self._pool_box: list[WorkerPool[Any]] = []  # the pool, for the finalizer
        self._dying: list[Future[None]] = []  # kills of handed-over episodes' workers
        self._launching = threading.Lock()  # _launch sets per-launch fields (the bwrap uid)
        # A sandbox dropped without close() must not leave a worker (or container) behind.
        self._cleanup = weakref.finalize(
            self, _shutdown, self._live, self._scratch, self._pool_box, self._dying
        )
        self.stage = self._scratch / "bundle"
        self.stage.mkdir(mode=0o755)
        for name in (*CODE_FILES, *CODE_DATA):
            if (self.bundle_dir / name).is_file():
                shutil.copyfile(self.bundle_dir / name, self.stage / name)
                os.chmod(self.stage / name, 0o644)
        # Compiled once here for every worker of this sandbox (bytecode.py), where they can load it.
        self.bytecode = compile_stage(self.stage, SANDBOX_BUNDLE) if self.loads_bytecode else ()
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
            raise BundleError(
                "tools.py", f"the sandbox could not load the bundle: {exc.message}"
            ) from None
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

    def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> CallOutcome:
        request = {"op": "call", "name": name, "arguments": arguments}
        return self._outcome(request, call_limit(self.limits.call_timeout_s, timeout_s))[0]

    def solve(self, function: str, task: dict[str, Any], submit_tool: str | None) -> SolveOutcome:
        request = {"op": "solve", "function": function, "task": task, "submit_tool": submit_tool}
        outcome, reply = self._outcome(request, self.limits.solve_timeout_s)
        calls = [(str(name), dict(args)) for name, args in reply.get("calls") or []]
        return SolveOutcome(outcome=outcome, calls=calls, submission=reply.get("submission"))

    def verify(
        self, function: str, submission: dict[str, Any], task: dict[str, Any]
    ) -> CallOutcome:
        request = {"op": "verify", "function": function, "submission": submission, "task": task}
        return self._outcome(request, self.limits.call_timeout_s)[0]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._discard()
        self._cleanup()

    # -- machinery -------------------------------------------------------------------------
    def _outcome(
        self, request: dict[str, Any], timeout: float
    ) -> tuple[CallOutcome, dict[str, Any]]:
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
            outcome = CallOutcome(
                ok=True,
                value=reply.get("value"),
                stdout=reply.get("stdout", ""),
                duration_s=duration,
            )
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

    def _exchange(
        self, request: dict[str, Any], timeout: float, conn: Connection | None = None
    ) -> dict[str, Any]:
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
        with self._launching:
            handle = self._launch(state)
        self._live.append(handle)
        self._conn, self._bound = self._connect(handle), state
        self._boot = self._queue_boot(self._conn, state is not None)
        if self._closed:
            # close() ran in another thread while this worker launched (an env pool closes a
            # cancelled episode's env while its reset runs): close() sets _closed before it
            # reads _conn, and this check comes after _conn is published, so one of the two
            # always sees the new worker and kills it (else a bwrap leaks, later a zombie).
            self._discard()
            raise RuntimeError("sandbox is closed")

    def _connect(self, handle: WorkerHandle) -> Connection:
        return Connection(
            handle, self.limits.max_reply_bytes + self.limits.max_stdout_bytes + _REPLY_SLACK
        )

    def _queue_boot(self, conn: Connection, with_state: bool) -> _Boot:
        started = time.monotonic()
        startup = self.limits.startup_timeout_s
        deadline = started + startup
        try:
            load_id = conn.send({"op": "load"}, deadline, startup)
            reset = {"op": "reset", "state_dir": SANDBOX_STATE}
            reset_id = conn.send(reset, deadline, startup) if with_state else None
        except WorkerDied:
            load_id, reset_id = -1, None  # the worker is already gone: _read_boot reports it
        return _Boot(load_id, reset_id, started)

    def _finish_boot(self) -> None:
        boot, conn = self._boot, self._conn
        assert boot is not None and conn is not None
        self._boot = None
        try:
            load = self._read_boot(conn, boot)
        except (WorkerDied, SandboxUnavailable):
            self._discard()
            raise
        if self._load is None or load.get("ok"):
            self._load = load

    def _read_boot(self, conn: Connection, boot: _Boot) -> dict[str, Any]:
        """The worker's greeting, ``load`` and ``reset`` replies; its ``load`` reply.

        Raises :class:`SandboxUnavailable` when it never greeted (the launcher failed: an
        operator problem), :class:`WorkerDied` when bundle code or the state failed it.
        """
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
            if boot.reset_id is not None:
                reset = conn.read_reply(boot.reset_id, time.monotonic() + timeout, timeout)
                if not reset.get("ok"):
                    message = (
                        f"the sandbox could not open the episode state: {reset.get('message')}"
                    )
                    raise WorkerDied(CallError.CRASH, message)
            return load
        except WorkerDied as exc:
            if not greeted:
                details = conn.handle.diagnostics() or exc.message
                conn.handle.kill()
                raise SandboxUnavailable(
                    f"{self.backend} sandbox worker did not start: {details}"
                ) from None
            raise

    def _discard(self) -> None:
        conn, self._conn, self._bound, self._boot = self._conn, None, None, None
        self._tainted = False
        if conn is not None:
            conn.handle.kill()
        self._live.clear()

    # -- pre-started workers (pool.py) -----------------------------------------------------
    def start_pool(self, lease: StateLease) -> bool:
        if self._closed or self._pool is not None or self.backend != "bwrap":
            # Docker starts containers through its engine client, which is not known to be
            # safe from a background thread; it keeps starting workers inline.
            return self._pool is not None
        self._pool = WorkerPool(_weak_maker(self, lease), _kill_spare)
        self._pool_box[:] = [self._pool]
        self._pool.request()
        return True

    def take_pooled(self) -> tuple[Path, Callable[[], None]] | None:
        if self._closed:
            raise RuntimeError("sandbox is closed")
        # A spare being made is waited for (it is ready before an inline start would be).
        spare = self._pool.take(self.limits.startup_timeout_s) if self._pool is not None else None
        if spare is None:
            return None
        # The last episode's worker gets no request any more and is killed on the reaper
        # thread: it has its own state directory (a spare's, or the env's own one, which the
        # next refill replaces by a fresh tmpfs), so nothing it still does reaches the new one.
        old, self._conn, self._bound, self._boot, self._tainted = (
            self._conn,
            None,
            None,
            None,
            False,
        )
        self._live.clear()
        if old is not None:
            self._dying[:] = [f for f in self._dying if not f.done()]
            self._dying.append(reap(old.handle.kill))
        self._live.append(spare.conn.handle)
        self._conn, self._boot, self._bound = spare.conn, spare.boot, spare.state
        self._state = spare.state
        if self._closed:  # close() in another thread meanwhile: see _start
            self._discard()
            spare.release()
            raise RuntimeError("sandbox is closed")
        return spare.state, spare.release

    def _make_spare(self, lease: StateLease) -> _Spare:
        """On a refill thread: a fresh state and a worker launched on it, its ``load`` and
        ``reset`` queued; it boots in its own processes and its replies are read at its first
        op, as for an inline start (so a spare is ready as soon as it is launched)."""
        state, release = lease()
        try:
            with self._launching:
                handle = self._launch(state)
            conn = self._connect(handle)
            boot = self._queue_boot(conn, True)
        except BaseException:
            release()
            raise
        return _Spare(state, release, conn, boot)


StateLease = Callable[[], "tuple[Path, Callable[[], None]]"]


@dataclass(frozen=True)
class _Spare:
    """A launched, never-used worker and the fresh state directory it has mounted."""

    state: Path
    release: Callable[[], None]  # unmounts and removes ``state``
    conn: Connection
    boot: _Boot  # its hello, load and reset replies, read at the first op


def _kill_spare(spare: _Spare) -> None:
    spare.conn.handle.kill()
    spare.release()


def _weak_maker(sandbox: ProcessSandbox, lease: StateLease) -> Callable[[], _Spare | None]:
    """``sandbox._make_spare(lease)`` without keeping the sandbox alive (its finalizer must
    still run when it is dropped without close())."""
    ref = weakref.ref(sandbox)

    def make() -> _Spare | None:
        box = ref()
        return None if box is None or box._closed else box._make_spare(lease)

    return make


def _shutdown(
    live: list[WorkerHandle], scratch: Path, pool: list[WorkerPool[Any]], dying: list[Future[None]]
) -> None:
    for spares in pool:
        spares.close()
    for kill in dying:  # close() returns when no worker of this sandbox is left
        # A kill that failed or hung must not stop the next ones.
        with contextlib.suppress(Exception):
            kill.result(timeout=2 * DEATH_WAIT_S)
    dying.clear()
    for handle in live:
        # At interpreter exit the engine client may be half torn down.
        with contextlib.suppress(Exception):
            handle.kill()
    live.clear()
    shutil.rmtree(scratch, ignore_errors=True)
