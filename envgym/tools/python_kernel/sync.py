"""Blocking wrappers over the async pool, for synchronous callers such as ``gymnasium`` envs.

The pool lives on an event loop in a daemon thread; each call is a coroutine submitted to it
(``run_coroutine_threadsafe``), which costs a few tens of microseconds.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import weakref
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from envgym.tools.python_kernel.config import KernelConfig
from envgym.tools.python_kernel.pool import KernelPool, PoolStats
from envgym.tools.python_kernel.session import ExecutionResult, KernelSession

T = TypeVar("T")


class SyncKernelPool:
    """A :class:`KernelPool` driven from synchronous code.  Thread-safe; ``close`` when done
    (also done at interpreter exit)."""

    def __init__(
        self,
        config: KernelConfig | None = None,
        *,
        warm: int = 2,
        max_kernels: int = 8,
        health_interval_s: float = 15.0,
        root: Path | None = None,
        wait: bool = True,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="envgym-kernel-pool", daemon=True
        )
        self._thread.start()
        self.pool = KernelPool(
            config,
            warm=warm,
            max_kernels=max_kernels,
            health_interval_s=health_interval_s,
            root=root,
        )
        self._closed = False
        try:
            self._run(self.pool.start(wait=wait))
        except BaseException:
            self.close()
            raise
        _at_exit(weakref.ref(self))

    @property
    def config(self) -> KernelConfig:
        return self.pool.config

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the kernel pool is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def acquire(self, timeout_s: float | None = 120.0) -> SyncKernelSession:
        """A fresh kernel for one episode (see :meth:`KernelPool.acquire`)."""
        return SyncKernelSession(self, self._run(self.pool.acquire(timeout_s)))

    def stats(self) -> PoolStats:
        return self.pool.stats()

    def close(self) -> None:
        if self._closed:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.pool.close(), self._loop).result(30)
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> SyncKernelPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncKernelSession:
    """A :class:`KernelSession` driven from synchronous code."""

    def __init__(self, pool: SyncKernelPool, session: KernelSession) -> None:
        self._pool = pool
        self.session = session

    @property
    def workspace(self) -> Path:
        return self.session.workspace

    @property
    def executions(self) -> int:
        return self.session.executions

    @property
    def restarts(self) -> int:
        return self.session.restarts

    @property
    def closed(self) -> bool:
        return self.session.closed

    def execute(self, code: str, timeout_s: float | None = None) -> ExecutionResult:
        return self._pool._run(self.session.execute(code, timeout_s))

    def hand_over_workspace(self) -> None:
        self.session.hand_over_workspace()

    def restart(self) -> None:
        self._pool._run(self.session.restart())

    def close(self) -> None:
        if not self.session.closed and not self._pool._closed:
            self._pool._run(self.session.close())

    def __enter__(self) -> SyncKernelSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _at_exit(ref: weakref.ref[SyncKernelPool]) -> None:
    """Close the pool at exit *before* the interpreter joins its thread pools.

    Closed from an ``atexit`` hook, the pool needed ``asyncio.to_thread``
    (killing jails, a refill's launch) after concurrent.futures had already shut its executors
    down, so ``close`` hung until its 30 s timeout and the loop died with pending tasks
    ("Task was destroyed but it is pending").  threading's exit hooks run first (last
    registered, first run), while the executors and the pool's loop thread still work."""
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(_close_ref, ref)
            return
        except RuntimeError:  # the interpreter is already shutting down
            pass
    atexit.register(_close_ref, ref)


def _close_ref(ref: weakref.ref[SyncKernelPool]) -> None:
    pool = ref()
    if pool is not None:
        pool.close()
