"""vLLM's kept sets recovered from its processed top log-probs (envgym.models.kept), hermetic.

The heavy check against a real server, :func:`assert_keep_mask_exact`, runs from
tests/test_models_vllm.py, on that module's shared server (one engine start per CI run).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
import torch

from envgym.models.http_client import BadReply
from envgym.models.kept import (
    MASKED_LOGPROB,
    TOP_LOGPROBS,
    UNKNOWN,
    decode_kept,
    kept_from_top_logprobs,
    kept_tensors,
)
from envgym.models.vllm_policy import VLLMPolicy, _kept_entries
from envgym.policy import SamplingParams

LN_HALF = math.log(0.5)


@pytest.mark.parametrize(
    ("top", "sampled", "vocab", "expected"),
    [
        # two kept (each half), the third entry -inf: the kept set is exactly {3, 9}
        ({9: LN_HALF, 3: LN_HALF, 4: MASKED_LOGPROB}, 9, None, [3, 9]),
        # top-k 1: the sampled token alone (log-prob 0), the rest masked
        ({7: 0.0, 1: MASKED_LOGPROB, 2: MASKED_LOGPROB}, 7, None, [7]),
        # all finite: the kept set may go on past the list
        ({1: math.log(0.6), 2: math.log(0.3)}, 2, None, UNKNOWN),
        # all finite but the list is the whole vocabulary: complete
        ({0: math.log(0.25), 1: math.log(0.75)}, 0, 2, [0, 1]),
        # the sampled token appended after the best n (not among them), one masked entry
        ({5: math.log(0.9), 6: MASKED_LOGPROB, 8: math.log(0.1)}, 8, None, [5, 8]),
    ],
)
def test_kept_sets_from_top_logprobs(
    top: dict[int, float], sampled: int, vocab: int | None, expected: Any
) -> None:
    assert decode_kept(kept_from_top_logprobs(top, sampled, vocab_size=vocab)) == expected


@pytest.mark.parametrize(
    ("top", "sampled", "message"),
    [
        ({1: 0.0, 2: MASKED_LOGPROB}, 3, "do not include the sampled token 3"),
        ({1: 0.0, 2: MASKED_LOGPROB}, 2, "has log-prob -9999.0: masked"),
        # processed_logits (or raw logits): finite values that are not a distribution
        ({1: 2.5, 2: 1.0, 3: MASKED_LOGPROB}, 1, "--logprobs-mode processed_logprobs"),
    ],
)
def test_contradictory_top_logprobs_raise(
    top: dict[int, float], sampled: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        kept_from_top_logprobs(top, sampled)


def test_unknown_entries_make_the_trainer_refuse_with_the_fix() -> None:
    entries = _kept_entries(
        [{"token_id:4": 0.0, "token_id:1": -9999.0}, {"token_id:2": -0.1, "token_id:3": -2.4}],
        [4, 2],
    )
    assert decode_kept(entries[0]) == [4] and entries[1] == UNKNOWN
    with pytest.raises(ValueError, match="row 1: .*local engine, or top_p 1"):
        kept_tensors(entries)


@pytest.mark.parametrize(
    ("top_logprobs", "message"),
    [
        (None, "do not match its tokens"),
        ([{"token_id:4": 0.0}], "do not match its tokens"),
        ([{"4": 0.0}, {"token_id:2": 0.0}], "is no token id"),
        ([{"token_id:-4": 0.0}, {"token_id:2": 0.0}], "is no token id"),
        ([{"token_id:4": "0"}, {"token_id:2": 0.0}], "is not a number"),
        ([{"token_id:4": True}, {"token_id:2": 0.0}], "is not a number"),
        ([{"token_id:4": 0.0, "token_id:1": math.nan}, {"token_id:2": 0.0}], "is not a number"),
        ([{"token_id:²": 0.0}, {"token_id:2": 0.0}], "is no token id"),
        ([{f"token_id:{i}": -1.0 for i in range(TOP_LOGPROBS + 2)}, {}], "is not a dict of"),
        ([[], {"token_id:2": 0.0}], "is not a dict of"),
        ([{"token_id:5": 0.0, "token_id:1": -9999.0}, {"token_id:2": 0.0}], "token 0: .*sampled"),
    ],
)
def test_hostile_top_logprobs_are_bad_replies(top_logprobs: Any, message: str) -> None:
    with pytest.raises(BadReply, match=message):
        _kept_entries(top_logprobs, [4, 2])


def test_requests_ask_for_top_logprobs_by_id_only_when_truncated(tokenizer: Any) -> None:
    from envgym.models.vllm_server import VLLMServer

    command = VLLMServer(model="m").command()
    assert command[command.index("--max-logprobs") + 1] == str(TOP_LOGPROBS)
    assert command[command.index("--logprobs-mode") + 1] == "processed_logprobs"
    policy = VLLMPolicy("http://127.0.0.1:9/v1", "m", tokenizer=tokenizer)
    try:
        whole = policy.request_body([1], SamplingParams(top_p=1.0))
        cut = policy.request_body([1], SamplingParams(top_p=0.7))
        assert (whole["logprobs"], cut["logprobs"]) == (0, TOP_LOGPROBS)
        assert cut["return_tokens_as_token_ids"] and cut["top_k"] == 0
    finally:
        asyncio.run(policy.aclose())


def test_a_policy_asked_for_no_top_logprobs_records_unknown_kept_sets(tokenizer: Any) -> None:
    """Evaluation against a server without ``--max-logprobs``: no alternatives asked, and the
    truncated turns' kept sets are unknown (never "not truncated")."""
    with pytest.raises(ValueError, match="top_logprobs must be in"):
        VLLMPolicy("http://127.0.0.1:9/v1", "m", tokenizer=tokenizer, top_logprobs=TOP_LOGPROBS + 1)
    policy = VLLMPolicy("http://127.0.0.1:9/v1", "m", tokenizer=tokenizer, top_logprobs=0)
    cut = SamplingParams(top_p=0.7)
    try:
        assert policy.request_body([1], cut)["logprobs"] == 0
        reply = {"choices": [{"token_ids": [4], "logprobs": {"token_logprobs": [-0.1]}}]}
        assert policy._read(reply, [1], cut).kept is None
        assert list(policy._read(reply, [1], SamplingParams()).kept or ()) == [None]
    finally:
        asyncio.run(policy.aclose())


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    from envgym.embedded import hf_dir

    return AutoTokenizer.from_pretrained(str(hf_dir()))


# -- the heavy check, run from tests/test_models_vllm.py on its shared server ---------------------
def assert_keep_mask_exact(base_url: str, served_name: str, params: SamplingParams) -> float:
    """Sample from the real server at truncated ``params``, recompute π_old with the trainer's
    log-prob op (envgym/kernels/logprob.py) over the recovered kept sets on the embedded SmolLM2
    (float32, CPU) and return the largest |ratio − 1|, asserting it is ≤ 1e-3.  Tokens whose kept
    set the top log-probs did not cover are recorded unknown: the trainer refuses them
    (kept_tensors raises), so none may be scored silently."""
    from envgym.embedded import load_model
    from envgym.kernels.logprob import selected_logprobs

    messages = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]

    async def sample() -> list[Any]:
        policy = VLLMPolicy(base_url, served_name)
        try:
            return [await policy.act(f"s{i}", messages, [], params) for i in range(2)]
        finally:
            await policy.aclose()

    turns = asyncio.run(sample())
    model = load_model()
    worst, scored, unknown = 0.0, 0, 0
    full_ratios: list[torch.Tensor] = []
    for turn in turns:
        entries = list(turn.kept.entries)
        known = [i for i, e in enumerate(entries) if e != UNKNOWN]
        unknown += len(entries) - len(known)
        if len(known) < len(entries):
            with pytest.raises(ValueError, match="kept set is unknown"):
                kept_tensors(entries)
        ids = torch.tensor([turn.prompt_ids + turn.token_ids])
        with torch.no_grad():
            hidden = model.model(ids).last_hidden_state[0].float()
        n = len(turn.prompt_ids)
        rows = torch.tensor([n - 1 + i for i in known])
        kept_ids, kept_rows = kept_tensors([entries[i] for i in known])
        assert bool(kept_rows.all())  # truncated sampling: every known row has its set
        targets = torch.tensor([turn.token_ids[i] for i in known])
        weight = model.lm_head.weight.float()
        ours, _ = selected_logprobs(
            hidden[rows],
            weight,
            targets,
            temperature=params.temperature,
            kept_ids=kept_ids,
            kept_rows=kept_rows,
        )
        # the former approximation (unknown_kept: full), for the report: the whole vocabulary
        full, _ = selected_logprobs(hidden[rows], weight, targets, temperature=params.temperature)
        theirs = torch.tensor([turn.logprobs[i] for i in known], dtype=torch.float64)
        ratio = torch.exp(ours.double() - theirs)
        full_ratios.append(torch.exp(full.double() - theirs))
        worst = max(worst, float((ratio - 1).abs().max()))
        scored += len(known)
    old = torch.cat(full_ratios)
    print(
        f"keep mask on vLLM {params}: {scored} tokens, {unknown} unknown, max |r-1| {worst:.2e}; "
        f"full-vocabulary π_old instead: mean r {float(old.mean()):.3f}, "
        f"{float((old < 0.8).double().mean()):.0%} below 0.8"
    )
    assert scored > 0
    assert worst <= 1e-3
    return worst
