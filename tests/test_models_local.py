"""Local engine mechanics on tiny random-weight models (a Llama and a Mixtral-style MoE) with
SmolLM2's real tokenizer and chat template: KV reuse, token-in/token-out, batching, log-probs,
MoE routes, prefix sharing, cancellation and errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

from envgym.context.window import ContextWindowExceeded
from envgym.embedded import load_tokenizer
from envgym.models.engine import Engine, _Row
from envgym.models.local import LocalPolicy
from envgym.policy import Policy, PolicyError, SamplingParams, Turn

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_note",
            "description": "Read a note.",
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string"}},
                "required": ["key"],
            },
        },
    }
]
START = [
    {"role": "system", "content": "You take notes."},
    {"role": "user", "content": "What does the note 'secret' say?"},
]
PARAMS = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=6, seed=3)


def _tiny(kind: str, sliding_window: int | None = None) -> Any:
    torch.manual_seed(0)
    common = dict(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    if kind == "moe":
        config = MixtralConfig(
            **common, num_local_experts=4, num_experts_per_tok=2, sliding_window=sliding_window
        )
        return MixtralForCausalLM(config).float()
    return LlamaForCausalLM(LlamaConfig(**common)).float()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer()


def _policy(
    tokenizer: Any, kind: str = "dense", sliding_window: int | None = None, **kwargs: Any
) -> LocalPolicy:
    return LocalPolicy(_tiny(kind, sliding_window), tokenizer, name=f"tiny-{kind}", **kwargs)


def _tool_reply(turn: Turn, i: int) -> list[dict[str, Any]]:
    call = {
        "id": f"c{i}",
        "type": "function",
        "function": {"name": "get_note", "arguments": '{"key": "secret"}'},
    }
    return [
        {"role": "assistant", "content": turn.text, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "name": "get_note", "content": f"tangerine {i}"},
    ]


def _rescore(model: Any, turns: list[Turn], temperature: float) -> list[float]:
    """One forward over the whole final sequence; the log-prob of every sampled token."""
    last = turns[-1]
    sequence = last.prompt_ids + last.token_ids
    with torch.inference_mode():
        logits = model(torch.tensor([sequence])).logits[0].float() / temperature
    logprobs = torch.log_softmax(logits, dim=-1)
    out = []
    for turn in turns:
        start = len(turn.prompt_ids)
        out += [float(logprobs[start + j - 1, t]) for j, t in enumerate(turn.token_ids)]
    return out


def test_satisfies_the_policy_protocol(tokenizer: Any) -> None:
    policy = _policy(tokenizer)
    try:
        assert isinstance(policy, Policy)
    finally:
        asyncio.run(policy.aclose())


def test_multi_turn_token_in_token_out_kv_reuse_and_rescoring(tokenizer: Any) -> None:
    async def run() -> tuple[list[Turn], LocalPolicy]:
        policy = _policy(tokenizer)
        messages = list(START)
        turns = []
        for i in range(3):
            turn = await policy.act("ep", messages, TOOLS, PARAMS)
            turns.append(turn)
            messages = messages + _tool_reply(turn, i)
        await policy.aclose()
        return turns, policy

    turns, policy = asyncio.run(run())
    first = turns[0]
    assert first.usage.cached_prompt_tokens == 0
    # The tools went into the system prompt in the Hermes format (SmolLM2 has no tool template).
    assert "<tools>" in tokenizer.decode(first.prompt_ids) and '"get_note"' in tokenizer.decode(
        first.prompt_ids
    )
    for before, after in zip(turns, turns[1:]):
        held = before.prompt_ids + before.token_ids
        assert after.prompt_ids[: len(held)] == held  # extends: never re-tokenized
        # everything but the last sampled token (never fed to the model) came from the cache
        assert after.usage.cached_prompt_tokens == len(held) - 1
        new_text = tokenizer.decode(after.prompt_ids[len(held) :])
        assert new_text.endswith(
            "<|im_start|>tool\ntangerine "
            + str(turns.index(before))
            + "<|im_end|>\n<|im_start|>assistant\n"
        )
    for turn in turns:
        assert len(turn.token_ids) == len(turn.logprobs) == len(turn.kept) > 0
        assert all(k is not None and t in k for t, k in zip(turn.token_ids, turn.kept))
        assert turn.routes is None
    # the full-vocabulary log-probs re-score (the sampled-distribution ones are renormalized
    # over the top-p set: tests/test_record_trainer.py)
    engine_lp = [x for t in turns for x in t.full_logprobs]  # type: ignore[attr-defined]
    assert _rescore(policy.model, turns, PARAMS.temperature) == pytest.approx(engine_lp, abs=1e-4)


def test_concurrent_sessions_are_batched_and_each_matches_a_rescore(tokenizer: Any) -> None:
    peak: list[int] = []
    original = Engine._forward

    def spy(self: Engine, stores: Any, ids: torch.Tensor, positions: torch.Tensor) -> Any:
        peak.append(ids.shape[0])
        return original(self, stores, ids, positions)

    async def run() -> tuple[list[list[Turn]], LocalPolicy]:
        policy = _policy(tokenizer, max_batch=8)

        async def episode(k: int) -> list[Turn]:
            messages = [START[0], {"role": "user", "content": f"Question number {k} " * (k + 1)}]
            turns = []
            for i in range(2):
                turn = await policy.act(
                    f"ep{k}", messages, TOOLS, SamplingParams(max_tokens=5, seed=k)
                )
                turns.append(turn)
                messages = messages + _tool_reply(turn, i)
            return turns

        results = await asyncio.gather(*(episode(k) for k in range(4)))
        await policy.aclose()
        return results, policy

    Engine._forward = spy  # type: ignore[method-assign]
    try:
        results, policy = asyncio.run(run())
    finally:
        Engine._forward = original  # type: ignore[method-assign]
    assert max(peak) >= 2  # decode steps ran several episodes in one forward
    for turns in results:
        engine_lp = [x for t in turns for x in t.logprobs]
        assert _rescore(policy.model, turns, 1.0) == pytest.approx(engine_lp, abs=1e-4)


@pytest.mark.parametrize("window", [None, 64])  # 64: a sliding window shorter than the prompt
def test_moe_routes_are_recorded_per_token_and_layer(tokenizer: Any, window: int | None) -> None:
    async def run() -> tuple[list[Turn], LocalPolicy]:
        policy = _policy(tokenizer, "moe", window)
        turn = await policy.act("m", START, TOOLS, PARAMS)
        turn2 = await policy.act("m", START + _tool_reply(turn, 0), TOOLS, PARAMS)
        await policy.aclose()
        return [turn, turn2], policy

    turns, policy = asyncio.run(run())
    last = turns[-1]
    sequence = last.prompt_ids + last.token_ids
    with torch.inference_mode():
        out = policy.model(torch.tensor([sequence]), output_router_logits=True)
    for turn in turns:
        assert turn.routes is not None and len(turn.routes) == len(turn.token_ids)
        start = len(turn.prompt_ids)
        for j, route in enumerate(turn.routes):
            assert len(route) == 2 and all(
                len(experts) == 2 for experts in route
            )  # 2 layers, top-2
            # the experts each layer chose at the position whose output sampled token j
            expected = [
                torch.topk(layer[start + j - 1], 2).indices.tolist() for layer in out.router_logits
            ]
            assert route == expected
    engine_lp = [x for t in turns for x in t.full_logprobs]  # type: ignore[attr-defined]
    assert _rescore(policy.model, turns, 1.0) == pytest.approx(engine_lp, abs=1e-4)


def test_context_change_starts_a_new_sequence_reusing_the_common_prefix(tokenizer: Any) -> None:
    async def run() -> list[Turn]:
        policy = _policy(tokenizer)
        first = await policy.act("s", START, TOOLS, PARAMS)
        # A context policy rewrote history (here: the user prompt changed) → not an extension.
        changed = [START[0], {"role": "user", "content": "Something else entirely."}] + _tool_reply(
            first, 0
        )
        second = await policy.act("s", changed, TOOLS, PARAMS)
        await policy.aclose()
        return [first, second]

    first, second = asyncio.run(run())
    held = first.prompt_ids + first.token_ids
    assert second.prompt_ids[: len(held)] != held
    common = next(i for i, (a, b) in enumerate(zip(held, second.prompt_ids)) if a != b)
    assert second.usage.cached_prompt_tokens == common > 100  # the system prompt + tools


def test_a_new_session_copies_a_shared_prefix_from_another(tokenizer: Any) -> None:
    async def run() -> tuple[Turn, Turn]:
        policy = _policy(tokenizer)
        a = await policy.act("a", START, TOOLS, PARAMS)
        b = await policy.act("b", START, TOOLS, PARAMS)
        await policy.aclose()
        return a, b

    a, b = asyncio.run(run())
    assert a.prompt_ids == b.prompt_ids
    assert b.usage.cached_prompt_tokens == len(b.prompt_ids) - 1


def test_eviction_frees_idle_caches_and_the_next_turn_still_extends(tokenizer: Any) -> None:
    async def run() -> tuple[list[Turn], dict[str, int]]:
        policy = _policy(tokenizer, max_kv_bytes=0)
        first = await policy.act("e", START, TOOLS, PARAMS)
        stats = await policy.stats()
        second = await policy.act("e", START + _tool_reply(first, 0), TOOLS, PARAMS)
        await policy.aclose()
        return [first, second], stats

    (first, second), stats = asyncio.run(run())
    assert stats["kv_bytes"] == 0 and stats["sessions"] == 1
    assert (
        second.prompt_ids[: len(first.prompt_ids) + len(first.token_ids)]
        == first.prompt_ids + first.token_ids
    )
    assert second.usage.cached_prompt_tokens == 0


def test_cancelled_turn_frees_the_row_and_the_session_goes_on(tokenizer: Any) -> None:
    async def run() -> tuple[Turn, dict[str, int]]:
        policy = _policy(tokenizer)
        task = asyncio.create_task(policy.act("c", START, TOOLS, SamplingParams(max_tokens=2000)))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        turn = await policy.act("c", START, TOOLS, PARAMS)
        stats = await policy.stats()
        await policy.end_session("c")
        after = await policy.stats()
        await policy.aclose()
        return turn, {**stats, "after": after["sessions"]}

    turn, stats = asyncio.run(run())
    assert turn.usage.cached_prompt_tokens == len(turn.prompt_ids) - 1  # the cancelled prefill kept
    assert stats["rows"] == 0 and stats["after"] == 0


def test_errors_are_policy_errors_with_clear_messages(tokenizer: Any) -> None:
    async def run() -> list[str]:
        policy = _policy(tokenizer)
        errors = []
        long = [{"role": "user", "content": "word " * 3000}]  # > 2048 positions
        for messages in (long, [{"content": "no role"}], []):
            with pytest.raises(PolicyError) as info:
                await policy.act("x", messages, [], PARAMS)
            # only the window is an episode outcome (counted in n); the others are failures
            assert isinstance(info.value, ContextWindowExceeded) == (messages is long)
            errors.append(str(info.value))
        slow = asyncio.create_task(policy.act("dup", START, TOOLS, SamplingParams(max_tokens=200)))
        await asyncio.sleep(0.3)
        with pytest.raises(PolicyError) as info:
            await policy.act("dup", START, TOOLS, PARAMS)
        errors.append(str(info.value))
        await slow
        await policy.aclose()
        with pytest.raises(PolicyError) as info:
            await policy.act("x", START, TOOLS, PARAMS)
        errors.append(str(info.value))
        return errors

    too_long, no_role, empty, busy, closed = asyncio.run(run())
    assert "context window is 2048" in too_long
    assert "'role'" in no_role
    assert "non-empty list" in empty
    assert "already has a turn in flight" in busy
    assert "closed" in closed


def test_stop_rule(tokenizer: Any) -> None:
    policy = _policy(tokenizer)
    engine = policy._engine
    try:

        def finish(text: str, max_tokens: int = 100, stop: tuple[str, ...] = ()) -> str | None:
            row = _Row.__new__(_Row)
            row.tokens = tokenizer.encode(text, add_special_tokens=False)
            row.prompt = [0]
            row.request = type(
                "R", (), {"params": SamplingParams(max_tokens=max_tokens, stop=stop)}
            )()
            return engine._finish_reason(row)

        assert (
            finish('<tool_call>\n{"name": "get_note", "arguments": {}}\n</tool_call>')
            == "tool_calls"
        )
        assert finish('<tool_call>\n{"name": "get_note"') is None
        assert finish("All done.<|im_end|>") == "stop"
        assert finish("one two three", max_tokens=3) == "length"
        assert finish("say STOP", stop=("STOP",)) == "stop"
    finally:
        asyncio.run(policy.aclose())


def test_a_model_the_ragged_cache_cannot_serve_is_refused(tokenizer: Any) -> None:
    model = _tiny("dense")

    def broken_forward(*args: Any, **kwargs: Any) -> Any:  # ignores the cache: a non-standard arch
        kwargs.pop("past_key_values", None)
        kwargs.pop("attention_mask", None)
        kwargs.pop("position_ids", None)
        return LlamaForCausalLM.forward(model, *args, **kwargs)

    model.forward = broken_forward  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="does not work with envgym's ragged KV cache"):
        LocalPolicy(model, tokenizer, name="broken")


def test_a_failing_forward_fails_its_turn_and_the_engine_goes_on(tokenizer: Any) -> None:
    original = Engine._forward_prefill
    calls = {"n": 0}

    def flaky(self: Engine, store: Any, ids: list[int]) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated kernel failure")
        return original(self, store, ids)

    async def run() -> Turn:
        policy = _policy(tokenizer)
        try:
            with pytest.raises(PolicyError, match="RuntimeError: simulated kernel failure"):
                await policy.act("f", START, TOOLS, PARAMS)
            return await policy.act("f", START, TOOLS, PARAMS)
        finally:
            await policy.aclose()

    Engine._forward_prefill = flaky  # type: ignore[method-assign]
    try:
        turn = asyncio.run(run())
    finally:
        Engine._forward_prefill = original  # type: ignore[method-assign]
    assert turn.token_ids and turn.usage.cached_prompt_tokens == 0
