"""The rollout engine on Ray (extra ``ray``): env workers — and optionally generation — in actors.

    engine = ray_engine(policy, env_factory, concurrency=64)          # ray.init() locally
    engine = ray_engine(policy, env_factory, address="ray://head:10001")  # or a cluster

Same :class:`RolloutEngine`, same streaming, budgets and cancellation; only where the envs live
changes.  Each env is one actor (its sandbox is a child of the actor process, so killing the
actor — what the engine does to an env that hung or raised — also kills its sandbox).  For
generation, :class:`RayPolicy` hosts policy replicas in actors and pins every session to one
replica so its KV cache stays where it was built (the single-controller layout of
Seed-Thinking-v1.5 §5: one driver, rollout and env workers as actors).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Any

from envgym.context.window import ContextWindowExceeded
from envgym.core import Action, Env, Observation
from envgym.policy import Policy, PolicyError, SamplingParams, Turn

from .engine import RolloutEngine
from .envpool import EnvRunner, SlotPool, StepResult


def _ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the Ray engine needs the extra: pip install 'envgym[ray]'"
        ) from None
    return ray


def ensure_ray(address: str | None = None, **init_kwargs: Any) -> Any:
    """``ray.init`` once: locally when ``address`` is None or "local", else the given cluster."""
    ray = _ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, **init_kwargs}
        ray.init(address=None if address in (None, "local") else address, **kwargs)
    return ray


class _EnvActor(EnvRunner):
    """An :class:`EnvRunner` in a Ray actor: the env is built inside the actor process."""

    def __init__(self, factory: Callable[[], Env]) -> None:
        super().__init__(factory())


class _RayHandle:
    def __init__(self, actor: Any) -> None:
        self.actor = actor

    async def reset(
        self, *, seed: int | None, options: dict[str, Any]
    ) -> tuple[Observation, dict[str, Any]]:
        return await self.actor.reset.remote(seed, options)

    async def step(self, action: Action) -> StepResult:
        return await self.actor.step.remote(action)

    async def history(self) -> list[dict[str, Any]]:
        return await self.actor.history.remote()


class RayEnvPool(SlotPool[_RayHandle]):
    """Up to ``size`` env actors made from ``factory`` (which must pickle, e.g. a ``functools.partial``).

    ``actor_options`` go to ``ray.remote`` (``num_cpus``, ``resources``, ``scheduling_strategy``…);
    by default an env actor reserves no CPU, since it mostly waits on its sandbox.
    """

    def __init__(
        self,
        factory: Callable[[], Env],
        size: int,
        *,
        address: str | None = None,
        actor_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(size)
        self._ray = ensure_ray(address)
        self._cls = self._ray.remote(**{"num_cpus": 0, **(actor_options or {})})(_EnvActor)
        self.factory = factory

    async def _open(self) -> _RayHandle:
        handle = _RayHandle(self._cls.remote(self.factory))
        try:
            await handle.actor.history.remote()  # surfaces a factory that fails in the actor
        except BaseException:
            self._ray.kill(handle.actor)  # also when cancelled while it started
            raise
        return handle

    async def _discard(self, handle: _RayHandle) -> None:
        self._ray.kill(handle.actor)  # also ends its sandbox (die-with-parent)

    async def _close_all(self, handles: list[_RayHandle]) -> None:
        closing = [h.actor.close.remote() for h in handles]
        await asyncio.gather(*closing, return_exceptions=True)
        for h in handles:
            self._ray.kill(h.actor)


def ray_engine(
    policy: Policy,
    env_factory: Callable[[], Env],
    *,
    concurrency: int = 8,
    address: str | None = None,
    actor_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> RolloutEngine:
    """A :class:`RolloutEngine` whose envs are Ray actors."""
    pool = RayEnvPool(env_factory, concurrency, address=address, actor_options=actor_options)
    return RolloutEngine(policy, pool, concurrency=concurrency, **kwargs)


class _PolicyActor:
    def __init__(self, factory: Callable[[], Policy]) -> None:
        self.policy = factory()

    async def describe(self) -> tuple[str, int]:
        return self.policy.name, self.policy.version

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        return await self.policy.act(session, messages, tools, params)

    async def end_session(self, session: str) -> None:
        await self.policy.end_session(session)

    async def aclose(self) -> None:
        await self.policy.aclose()


class RayPolicy:
    """``replicas`` copies of the policy ``factory()`` builds, each in a Ray actor.

    A session always goes to the same replica (crc32 of its id), so backends that keep a
    per-session KV cache keep reusing it.  A replica's ``PolicyError`` arrives as a
    ``PolicyError``; a dead replica becomes one too (the episode errors, the run goes on).
    """

    def __init__(
        self,
        factory: Callable[[], Policy],
        *,
        replicas: int = 1,
        address: str | None = None,
        actor_options: dict[str, Any] | None = None,
    ) -> None:
        if replicas <= 0:
            raise ValueError(f"replicas must be positive, not {replicas}")
        self._ray = ensure_ray(address)
        cls = self._ray.remote(**{"num_cpus": 0, "max_concurrency": 1024, **(actor_options or {})})(
            _PolicyActor
        )
        self._replicas = [cls.remote(factory) for _ in range(replicas)]
        self.name, self.version = self._ray.get(self._replicas[0].describe.remote())

    def _replica(self, session: str) -> Any:
        return self._replicas[zlib.crc32(session.encode()) % len(self._replicas)]

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        try:
            return await self._replica(session).act.remote(session, messages, tools, params)
        except self._ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, PolicyError):
                # Keep ContextWindowExceeded: it truncates the episode rather than erroring it.
                window = isinstance(cause, ContextWindowExceeded)
                raise (ContextWindowExceeded if window else PolicyError)(str(cause)) from None
            raise PolicyError(f"policy replica raised {type(cause).__name__}: {cause}") from None
        except self._ray.exceptions.RayActorError as exc:
            raise PolicyError(f"policy replica died: {exc}") from None

    async def end_session(self, session: str) -> None:
        await self._replica(session).end_session.remote(session)

    async def aclose(self) -> None:
        await asyncio.gather(*(r.aclose.remote() for r in self._replicas), return_exceptions=True)
        for r in self._replicas:
            self._ray.kill(r)
