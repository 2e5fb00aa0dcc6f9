"""Rollouts: N tasks × G samples through a :class:`~envgym.policy.Policy`, streamed.

* :class:`RolloutEngine` (engine.py): async, bounded concurrency, per-episode budgets,
  cancellation; env work in threads (:class:`ThreadEnvPool`) or Ray actors (ray_engine.py).
* :class:`EpisodeSpec` / :class:`RolloutBudget` / :class:`EpisodeResult` (episode.py).
* :class:`RecordBuilder` (recorder.py): the per-token record from the policy's turns.
* :class:`AgentPolicy` (agent_policy.py): the scripted and random agents as policies.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from envgym.core import Env
from envgym.policy import Policy, SamplingParams

from .agent_policy import AgentPolicy
from .engine import RolloutEngine
from .envpool import EnvHandle, EnvPool, ThreadEnvPool
from .episode import ERROR_KINDS, Budget, EpisodeResult, EpisodeSpec, RolloutBudget, parse_session
from .recorder import RecordBuilder, RecordError


def specs_for(task_ids: Iterable[str], samples: int, *, seed: int | None = 0) -> list[EpisodeSpec]:
    """``samples`` episodes of every task, task-major (G samples of a task are adjacent)."""
    return [EpisodeSpec(task_id=t, sample=s, seed=seed) for t in task_ids for s in range(samples)]


def rollout(
    policy: Policy,
    env_factory: Callable[[], Env],
    specs: Iterable[EpisodeSpec],
    *,
    concurrency: int = 8,
    params: SamplingParams | None = None,
    budget: RolloutBudget | None = None,
) -> list[EpisodeResult]:
    """Synchronous convenience: run every spec, return results in completion order."""

    async def main() -> list[EpisodeResult]:
        async with RolloutEngine.local(
            policy, env_factory, concurrency=concurrency, params=params, budget=budget
        ) as engine:
            async with contextlib.aclosing(engine.run(specs)) as stream:
                return [r async for r in stream]

    return asyncio.run(main())


__all__ = [
    "ERROR_KINDS",
    "AgentPolicy",
    "Budget",
    "RolloutBudget",
    "EnvHandle",
    "EnvPool",
    "EpisodeResult",
    "EpisodeSpec",
    "RecordBuilder",
    "RecordError",
    "RolloutEngine",
    "ThreadEnvPool",
    "parse_session",
    "rollout",
    "specs_for",
]
