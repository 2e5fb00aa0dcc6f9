"""Pre-started, never-used workers: a ``reset`` hands one over instead of starting one.

Every episode gets a fresh worker (docs/SANDBOX.md "Episodes and restarts"), and starting one
(namespaces, an interpreter, importing the bundle) costs 15-20 ms, most of a sandboxed reset.
A :class:`WorkerPool` keeps one *spare* per sandbox: a worker started on its own fresh state
directory (a new tmpfs filled with the pristine state), launched by a background thread with
its ``load`` and ``reset`` queued, and never given a request; it boots in its own processes and
its replies are read at its first op.  A reset takes the spare and asks for the next one.  Nothing about isolation changes: a worker still serves exactly one episode, and
the state it sees was written for that episode only.

Bounded: spares are made by a few process-wide threads (:data:`REFILL_THREADS`, never on the
caller's thread or event loop) and at most ``$ENVGYM_SANDBOX_SPARES`` (default
:data:`DEFAULT_MAX_SPARES`) exist or are being made at once in a process; pools past the
budget wait their turn in FIFO order.  When every env resets at once the spares run out and a
reset starts its worker inline, as without a pool: the pool moves the start off the reset's
path, it does not make starting cheaper.

Fork: a child process does not inherit the pool (its threads did not survive the fork and the
spares belong to the parent): in a child, :meth:`WorkerPool.take` finds nothing and
:meth:`WorkerPool.close` only forgets the parent's spares, never kills them.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

SPARES_ENV = "ENVGYM_SANDBOX_SPARES"
DEFAULT_MAX_SPARES = 64  # each spare is a live worker (~10-20 MiB); 512 envs must not double
REFILL_THREADS = 2  # starts run in the worker's own processes; more threads only queue CPU

T = TypeVar("T")
log = logging.getLogger(__name__)


def max_spares() -> int:
    raw = os.environ.get(SPARES_ENV)
    if not raw:
        return DEFAULT_MAX_SPARES
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${SPARES_ENV} must be a whole number of workers, got {raw!r}") from None
    if not 0 <= value <= 100_000:
        raise ValueError(f"${SPARES_ENV} must be between 0 and 100000, got {value}")
    return value


class _Refiller:
    """The process's refill threads and its budget of spares (made or being made)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.limit = max_spares()
        self.executor = ThreadPoolExecutor(REFILL_THREADS, thread_name_prefix="envgym-pool")
        # Killing a worker waits until its sandbox is empty (~15 ms): off the reset's path, on
        # a thread of its own so kills never queue behind starts.
        self.reaper = ThreadPoolExecutor(1, thread_name_prefix="envgym-reaper")
        self.lock = threading.Lock()
        self.used = 0
        self.waiting: collections.deque[weakref.ref[WorkerPool[object]]] = collections.deque()

    def submit(self, pool: WorkerPool[Any]) -> None:
        with self.lock:
            if self.used >= self.limit:
                self.waiting.append(weakref.ref(pool))
                return
            self.used += 1
        self.executor.submit(pool._fill)

    def release(self) -> None:
        """A spare was taken or discarded: its slot goes to the longest-waiting pool."""
        with self.lock:
            self.used -= 1
            while self.waiting:
                pool = self.waiting.popleft()()
                if pool is not None and pool._wants():
                    self.used += 1
                    break
            else:
                return
        self.executor.submit(pool._fill)


_local = threading.local()
_refiller: list[_Refiller] = []
_refiller_lock = threading.Lock()


def refiller() -> _Refiller:
    with _refiller_lock:
        if not _refiller or _refiller[0].pid != os.getpid():  # none yet, or a forked child
            _refiller[:] = [_Refiller()]
        return _refiller[0]


def reap(kill: Callable[[], None]) -> Future[None]:
    """Run ``kill`` on the process's reaper thread; wait on the future before relying on it."""
    return refiller().reaper.submit(kill)


class WorkerPool(Generic[T]):
    """At most one spare for one sandbox.

    ``make`` builds a spare (on a refill thread; it must not hold the sandbox alive: pass a
    function over a weak reference) and ``discard`` kills one that will never be used.
    """

    def __init__(self, make: Callable[[], T | None], discard: Callable[[T], None]) -> None:
        self._make = make
        self._discard = discard
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._spare: T | None = None
        self._pending = False  # a spare was asked for (queued or being made)
        self._making = 0  # fills running now (a new one may start while the last one ends)
        self._closed = False
        self.failures = 0  # spares that failed to start (the inline start reports why)

    def request(self) -> None:
        """Make a spare in the background unless one is ready or asked for."""
        with self._cond:
            if self._closed or self._pending or self._spare is not None or self._pid != os.getpid():
                return
            self._pending = True
        refiller().submit(self)

    def take(self, wait_s: float = 0.0) -> T | None:
        """The ready spare (then the next one is requested), or None.

        A spare being made is waited for, up to ``wait_s``: it started before the caller
        would start its own, so it is ready first, and starting a second one would only
        compete with it for the CPU.  A spare still queued for a refill thread is not.
        """
        if self._pid != os.getpid():
            return None
        with self._cond:
            if self._spare is None and self._making and wait_s > 0:
                self._cond.wait_for(lambda: self._spare is not None or not self._making, wait_s)
            spare, self._spare = self._spare, None
        if spare is None:
            return None
        refiller().release()
        self.request()
        return spare

    def close(self, wait_s: float = 60.0) -> None:
        """Kill the ready spare, and one being made once it is done (waiting up to ``wait_s``
        for it), so that nothing of the pool runs after close() returns."""
        with self._cond:
            self._closed = True
            spare, self._spare = self._spare, None
        mine = self._pid == os.getpid()
        if spare is not None and mine:
            self._discard(spare)
            refiller().release()
        # Not on a refill thread: a sandbox dropped there (its last reference was the one
        # ``make`` held) is closed by its finalizer inside the very fill it would wait for.
        if mine and not getattr(_local, "filling", False):
            with self._cond:
                self._cond.wait_for(lambda: not self._making, wait_s)

    def ready(self) -> bool:
        """A spare is waiting to be taken."""
        with self._cond:
            return self._spare is not None

    # -- the refill thread's side ------------------------------------------------------------
    def _wants(self) -> bool:
        with self._cond:
            return self._pending and self._spare is None and not self._closed

    def _fill(self) -> None:
        with self._cond:
            start = self._pending and self._spare is None and not self._closed
            if start:
                self._making += 1
            else:
                self._pending = False
        if not start:
            refiller().release()
            return
        spare: T | None = None
        _local.filling = True
        try:
            spare = self._make()
        except Exception as exc:  # noqa: BLE001 - a failed spare only means an inline start
            self.failures += 1
            log.debug("a spare sandbox worker failed to start: %s", exc)
        finally:
            _local.filling = False
        with self._cond:
            self._pending = False
            keep = spare is not None and not self._closed
            if keep:
                self._spare = spare
        try:
            if not keep:
                if spare is not None:
                    self._discard(spare)
                refiller().release()
        finally:
            with self._cond:
                self._making -= 1
                self._cond.notify_all()
