"""The rollout engine on a real local Ray (``ray.init()``): env actors, policy replicas, failures."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envgym import registry
from envgym.bundle_env import BundleEnv
from envgym.rollout import (
    AgentPolicy,
    EpisodeResult,
    EpisodeSpec,
    RolloutBudget,
    RolloutEngine,
    specs_for,
)

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]
TASKS = ("trip-001-d1", "hangzhou-3day")


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    import ray

    # Test doubles live in tests/, which Ray's workers cannot import: ship them by value.
    import test_rollout_doubles

    from envgym.rollout.ray_engine import ensure_ray

    ray.cloudpickle.register_pickle_by_value(test_rollout_doubles)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ensure_ray(None, num_cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def bundle_dir() -> Path:
    return registry.resolve_bundle("trip-planning-v0")


class BrokenEnv(BundleEnv):
    def step(self, action: Any) -> Any:
        if self.task is not None and self.task.id == "hangzhou-3day":
            raise RuntimeError("sandbox vanished")
        return super().step(action)


def run(engine: RolloutEngine, specs: list[EpisodeSpec]) -> list[EpisodeResult]:
    async def main() -> list[EpisodeResult]:
        async with engine, contextlib.aclosing(engine.run(specs)) as stream:
            results = [r async for r in stream]
        assert engine.envs.open_envs == 0  # type: ignore[attr-defined]
        return results

    return asyncio.run(main())


def test_env_actors_run_episodes(ray_local: Any, bundle_dir: Path) -> None:
    from test_rollout_doubles import ScriptedPolicy

    from envgym.rollout.ray_engine import ray_engine

    gold = AgentPolicy.gold(bundle_dir)
    try:
        results = run(
            ray_engine(gold, functools.partial(BundleEnv, bundle_dir), concurrency=2),
            specs_for(TASKS, 2),
        )
    finally:
        asyncio.run(gold.aclose())
    assert sorted((r.task_id, r.sample) for r in results) == sorted(
        (t, s) for t in TASKS for s in range(2)
    )
    assert all(r.passed and r.messages[0]["role"] == "system" for r in results)

    # Per-token records and budgets are the engine's, wherever the envs run.
    policy = ScriptedPolicy(lambda task, sample: [("get_all_cities", {})] * 10)
    [r] = run(
        ray_engine(
            policy,
            functools.partial(BundleEnv, bundle_dir),
            concurrency=1,
            budget=RolloutBudget(max_turns=3),
        ),
        [EpisodeSpec("trip-001-d1")],
    )
    assert (r.truncated_by, r.turns, len(r.record.segments), r.record.sampled_tokens) == (
        "max_turns",
        3,
        1,
        12,
    )


def test_a_failing_env_actor_is_replaced(ray_local: Any, bundle_dir: Path) -> None:
    from envgym.rollout.ray_engine import ray_engine

    gold = AgentPolicy.gold(bundle_dir)
    try:
        engine = ray_engine(gold, functools.partial(BrokenEnv, bundle_dir), concurrency=1)
        results = {r.task_id: r for r in run(engine, specs_for(TASKS, 1))}
    finally:
        asyncio.run(gold.aclose())
    assert (
        results["hangzhou-3day"].error == "env"
        and "sandbox vanished" in results["hangzhou-3day"].error_message
    )
    assert results["trip-001-d1"].passed


def test_policy_replicas_in_actors(ray_local: Any, bundle_dir: Path) -> None:
    from test_rollout_doubles import ScriptedPolicy

    from envgym.rollout.ray_engine import RayPolicy

    script = [("get_all_cities", {})] * 3
    factory = functools.partial(
        ScriptedPolicy,
        lambda task, sample: script,
        fail=lambda s, t: "policy" if s == "hangzhou-3day#1" and t == 1 else None,
    )
    policy = RayPolicy(factory, replicas=2)
    assert (policy.name, policy.version) == ("scripted-double", 3)
    try:
        engine = RolloutEngine.local(
            policy,
            functools.partial(BundleEnv, bundle_dir),
            concurrency=4,
            budget=RolloutBudget(max_turns=3),
        )
        results = {(r.task_id, r.sample): r for r in run(engine, specs_for(TASKS, 2))}
    finally:
        asyncio.run(policy.aclose())
    bad = results.pop(("hangzhou-3day", 1))
    assert bad.error == "policy" and "HTTP 500" in bad.error_message
    # Each session stayed on one replica: its prompts kept extending, so one segment each.
    assert all(
        r.error is None and r.turns == 3 and len(r.record.segments) == 1 for r in results.values()
    )
