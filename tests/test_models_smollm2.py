"""The real embedded SmolLM2 through the local engine, in a real multi-turn env episode:
token-in/token-out records that re-score to the engine's log-probs (fp32) within 1e-4."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from bundle_factory import make_notes_bundle

from envgym.bundle_env import BundleEnv
from envgym.models.kept import decode_kept
from envgym.models.local import LocalPolicy
from envgym.policy import SamplingParams, Turn
from envgym.record import EpisodeRecord
from envgym.rollout import RecordBuilder

PARAMS = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=40, seed=11)


@pytest.fixture(scope="module")
def policy() -> Any:
    policy = LocalPolicy.from_pretrained("smollm2")
    yield policy
    asyncio.run(policy.aclose())


def _episode(policy: LocalPolicy, bundle: Path, turns: int) -> list[Turn]:
    env = BundleEnv(bundle, sandbox="inprocess", max_turns=turns)

    async def run() -> list[Turn]:
        obs, _ = env.reset(options={"task": 0})
        out = []
        while True:
            turn = await policy.act("notes-episode", obs["messages"], obs["tools"], PARAMS)
            out.append(turn)
            obs, _, terminated, truncated, _ = env.step(turn.text)
            if terminated or truncated:
                await policy.end_session("notes-episode")
                return out

    try:
        return asyncio.run(run())
    finally:
        env.close()


def _record(turns: list[Turn]) -> EpisodeRecord:
    """Segments as the rollout engine builds them: a new one whenever a prompt stops extending."""
    builder = RecordBuilder(model="local:smollm2", policy_version=0)
    for turn in turns:
        builder.add(turn)
    return builder.finish(0.0, {})


def test_recorded_episode_rescores_to_the_engine_logprobs(
    policy: LocalPolicy, tmp_path: Path
) -> None:
    turns = _episode(policy, make_notes_bundle(tmp_path / "notes"), turns=4)
    assert len(turns) >= 2
    record = EpisodeRecord.from_dict(_record(turns).to_dict())  # through its serialized form
    assert len(record.segments) == 1  # every prompt extended the last: one training sequence
    seg = record.segments[0]
    seg.check()
    assert record.sampled_tokens == sum(len(t.token_ids) for t in turns)
    assert [seg.token_ids[a:b] for a, b in seg.turns] == [t.token_ids for t in turns]

    with torch.inference_mode():
        logits = policy.model(torch.tensor([seg.token_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits / PARAMS.temperature, dim=-1)
    sampled = [i for i, m in enumerate(seg.loss_mask) if m]
    rescored = [float(logprobs[i - 1, seg.token_ids[i]]) for i in sampled]
    engine = [seg.full_logprobs[i] for i in sampled]
    assert max(abs(a - b) for a, b in zip(rescored, engine)) < 1e-4
    # the kept sets are top-p truncations containing the sampled token, and the sampled-
    # distribution log-prob is the full one renormalized over them
    for i in sampled:
        kept = decode_kept(seg.kept[i])
        assert isinstance(kept, list) and seg.token_ids[i] in kept
        mass = float(torch.logsumexp(logprobs[i - 1, kept], dim=0))
        assert abs(seg.sampled_logprobs[i] - (rescored[sampled.index(i)] - mass)) < 1e-4
    # later turns prefilled only what was new
    assert all(t.usage.cached_prompt_tokens > 0 for t in turns[1:])


def test_text_is_the_decoded_sample_and_thinking_opens_the_turn(policy: LocalPolicy) -> None:
    thinking = LocalPolicy(policy.model, policy.tokenizer, name="think", thinking=True)
    messages = [{"role": "user", "content": "What is 2 + 2?"}]

    async def run() -> tuple[Turn, Turn]:
        plain = await policy.act("plain", messages, [], PARAMS)
        thought = await thinking.act("thought", messages, [], PARAMS)
        await thinking.aclose()
        return plain, thought

    plain, thought = asyncio.run(run())
    ids = plain.token_ids[:-1] if plain.finish_reason == "stop" else plain.token_ids
    assert plain.text == policy.tokenizer.decode(ids)
    assert policy.tokenizer.decode(thought.prompt_ids).endswith("<|im_start|>assistant\n<think>\n")
    assert thought.text.startswith("<think>\n")
