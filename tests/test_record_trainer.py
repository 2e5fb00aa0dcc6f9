"""The per-token record the trainer reads (record version 2).

Compact kept sets round-trip exactly; "unknown" stays distinct from "not truncated"; the
sampled-distribution log-prob is the full one renormalized over the kept set; MoE routes cover
every position the forward passes saw (tiny random Mixtral on the local engine); per-turn
sampling parameters, policy version and finish reason; version-1 records convert; a cancelled
turn's session is really gone after ``end_session``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

from envgym.embedded import load_tokenizer
from envgym.models.kept import (
    UNKNOWN,
    KeptSets,
    decode_kept,
    encode_kept,
    kept_array,
    kept_tensors,
)
from envgym.models.local import LocalPolicy
from envgym.models.sampler import sample
from envgym.models.turn import SAMPLED, SAMPLED_AND_FULL, RecordedTurn
from envgym.policy import PolicyError, SamplingParams, Turn
from envgym.record import RECORD_VERSION, EpisodeRecord, Segment, TurnInfo
from envgym.rollout import RecordBuilder, RecordError

START = [
    {"role": "system", "content": "You take notes."},
    {"role": "user", "content": "What does the note 'secret' say?"},
]
PARAMS = SamplingParams(temperature=0.8, top_p=0.9, top_k=40, max_tokens=5, seed=3)


# -- compact kept sets -----------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.sets(st.integers(0, 49151), min_size=1, max_size=300),  # sparse, a real vocabulary
        st.sets(st.integers(0, 600), min_size=300, max_size=601),  # dense: complement coding
        st.sets(st.integers(0, 2**35 - 1), min_size=1, max_size=20),  # multi-byte varints
    )
)
def test_kept_codes_round_trip_exactly(ids: set[int]) -> None:
    code = encode_kept(sorted(ids, reverse=True))  # any order in, ascending out
    assert isinstance(code, str) and code != UNKNOWN and len(code) % 4 == 0
    assert decode_kept(code) == sorted(ids)
    assert json.loads(json.dumps(code)) == code


def test_kept_codes_are_compact_for_large_sets() -> None:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randperm(49152, generator=generator)[:2000]
    code = encode_kept(ids)
    as_json = len(json.dumps(sorted(ids.tolist())))
    assert decode_kept(code) == sorted(ids.tolist())
    assert len(code) * 4 < as_json  # > 4x smaller than the version-1 JSON list
    full = encode_kept(range(49152))  # the whole range: the complement is empty
    assert len(full) < 12 and len(decode_kept(full)) == 49152  # type: ignore[arg-type]


def test_kept_tensors_pad_with_minus_one_and_mark_rows() -> None:
    entries = [None, encode_kept([9, 3]), encode_kept([4]), UNKNOWN]
    with pytest.raises(ValueError, match="row 3: the kept set is unknown"):
        kept_tensors(entries)
    kept_ids, kept_rows = kept_tensors(entries, unknown="full")
    assert kept_ids.dtype == torch.int64 and kept_rows.dtype == torch.bool
    assert kept_ids.tolist() == [[-1, -1], [3, 9], [4, -1], [-1, -1]]
    assert kept_rows.tolist() == [False, True, True, False]
    ids, rows = kept_tensors([None, None])
    assert ids.shape == (2, 1) and not rows.any()


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        ([], ValueError, "cannot be empty"),
        ([3, -1], ValueError, "must be in"),
        ([0.5, 1.5], TypeError, "must be integers"),
    ],
)
def test_bad_kept_sets_are_refused(ids: list[Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        encode_kept(ids)


@pytest.mark.parametrize("code", ["!!!!", "BA==", "AoA="])  # not base64, bad flags, cut varint
def test_corrupted_codes_are_named(code: str) -> None:
    with pytest.raises(ValueError, match="kept-set code .* is corrupted"):
        kept_array(code)


# -- the sampled distribution's log-prob -------------------------------------------------------


def test_sampled_logprob_is_the_full_one_renormalized_over_the_kept_set() -> None:
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    params = SamplingParams(temperature=0.8, top_k=3, top_p=0.8)
    # By hand: scaled = [2.5, 1.25, 0, -1.25]; top-3 keeps {0, 1, 2}; renormalized over them
    # p = [.7308, .2094, .0598]: the mass before rank 1 is .7308 < .8 (kept), before rank 2
    # it is .9402 (dropped) → kept {0, 1}.
    scaled = [2.5, 1.25, 0.0, -1.25]
    total = math.log(sum(math.exp(v) for v in scaled))
    kept_mass = math.log(math.exp(2.5) + math.exp(1.25))
    generator = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(40):
        drawn = sample(logits, params, generator)
        seen.add(drawn.token)
        assert drawn.kept is not None and sorted(drawn.kept.tolist()) == [0, 1]
        assert drawn.full_logprob == pytest.approx(scaled[drawn.token] - total, abs=1e-6)
        assert drawn.logprob == pytest.approx(scaled[drawn.token] - kept_mass, abs=1e-6)
    assert seen == {0, 1}


# -- tiny models on the local engine -----------------------------------------------------------


def _tiny_mixtral() -> Any:
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=49152,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=2048,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    return MixtralForCausalLM(config).float()


def _tiny_llama() -> Any:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).float()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer()


def _reply(turn: Turn, i: int) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": turn.text},
        {"role": "user", "content": f"Go on ({i})."},
    ]


def _episode(policy: LocalPolicy, session: str, turns: int) -> list[Turn]:
    async def run() -> list[Turn]:
        messages, out = list(START), []
        for i in range(turns):
            turn = await policy.act(session, messages, [], PARAMS)
            out.append(turn)
            messages = messages + _reply(turn, i)
            policy.version += 1  # a weight update between turns: per-turn versions differ
        return out

    return asyncio.run(run())


def test_moe_routes_cover_every_position_and_logprobs_match_a_full_forward(
    tokenizer: Any,
) -> None:
    policy = LocalPolicy(_tiny_mixtral(), tokenizer, name="tiny-moe", version=5)
    try:
        turns = _episode(policy, "m", 3)
        # a second session with the same prompt copies the first one's prefix (and its routes)
        other = asyncio.run(policy.act("n", START, [], PARAMS))
    finally:
        asyncio.run(policy.aclose())
    assert all(isinstance(t, RecordedTurn) for t in turns)
    builder = RecordBuilder(model=policy.name, policy_version=5)
    for turn in turns:
        builder.add(turn)
    record = EpisodeRecord.from_dict(json.loads(json.dumps(builder.finish(1.0, {}).to_dict())))
    [seg] = record.segments
    seg.check()
    assert [t.policy_version for t in seg.turn_info] == [5, 6, 7]
    assert {(t.temperature, t.top_p, t.top_k) for t in seg.turn_info} == {(0.8, 0.9, 40)}
    assert [t.finish_reason for t in seg.turn_info] == [t.finish_reason for t in turns]
    assert {t.logprob_kind for t in seg.turn_info} == {SAMPLED_AND_FULL}

    with torch.inference_mode():
        out = policy.model(torch.tensor([seg.token_ids]), output_router_logits=True)
    expected = torch.stack(
        [torch.topk(torch.softmax(r.float(), -1), 2, dim=-1).indices for r in out.router_logits],
        dim=1,
    )  # [T, L, k]
    routes = seg.routes_tensor()
    assert routes.shape == (len(seg.token_ids), 2, 2)
    # every position the engine fed — prompt, user turns and sampled tokens — is routed...
    assert torch.equal(routes[:-1], expected[:-1])
    # ...except the last sampled token, which no forward ever saw
    assert routes[-1].tolist() == [[-1, -1], [-1, -1]]
    assert isinstance(other, RecordedTurn) and other.usage.cached_prompt_tokens > 0
    p = len(other.prompt_ids or [])
    assert other.prompt_ids == seg.token_ids[:p]
    copied = other.position_routes
    assert copied is not None and torch.equal(copied[:p].long(), expected[:p])

    logprobs = torch.log_softmax(out.logits[0].float() / PARAMS.temperature, dim=-1)
    for i in (i for i, m in enumerate(seg.loss_mask) if m):
        full = float(logprobs[i - 1, seg.token_ids[i]])
        assert seg.full_logprobs[i] == pytest.approx(full, abs=1e-4)
        kept = decode_kept(seg.kept[i])
        assert isinstance(kept, list) and seg.token_ids[i] in kept and len(kept) <= 40
        mass = float(torch.logsumexp(logprobs[i - 1, kept], dim=0))
        assert seg.sampled_logprobs[i] == pytest.approx(full - mass, abs=1e-4)
    kept_ids, kept_rows = seg.kept_tensors()
    assert kept_rows.tolist() == [bool(m) for m in seg.loss_mask]


def test_dense_model_records_no_routes_and_a_length_finish(tokenizer: Any) -> None:
    policy = LocalPolicy(_tiny_llama(), tokenizer, name="tiny")
    try:
        turn = asyncio.run(policy.act("d", START, [], SamplingParams(max_tokens=3, seed=1)))
    finally:
        asyncio.run(policy.aclose())
    assert isinstance(turn, RecordedTurn) and turn.position_routes is None
    builder = RecordBuilder(model="tiny", policy_version=0)
    builder.add(turn)
    [seg] = builder.record.segments
    assert seg.routes is None and seg.turn_info[0].finish_reason == turn.finish_reason
    if turn.finish_reason == "length":  # (unless the random model sampled its end token)
        assert len(turn.token_ids) == 3
    sampled = [i for i, m in enumerate(seg.loss_mask) if m]
    # top_p = 1, top_k = 0: nothing truncated, both kinds agree
    assert [seg.kept[i] for i in sampled] == [None] * len(sampled)
    assert [seg.sampled_logprobs[i] for i in sampled] == [seg.full_logprobs[i] for i in sampled]


# -- unknown versus not truncated; the vLLM backend ------------------------------------------


def test_unknown_kept_sets_stay_distinct_from_not_truncated_through_storage() -> None:
    builder = RecordBuilder(model="m", policy_version=1)
    builder.add(Turn(text="", prompt_ids=[1], token_ids=[5, 6], logprobs=[-0.5, -1.0]))
    builder.add(
        Turn(text="", prompt_ids=[1, 5, 6, 9], token_ids=[7], logprobs=[-0.25], kept=[None]),
        params=SamplingParams(temperature=0.7, top_p=1.0),
        policy_version=4,
    )
    record = builder.finish(0.0, {})
    back = EpisodeRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    [seg] = back.segments
    assert back == record and back.version == RECORD_VERSION
    assert seg.kept == [None, UNKNOWN, UNKNOWN, None, None]
    assert seg.turn_info == [
        TurnInfo(finish_reason="stop"),  # a plain Turn: parameters and version unknown
        TurnInfo(0.7, 1.0, 0, 4, "stop", SAMPLED),
    ]
    assert math.isnan(seg.full_logprobs[1]) and seg.sampled_logprobs[1] == -0.5
    assert json.dumps(record.to_dict()).count("NaN") == 0  # unknown is JSON null


def test_vllm_turns_say_sampled_logprobs_and_unknown_kept_sets(tokenizer: Any) -> None:
    from envgym.models.vllm_policy import VLLMPolicy

    policy = VLLMPolicy("http://127.0.0.1:9/v1", "m", tokenizer=tokenizer, version=3)
    reply = {
        "choices": [
            {
                "text": "x",
                "token_ids": [5, 6],
                "logprobs": {
                    "token_logprobs": [-0.5, -0.25],
                    # token 5: its kept set {5, 7} shown whole (a -inf follows); token 6: the
                    # top list is all finite, so its kept set may be larger: unknown
                    "top_logprobs": [
                        {
                            "token_id:5": -0.5,
                            "token_id:7": math.log(1 - math.exp(-0.5)),
                            "token_id:1": -9999.0,
                        },
                        {"token_id:6": -0.25, "token_id:2": -2.0},
                    ],
                },
                "finish_reason": "stop",
                "stop_reason": "</tool_call>",
            }
        ],
        "usage": {"prompt_tokens_details": {"cached_tokens": 0}},
    }

    async def post_json(path: str, body: dict[str, Any], check: Any) -> Any:
        return check(reply)

    policy.client.post_json = post_json  # type: ignore[method-assign]

    async def run() -> Turn:
        try:
            return await policy.act("s", START, [], PARAMS)
        finally:
            await policy.aclose()

    turn = asyncio.run(run())
    assert isinstance(turn, RecordedTurn)
    assert (turn.logprob_kind, turn.full_logprobs) == (SAMPLED, None)
    assert list(turn.kept or []) == [[5, 7], UNKNOWN]
    assert (turn.params, turn.policy_version, turn.finish_reason) == (PARAMS, 3, "tool_calls")
    builder = RecordBuilder(model="vllm", policy_version=3)
    builder.add(turn)
    [seg] = builder.record.segments
    n = len(turn.prompt_ids or [])
    assert seg.kept[n:] == [encode_kept([5, 7]), UNKNOWN] and seg.sampled_logprobs[n:] == [
        -0.5,
        -0.25,
    ]
    assert seg.turn_info == [TurnInfo(0.8, 0.9, 40, 3, "tool_calls", SAMPLED)]


def test_untruncated_vllm_turns_are_recorded_as_not_truncated(tokenizer: Any) -> None:
    """top-p 1 and no top-k: the request pins top_k/min_p off, so the whole vocabulary was
    sampled and the record says "not truncated" (the trainer's exact keep sampling mask)."""
    from envgym.models.vllm_policy import VLLMPolicy
    from envgym.models.vllm_server import VLLMServer

    assert "--generation-config" in VLLMServer(model="m").command()
    policy = VLLMPolicy("http://127.0.0.1:9/v1", "m", tokenizer=tokenizer)
    bodies: list[dict[str, Any]] = []

    async def post_json(path: str, body: dict[str, Any], check: Any) -> Any:
        bodies.append(body)
        reply = {
            "token_ids": [5, 2],
            "logprobs": {
                "token_logprobs": [-0.5, -0.25],
                "top_logprobs": [{"token_id:5": -0.5}, {"token_id:2": -0.25}],  # all finite
            },
            "finish_reason": "stop",
        }
        return check({"choices": [reply]})

    policy.client.post_json = post_json  # type: ignore[method-assign]
    full = SamplingParams(temperature=0.8, top_p=1.0, top_k=0, max_tokens=5)

    async def run() -> list[Turn]:
        try:
            return [await policy.act("s", START, [], p) for p in (full, PARAMS)]
        finally:
            await policy.aclose()

    untruncated, truncated = asyncio.run(run())
    assert (bodies[0]["top_k"], bodies[0]["min_p"], bodies[0]["top_p"]) == (0, 0.0, 1.0)
    assert (bodies[1]["top_k"], bodies[1]["top_p"]) == (40, 0.9)
    assert isinstance(untruncated, RecordedTurn) and list(untruncated.kept or ()) == [None, None]
    # truncated, and the top log-probs show no masked token: the kept sets are unknown
    assert isinstance(truncated, RecordedTurn) and list(truncated.kept or ()) == [UNKNOWN] * 2
    builder = RecordBuilder(model="vllm", policy_version=0)
    builder.add(untruncated)
    [seg] = builder.record.segments
    assert seg.kept[len(untruncated.prompt_ids or []) :] == [None, None]


def _npy_b64(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def test_vllm_routed_experts_become_routes_for_every_position(tokenizer: Any) -> None:
    from envgym.models.http_client import BadReply
    from envgym.models.vllm_policy import VLLMPolicy

    policy = VLLMPolicy("http://127.0.0.1:9/v1", "m", tokenizer=tokenizer)
    replies: list[dict[str, Any]] = []

    async def post_json(path: str, body: dict[str, Any], check: Any) -> Any:
        n = len(body["prompt"]) + 2 - 1  # every position but the last sampled token
        routes = replies.pop(0)["routes"](n)
        return check(
            {
                "choices": [
                    {
                        "token_ids": [5, 2],
                        "logprobs": {
                            "token_logprobs": [-0.5, -0.25],
                            # token 5: its kept set {5, 7} shown whole (a -inf follows); token 6: the
                            # top list is all finite, so its kept set may be larger: unknown
                            "top_logprobs": [
                                {
                                    "token_id:5": -0.5,
                                    "token_id:7": math.log(1 - math.exp(-0.5)),
                                    "token_id:1": -9999.0,
                                },
                                {"token_id:6": -0.25, "token_id:2": -2.0},
                            ],
                        },
                        "finish_reason": "stop",
                        "routed_experts": routes,
                    }
                ]
            }
        )

    policy.client.post_json = post_json  # type: ignore[method-assign]
    replies.append(
        {"routes": lambda n: _npy_b64((np.arange(n * 4) % 8).reshape(n, 2, 2).astype(np.uint8))}
    )
    replies.append({"routes": lambda n: _npy_b64(np.zeros((n - 1, 2, 2), np.uint8))})

    async def run() -> Turn:
        try:
            turn = await policy.act("s", START, [], PARAMS)
            with pytest.raises(BadReply, match="routed_experts have shape"):
                await policy.act("t", START, [], PARAMS)
            return turn
        finally:
            await policy.aclose()

    turn = asyncio.run(run())
    builder = RecordBuilder(model="vllm", policy_version=0)
    builder.add(turn)
    [seg] = builder.record.segments
    n = len(seg.token_ids) - 1
    routes = seg.routes_tensor()
    assert routes[:-1].flatten().tolist() == [i % 8 for i in range(n * 4)]
    assert routes[-1].tolist() == [[-1, -1], [-1, -1]]


# -- version 1 records, bad records -----------------------------------------------------------


def test_version_1_records_convert_without_guessing() -> None:
    old = {
        "segments": [
            {
                "token_ids": [1, 2, 5, 6],
                "loss_mask": [0, 0, 1, 1],
                "logprobs": [0.0, 0.0, -0.5, -0.75],
                "kept": [None, None, [5, 8], None],
                "routes": [[], [], [[0, 1]], [[2, 3]]],
                "turns": [[2, 4]],
            }
        ],
        "policy_version": 2,
        "model": "m",
    }
    record = EpisodeRecord.from_dict(old)
    [seg] = record.segments
    nan = math.nan
    assert seg == Segment(
        token_ids=[1, 2, 5, 6],
        loss_mask=[0, 0, 1, 1],
        sampled_logprobs=[0.0, 0.0, nan, -0.75],  # v1 local + kept list: that was the full kind
        full_logprobs=[0.0, 0.0, -0.5, nan],
        kept=[None, None, encode_kept([5, 8]), UNKNOWN],  # v1 None: could have been vLLM
        routes=[[], [[0, 1]], [[2, 3]], []],  # moved to the producing positions
        turns=[(2, 4)],
        turn_info=[TurnInfo(logprob_kind="full")],
    )
    assert record.version == RECORD_VERSION and record.to_dict()["version"] == 2


def test_unknown_versions_and_corrupted_records_are_named() -> None:
    with pytest.raises(ValueError, match="record version 3 is not supported"):
        EpisodeRecord.from_dict({"version": 3, "segments": []})
    bad = Segment()
    bad.add_context([1, 2])
    bad.add_sampled([3], [-1.0], kept=[[3]])
    data = bad.to_dict()
    data["kept"] = data["kept"][:2]
    with pytest.raises(ValueError, match="segment arrays have lengths"):
        EpisodeRecord.from_dict({"version": 2, "segments": [data]})
    with pytest.raises(ValueError, match="1 sampled ids but 2 log-probs"):
        Segment().add_sampled([1], [-1.0, -2.0])
    with pytest.raises(ValueError, match="1 sampled ids but 2 kept sets"):
        Segment().add_sampled([1], [-1.0], kept=[None, None])
    with pytest.raises(ValueError, match="kept-set code 'maybe' is corrupted"):
        Segment().add_sampled([1], [-1.0], kept=["maybe"])
    with pytest.raises(ValueError, match="logprob_kind must be one of"):
        TurnInfo(logprob_kind="raw")
    with pytest.raises(ValueError, match="unknown must be"):
        kept_tensors([None], unknown="guess")  # type: ignore[arg-type]
    turn = RecordedTurn(
        text="", prompt_ids=[1, 2], token_ids=[3], logprobs=[-1.0],
        position_routes=torch.zeros(5, 1, 2, dtype=torch.int16),
    )  # fmt: skip
    with pytest.raises(RecordError, match="routes for 5 positions"):
        RecordBuilder(model="m", policy_version=0).add(turn)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 999), min_size=1, max_size=4),  # context ids
            st.lists(  # sampled (id, logprob, kept entry) triples
                st.tuples(
                    st.integers(0, 999),
                    st.floats(-20, 0),
                    st.one_of(
                        st.none(), st.just(UNKNOWN), st.sets(st.integers(0, 999), min_size=1)
                    ),
                ),
                min_size=1,
                max_size=4,
            ),
            st.booleans(),  # full log-probs known
        ),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),  # MoE
)
def test_segments_round_trip_through_json(turns: list[Any], moe: bool) -> None:
    seg = Segment()
    for context, sampled, full_known in turns:
        seg.add_context(context)
        seg.add_sampled(
            [t for t, _, _ in sampled],
            [lp for _, lp, _ in sampled],
            full_logprobs=[lp - 0.5 for _, lp, _ in sampled] if full_known else None,
            kept=[k if k is None or k == UNKNOWN else sorted(k) for _, _, k in sampled],
            info=TurnInfo(1.0, 0.9, 0, len(seg.turns), "length"),
        )
        if moe:  # routes for every position but the last
            n = len(seg.token_ids) - 1
            seg.fill_routes([[[p % 7, (p + 1) % 7], [p % 5, 6]] for p in range(n)])
    seg.check()
    back = EpisodeRecord.from_dict(json.loads(json.dumps(EpisodeRecord([seg]).to_dict())))
    assert back.segments == [seg]
    assert [decode_kept(k) for k in back.segments[0].kept] == list(KeptSets(seg.kept))


# -- sessions after a cancelled turn ----------------------------------------------------------


def test_end_session_after_a_cancelled_turn_frees_the_row_and_the_rng(tokenizer: Any) -> None:
    long = SamplingParams(max_tokens=1500, seed=7)
    short = SamplingParams(max_tokens=6, seed=7)

    async def run() -> tuple[dict[str, int], list[int], list[int]]:
        policy = LocalPolicy(_tiny_llama(), tokenizer, name="tiny")
        try:
            task = asyncio.create_task(policy.act("task#0", START, [], long))
            for _ in range(500):  # until the turn is decoding
                await asyncio.sleep(0.01)
                if (await policy.stats())["rows"] == 1:
                    break
            await asyncio.sleep(0.05)  # a few tokens drawn from the session's generator
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await policy.end_session("task#0")  # as the rollout engine does on cancellation
            after = await policy.stats()
            # the id is reused by a new episode with the same seed: a fresh RNG, so the same
            # tokens as a never-used id
            reused = (await policy.act("task#0", START, [], short)).token_ids
            fresh = (await policy.act("task#1", START, [], short)).token_ids
            return after, reused, fresh
        finally:
            await policy.aclose()

    after, reused, fresh = asyncio.run(run())
    assert after["sessions"] == 0 and after["rows"] == 0 and after["kv_bytes"] == 0
    assert reused == fresh


def test_end_session_fails_a_turn_still_in_flight(tokenizer: Any) -> None:
    async def run() -> None:
        policy = LocalPolicy(_tiny_llama(), tokenizer, name="tiny")
        try:
            task = asyncio.create_task(
                policy.act("s", START, [], SamplingParams(max_tokens=1500, seed=1))
            )
            for _ in range(500):
                await asyncio.sleep(0.01)
                if (await policy.stats())["rows"] == 1:
                    break
            await policy.end_session("s")
            with pytest.raises(PolicyError, match="ended while its turn was in flight"):
                await task
            assert (await policy.stats())["sessions"] == 0
        finally:
            await policy.aclose()

    asyncio.run(run())
