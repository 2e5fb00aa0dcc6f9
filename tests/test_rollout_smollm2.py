"""The rollout engine and the evaluation with the real embedded model (SmolLM2-135M, local torch engine)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envgym import registry
from envgym.bundle_env import BundleEnv
from envgym.evaluate import EvalConfig, evaluate, model_ref
from envgym.policy import SamplingParams
from envgym.rollout import EpisodeResult, RolloutBudget, RolloutEngine, specs_for
from envgym.store import Store

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def smollm2() -> Iterator[Any]:
    from envgym.models.local import LocalPolicy

    policy = LocalPolicy.from_pretrained("smollm2")
    yield policy
    asyncio.run(policy.aclose())


def test_engine_records_the_models_tokens(smollm2: Any) -> None:
    bundle = registry.resolve_bundle("trip-planning-v0")

    async def main() -> list[EpisodeResult]:
        engine = RolloutEngine.local(
            smollm2,
            functools.partial(BundleEnv, bundle),
            concurrency=4,
            params=SamplingParams(temperature=0.8, max_tokens=24),
            budget=RolloutBudget(max_turns=3),
        )
        async with (
            engine,
            contextlib.aclosing(
                engine.run(specs_for(["trip-001-d1", "hangzhou-3day"], 2, seed=1))
            ) as stream,
        ):
            return [r async for r in stream]

    results = asyncio.run(main())
    assert len(results) == 4
    for r in results:
        assert r.error is None, r.error_message
        assert 1 <= r.turns <= 3 and r.sampled_tokens <= 3 * 24
        rec = r.record
        assert rec.model == smollm2.name and rec.policy_version == smollm2.version
        assert rec.sampled_tokens == r.sampled_tokens
        assert sum(len(s.turns) for s in rec.segments) == r.turns
        for seg in rec.segments:
            seg.check()
            sampled = [lp for lp, m in zip(seg.logprobs, seg.loss_mask) if m]
            assert all(lp <= 0.0 for lp in sampled) and any(lp < 0.0 for lp in sampled)
        assert r.messages[2]["role"] == "assistant"


def test_eval_with_the_embedded_model_resumes(smollm2: Any, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    config = EvalConfig(
        k=2,
        limit=1,
        concurrency=2,
        params=SamplingParams(max_tokens=24),
        budget=RolloutBudget(max_turns=2),
    )
    first = evaluate("trip-planning-v0", model_ref("smollm2"), config, store=store, policy=smollm2)
    assert first.ran == 2 and first.summary.episodes == 2 and first.summary.errored == 0
    assert 0.0 <= first.summary.pass_at_k[2].value <= 1.0
    # The rerun needs no model at all: nothing is left to run.
    again = evaluate("trip-planning-v0", model_ref("smollm2"), config, store=store)
    assert again.ran == 0 and again.episodes == first.episodes
