"""Env workers for the rollout engine.

Env work (reset/step) blocks — it talks to a sandboxed worker — so it never runs on the event
loop: :class:`ThreadEnvPool` runs each env's calls in a thread pool; the Ray pool
(``envgym.rollout.ray_engine``) runs them in Ray actors.  Both hand out :class:`EnvHandle` s:
one env, one episode at a time.  What they share lives here once: :class:`EnvRunner` (the calls
made on one env, in a thread or inside an actor) and :class:`SlotPool` (slots, idle and live
envs, acquire/release/close); a pool only says how an env is opened and how it is discarded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from envgym.core import Action, Env, Observation, StepResult


class EnvHandle(Protocol):
    async def reset(
        self, *, seed: int | None, options: dict[str, Any]
    ) -> tuple[Observation, dict[str, Any]]: ...

    async def step(self, action: Action) -> StepResult: ...

    async def history(self) -> list[dict[str, Any]]:
        """The episode's full history (not only what the context policy rendered)."""
        ...


# A pool's own handle type: what it hands out is what it takes back.
PoolHandle = TypeVar("PoolHandle", bound=EnvHandle)


class EnvPool(Protocol[PoolHandle]):
    async def acquire(self) -> PoolHandle: ...

    async def release(self, handle: PoolHandle, *, healthy: bool) -> None:
        """Return an env; an unhealthy one (a call timed out or raised) is closed, not reused."""
        ...

    async def aclose(self) -> None: ...


def env_history(env: Env, last_obs: Observation | None) -> list[dict[str, Any]]:
    history = getattr(env, "history", None)
    if isinstance(history, list):
        return [dict(m) for m in history]
    return list(last_obs["messages"]) if last_obs else []


class EnvRunner:
    """One env and its last observation: the blocking calls every pool makes, in one place
    (a :class:`ThreadEnvPool` runs them in its threads, a Ray env actor *is* one)."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.last: Observation | None = None

    def reset(
        self, seed: int | None, options: dict[str, Any]
    ) -> tuple[Observation, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.last = obs
        return obs, info

    def step(self, action: Action) -> StepResult:
        result = self.env.step(action)
        self.last = result[0]
        return result

    def history(self) -> list[dict[str, Any]]:
        return env_history(self.env, self.last)

    def close(self) -> None:
        self.env.close()


H = TypeVar("H")


class SlotPool(ABC, Generic[H]):
    """Up to ``size`` envs, opened lazily and reused while healthy.

    Subclasses say how to open an env (:meth:`_open`, which must leave nothing behind when it
    fails or is cancelled) and how to get rid of one (:meth:`_discard`, :meth:`_close_all`).
    """

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError(f"pool size must be positive, not {size}")
        self.size = size
        self._idle: list[H] = []
        self._live: set[H] = set()
        self._slots = asyncio.Semaphore(size)
        self._closed = False

    @abstractmethod
    async def _open(self) -> H:
        """A new env's handle."""

    @abstractmethod
    async def _discard(self, handle: H) -> None:
        """Close an unhealthy env (a call timed out or raised); never raises."""

    @abstractmethod
    async def _close_all(self, handles: list[H]) -> None:
        """Close every env at shutdown."""

    async def acquire(self) -> H:
        if self._closed:
            raise RuntimeError("the env pool is closed")
        await self._slots.acquire()
        if self._idle:
            return self._idle.pop()
        try:
            handle = await self._open()
        except BaseException:
            self._slots.release()
            raise
        self._live.add(handle)
        return handle

    async def release(self, handle: H, *, healthy: bool) -> None:
        """Return an env; an unhealthy one is closed, not reused."""
        try:
            if healthy and not self._closed:
                self._idle.append(handle)
            else:
                self._live.discard(handle)
                await self._discard(handle)
        finally:
            self._slots.release()

    async def aclose(self) -> None:
        self._closed = True
        handles, self._idle = list(self._live), []
        self._live.clear()
        await self._close_all(handles)

    @property
    def open_envs(self) -> int:
        return len(self._live)


def _close_result(future: concurrent.futures.Future[Env | None]) -> None:
    if (
        not future.cancelled()
        and future.exception() is None
        and (env := future.result()) is not None
    ):
        env.close()


class _ThreadHandle:
    def __init__(self, env: Env, executor: concurrent.futures.Executor) -> None:
        self.runner = EnvRunner(env)
        self._executor = executor

    @property
    def env(self) -> Env:
        return self.runner.env

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def reset(
        self, *, seed: int | None, options: dict[str, Any]
    ) -> tuple[Observation, dict[str, Any]]:
        return await self._call(self.runner.reset, seed, options)

    async def step(self, action: Action) -> StepResult:
        return await self._call(self.runner.step, action)

    async def history(self) -> list[dict[str, Any]]:
        return self.runner.history()


class ThreadEnvPool(SlotPool[_ThreadHandle]):
    """Up to ``size`` envs made by ``factory`` (lazily), their calls run in a thread pool.

    ``env.close()`` of a discarded env is not serialized behind its stuck call: closing the
    sandbox kills the worker, which is what unblocks that call.
    """

    def __init__(self, factory: Callable[[], Env], size: int) -> None:
        super().__init__(size)
        self.factory = factory
        # Calls of discarded envs may still hold a thread until their sandbox is killed.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2 * size, thread_name_prefix="envgym-env"
        )

    async def _open(self) -> _ThreadHandle:
        abandoned = threading.Event()

        def make() -> Env | None:
            env = self.factory()
            if abandoned.is_set():  # the caller was cancelled while the sandbox started
                env.close()
                return None
            return env

        future = self._executor.submit(make)
        try:
            env = await asyncio.wrap_future(future)
        except BaseException:
            abandoned.set()
            future.add_done_callback(_close_result)  # if ``make`` returned just before the flag
            raise
        assert env is not None
        return _ThreadHandle(env, self._executor)

    async def _discard(self, handle: _ThreadHandle) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.shield(loop.run_in_executor(self._executor, handle.runner.close))
        except Exception:  # noqa: BLE001 - a broken env still gets dropped
            pass

    async def _close_all(self, handles: list[_ThreadHandle]) -> None:
        await asyncio.gather(*(self._discard(h) for h in handles), return_exceptions=True)
        # Off the loop: a call of a just-killed sandbox may take a moment to notice.
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
