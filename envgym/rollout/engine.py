"""The rollout engine: many episodes, one async loop, bounded concurrency, streamed results.

    async with RolloutEngine(policy, ThreadEnvPool(factory, 8), concurrency=8) as engine:
        async with contextlib.aclosing(engine.run(specs)) as results:
            async for result in results:      # each episode as soon as it finishes
                ...

Generation happens on the event loop (policies are async and batch across sessions); env work
runs in the pool's threads or Ray actors.  Closing the stream (or the engine) cancels running
episodes: their policy calls are cancelled, their sessions ended and their envs closed.
Failures of one episode (a :class:`~envgym.policy.PolicyError`, an env that raises or hangs, a
malformed turn) end that episode with an ``error`` kind; the run goes on.  A prompt past the
model's window (:class:`~envgym.context.ContextWindowExceeded`) is not a failure: the episode is
truncated (``truncated_by="context_window"``, reward 0) and counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any, TypeVar

from envgym.context.window import ContextWindowExceeded
from envgym.core import Env, Observation
from envgym.policy import Policy, PolicyError, SamplingParams, Turn

from .envpool import EnvHandle, EnvPool, ThreadEnvPool
from .episode import EpisodeResult, EpisodeSpec, RolloutBudget
from .recorder import RecordBuilder, RecordError

T = TypeVar("T")


class _Failure(Exception):
    def __init__(self, kind: str, message: str, *, env_broken: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.env_broken = env_broken


async def _within(awaitable: Awaitable[T], deadline: float) -> T:
    # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that arrives as the awaited
    # call completes (gh-86296, fixed in 3.12), and a cancelled episode then went on to its next
    # turn; closing a stream hung behind it until the policy returned (seen as a rare hang of
    # the stream-cancelling test under load).
    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
        return await awaitable


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RolloutEngine:
    """Runs :class:`EpisodeSpec` s with ``policy`` in envs from ``envs``.

    Args:
        policy: any :class:`~envgym.policy.Policy` (the caller owns and closes it).
        envs: where envs come from; its size should be at least ``concurrency``.
        params: sampling parameters of every turn (``max_tokens`` is capped by the budget).
        budget: per-episode turns / sampled tokens / seconds.
        concurrency: episodes in flight at once.
    """

    def __init__(
        self,
        policy: Policy,
        envs: EnvPool[Any],  # any pool; its handles go back to it only
        *,
        params: SamplingParams | None = None,
        budget: RolloutBudget | None = None,
        concurrency: int = 8,
    ) -> None:
        if concurrency <= 0:
            raise ValueError(f"concurrency must be positive, not {concurrency}")
        self.policy = policy
        self.envs = envs
        self.params = params or SamplingParams()
        self.budget = budget or RolloutBudget()
        self.concurrency = concurrency
        self._workers: set[asyncio.Task[None]] = set()

    @classmethod
    def local(
        cls, policy: Policy, env_factory: Callable[[], Env], *, concurrency: int = 8, **kwargs: Any
    ) -> RolloutEngine:
        """An engine whose envs run in threads of this process (sandboxes are still separate)."""
        return cls(
            policy, ThreadEnvPool(env_factory, concurrency), concurrency=concurrency, **kwargs
        )

    async def __aenter__(self) -> RolloutEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel running episodes and close every env."""
        await self._cancel_workers(list(self._workers))
        await self.envs.aclose()

    async def run(self, specs: Iterable[EpisodeSpec]) -> AsyncGenerator[EpisodeResult, None]:
        """Yield each episode's result as soon as it finishes (completion order)."""
        queue: asyncio.Queue[EpisodeResult | BaseException | None] = asyncio.Queue()
        pending = iter(specs)
        active = self.concurrency

        async def worker() -> None:
            nonlocal active
            try:
                for spec in pending:
                    await queue.put(await self.episode(spec))
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - a bug in the engine reaches the caller
                await queue.put(exc)
            finally:
                active -= 1
                if active == 0:
                    queue.put_nowait(None)

        workers = [asyncio.create_task(worker()) for _ in range(self.concurrency)]
        self._workers.update(workers)
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            await self._cancel_workers(workers)

    async def _cancel_workers(self, workers: list[asyncio.Task[None]]) -> None:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._workers.difference_update(workers)

    async def episode(self, spec: EpisodeSpec) -> EpisodeResult:
        """Roll out one episode; never raises for policy or env failures (cancellation does)."""
        start = time.monotonic()
        deadline = start + self.budget.max_seconds
        try:
            handle: EnvHandle = await self.envs.acquire()
        except Exception as exc:  # noqa: BLE001 - e.g. a sandbox that failed to start
            run = _Run(spec)
            run.error, run.error_message = "env", f"could not open an env: {_describe(exc)}"
            return run.result(
                RecordBuilder(model=self.policy.name, policy_version=self.policy.version), [], 0.0
            )
        builder = RecordBuilder(model=self.policy.name, policy_version=self.policy.version)
        run = _Run(spec)
        healthy = False
        try:
            await self._play(handle, spec, deadline, builder, run)
            healthy = True
        except _Failure as failure:
            run.error, run.error_message = failure.kind, str(failure)
            healthy = not failure.env_broken
        finally:
            # Also on cancellation: the session's cache is freed and the env is closed or reused.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.policy.end_session(spec.session))
            messages = run.last_messages
            if healthy or run.error in ("policy", "record"):
                with contextlib.suppress(Exception):
                    messages = await handle.history()
            await asyncio.shield(
                self.envs.release(handle, healthy=healthy or run.error in ("policy", "record"))
            )
        return run.result(builder, messages, time.monotonic() - start)

    async def _play(
        self,
        handle: EnvHandle,
        spec: EpisodeSpec,
        deadline: float,
        builder: RecordBuilder,
        run: _Run,
    ) -> None:
        try:
            obs, info = await _within(
                handle.reset(seed=spec.seed, options={"task": spec.task_id}), deadline
            )
        except TimeoutError:
            raise _Failure(
                "env_timeout",
                "env.reset did not return before the episode deadline",
                env_broken=True,
            ) from None
        except Exception as exc:  # noqa: BLE001 - any env failure ends only this episode
            raise _Failure("env", f"env.reset: {_describe(exc)}", env_broken=True) from None
        run.observe(obs, info)
        budget = self.budget
        while True:
            if run.turns >= budget.max_turns:
                run.truncate("max_turns")
                return
            tokens_left = budget.max_tokens - run.sampled
            if tokens_left <= 0:
                run.truncate("max_tokens")
                return
            params = self._params(spec, tokens_left, run.turns)
            version = self.policy.version  # of the weights asked: a plain Turn does not say
            turn = await self._act(spec, obs, params, deadline)
            if isinstance(turn, str):  # the time or the model's window ran out
                run.truncate(turn)
                return
            try:
                builder.add(turn, params=params, policy_version=version)
            except RecordError as exc:
                raise _Failure("record", str(exc)) from None
            run.count(turn)
            action = turn.message if turn.message is not None else turn.text
            try:
                obs, reward, terminated, truncated, info = await _within(
                    handle.step(action), deadline
                )
            except TimeoutError:
                raise _Failure(
                    "env_timeout",
                    "env.step did not return before the episode deadline",
                    env_broken=True,
                ) from None
            except Exception as exc:  # noqa: BLE001
                raise _Failure("env", f"env.step: {_describe(exc)}", env_broken=True) from None
            run.observe(obs, info)
            if terminated or truncated:
                run.finish(reward, terminated, truncated, info)
                return

    def _params(self, spec: EpisodeSpec, tokens_left: int, turn: int) -> SamplingParams:
        params = replace(self.params, max_tokens=min(self.params.max_tokens, tokens_left))
        if spec.seed is not None:
            params = replace(params, seed=spec.turn_seed(turn))
        return params

    async def _act(
        self, spec: EpisodeSpec, obs: Observation, params: SamplingParams, deadline: float
    ) -> Turn | str:
        """The policy's turn, or why the episode is truncated instead."""
        try:
            result = await _within(
                self.policy.act(spec.session, obs["messages"], obs["tools"], params), deadline
            )
        except TimeoutError:
            return "max_seconds"  # the episode's time ran out while the policy was thinking
        except ContextWindowExceeded:
            return "context_window"  # an outcome (reward 0, counted), not a backend failure
        except PolicyError as exc:
            raise _Failure("policy", str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a backend bug ends only this episode
            raise _Failure("policy", f"the policy raised {_describe(exc)}") from None
        if not isinstance(result, Turn):
            raise _Failure("policy", f"the policy returned {type(result).__name__}, not a Turn")
        return result


class _Run:
    """The mutable tally of one episode while it runs."""

    def __init__(self, spec: EpisodeSpec) -> None:
        self.spec = spec
        self.turns = self.sampled = self.prompt_tokens = self.cached = 0
        self.reward = 0.0
        self.terminated = self.truncated = False
        self.truncated_by: str | None = None
        self.error: str | None = None
        self.error_message = ""
        self.info: dict[str, Any] = {}
        self.last_messages: list[dict[str, Any]] = []
        self.dropped: dict[tuple[Any, Any], dict[str, Any]] = {}

    def observe(self, obs: Observation, info: dict[str, Any]) -> None:
        self.last_messages = list(obs["messages"])
        self.info = info
        # Each render re-drops the same earlier reasoning: keep the first turn it happened at.
        for drop in info.get("context_dropped") or []:
            key = (drop.get("index"), drop.get("what"))
            self.dropped.setdefault(key, {**drop, "turn": self.turns})

    def count(self, turn: Turn) -> None:
        self.turns += 1
        self.sampled += len(turn.token_ids) or turn.usage.completion_tokens
        self.prompt_tokens += (
            len(turn.prompt_ids) if turn.prompt_ids is not None else turn.usage.prompt_tokens
        )
        self.cached += turn.usage.cached_prompt_tokens

    def truncate(self, reason: str) -> None:
        self.truncated, self.truncated_by = True, reason

    def finish(
        self, reward: float, terminated: bool, truncated: bool, info: dict[str, Any]
    ) -> None:
        self.reward, self.terminated, self.truncated = float(reward), terminated, truncated
        if truncated and not terminated:
            self.truncated_by = str(info.get("truncated_by") or "env")

    def result(
        self, builder: RecordBuilder, messages: list[dict[str, Any]], duration: float
    ) -> EpisodeResult:
        info = self.info
        components = {str(k): float(v) for k, v in (info.get("reward_components") or {}).items()}
        reward = self.reward if self.error is None else 0.0
        return EpisodeResult(
            task_id=self.spec.task_id,
            sample=self.spec.sample,
            reward=reward,
            reward_components=components,
            terminated=self.terminated,
            truncated=self.truncated,
            truncated_by=self.truncated_by,
            error=self.error,
            error_message=self.error_message,
            turns=self.turns,
            tool_calls=int(info.get("tool_calls", 0)),
            sampled_tokens=self.sampled,
            prompt_tokens=self.prompt_tokens,
            cached_prompt_tokens=self.cached,
            duration_s=duration,
            agent_errors={str(k): int(v) for k, v in (info.get("errors") or {}).items()},
            messages=messages,
            context_dropped=list(self.dropped.values()),
            context_compactions=list(info.get("context_compactions") or []),
            report=info.get("report"),
            record=builder.finish(reward, components),
        )
