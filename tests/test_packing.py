"""envgym/trainer/packing.py: padding-free packing gives the padded path's log-probs, loss and
gradients.

float64 on the tiny random Llama of tests/test_train_loop.py: records packed into one row
(position ids restarting per record, no cross-record attention) score each token exactly as the
records run one by one; with a shared prefix (its KV cache in front of the packed tails) too;
and an update with ``packing: true`` accumulates the gradient of the padded update.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from test_train_loop import tiny_model

from envgym.trainer.batch import Sample, collate
from envgym.trainer.config import config_from_dict
from envgym.trainer.microbatches import balanced_microbatches
from envgym.trainer.packing import pack, padding_report, prefix_block_mask
from envgym.trainer.policy import TrainablePolicy
from envgym.trainer.update import Update


def _sample(ids: list[int], *, adv: float, episode: int, first_trained: int = 2) -> Sample:
    mask = [0] * first_trained + [1] * (len(ids) - first_trained)
    return Sample(
        token_ids=ids,
        loss_mask=mask,
        engine_logp=[-2.0 if m else 0.0 for m in mask],
        kept=[None] * len(ids),
        routes=None,
        advantage=adv,
        reward=float(adv > 0),
        group=0,
        task_id="t",
        policy_version=0,
        episode=episode,
    )


def _samples(shared: int) -> list[Sample]:
    """Six records of 3–17 tokens; with ``shared`` > 0 they begin with the same ``shared`` ids
    (a GRPO group's prompt), so the shared-prefix path runs in front of the packed tails."""
    rng = random.Random(7)
    head = [rng.randrange(3, 500) for _ in range(shared)]
    out = []
    for i, n in enumerate([9, 3, 17, 5, 12, 8]):
        ids = head + [rng.randrange(3, 500) for _ in range(n)]
        out.append(
            _sample(ids, adv=(-1.0) ** i * (0.5 + i / 10), episode=i, first_trained=shared + 1)
        )
    return out


def _model(attn: str = "sdpa") -> Any:
    model = tiny_model().double()
    model.set_attn_implementation(attn)
    return model


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("shared", [0, 6])
def test_packed_logprobs_equal_the_records_run_one_by_one(attn: str, shared: int) -> None:
    model = _model(attn)
    samples = _samples(shared)
    policy = TrainablePolicy(model, chunk_size=4096)
    packed = collate(samples, dtype=torch.float64, packed=True)
    lp, ent = policy.logprobs(packed, temperature=0.8, with_entropy=True)
    assert ent is not None
    # transformers' eager attention takes its softmax in float32 whatever the model's dtype
    tol = 1e-10 if attn == "sdpa" else 1e-6
    for b, s in enumerate(samples):
        alone = collate([s], dtype=torch.float64)
        want, want_ent = policy.logprobs(alone, temperature=0.8, with_entropy=True)
        assert want_ent is not None
        n = s.length - 1
        assert torch.allclose(lp[b, :n], want[0], atol=tol, rtol=0), b
        assert torch.allclose(ent[b, :n], want_ent[0], atol=tol, rtol=0), b
        assert bool((lp[b, n:] == 0).all())
    if shared:
        return
    # Cross-record attention would change them: the same row, one causal mask over everything.
    row = pack(packed.input_ids, packed.attention_mask)
    with torch.no_grad():
        leaked = model.base_model(input_ids=row.input_ids, use_cache=False).last_hidden_state[0]
        good, index = policy.packed_hidden_states(packed)
    later = index[1, 0]  # the second record's first token: it must not see the first record
    assert not torch.allclose(leaked[later], good[later], atol=1e-6)


def test_the_shared_prefix_path_runs_fewer_tokens_and_its_mask_is_block_causal() -> None:
    samples = _samples(6)
    batch = collate(samples, dtype=torch.float64, packed=True)
    row = pack(batch.input_ids, batch.attention_mask, prefix=5)  # shared_prefix_len keeps ≥ 1 own
    assert row.tokens == sum(s.length - 1 for s in samples) - 5 * len(samples)
    mask = prefix_block_mask(row)[0, 0]
    assert mask.shape == (row.tokens, 5 + row.tokens)
    assert bool(mask[:, :5].all())  # every tail token sees the prefix
    seq = row.seq_ids
    tail = mask[:, 5:]
    assert not bool(tail[seq[:, None] != seq[None, :]].any())  # never another record
    assert bool(tail.diagonal().all()) and not bool(tail.triu(1).any())  # causal within one
    additive = prefix_block_mask(row, additive=torch.float32)[0, 0]
    assert bool((additive[mask] == 0).all())
    assert bool((additive[~mask] == torch.finfo(torch.float32).min).all())


def test_pack_bad_input() -> None:
    ids = torch.tensor([[5, 6, 7], [8, 9, 0]])
    with pytest.raises(ValueError, match="right-padded"):
        pack(ids, torch.tensor([[1, 1, 1], [0, 1, 1]]))
    with pytest.raises(ValueError, match="nothing of its own"):
        pack(ids, torch.tensor([[1, 1, 1], [1, 1, 0]]), prefix=2)
    with pytest.raises(ValueError, match="one \\[B, T\\] shape"):
        pack(ids, torch.ones(2, 2))


def _update(model: Any, packing: bool, micro_tokens: int) -> Update:
    config = config_from_dict(
        {
            "envs": [{"id": "x"}],
            "rollout": {"group_size": 3, "prompts": 2},
            "optimizer": {"lr": 1e-2, "max_grad_norm": None},
            "loss": {"kl_beta": 0.0},
            "packing": packing,
            "micro_tokens": micro_tokens,
        }
    )
    upd = Update(config, TrainablePolicy(model), None)
    upd.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]  # keep the grads
    return upd


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
@pytest.mark.parametrize("shared", [0, 6])
def test_a_packed_update_has_the_loss_and_gradients_of_the_padded_one(shared: int) -> None:
    samples = _samples(shared)
    padded_model, packed_model = _model(), _model()
    padded, _ = _update(padded_model, False, 10_000).run(samples, step=0)
    packed, _ = _update(packed_model, True, 40).run(samples, step=0)  # several packed rows
    assert packed["loss"] == pytest.approx(padded["loss"], abs=1e-12)
    assert packed["entropy"] == pytest.approx(padded["entropy"], abs=1e-10)
    grads = 0
    for (name, a), b in zip(padded_model.named_parameters(), packed_model.parameters()):
        if a.grad is None:
            assert b.grad is None, name
            continue
        grads += 1
        assert torch.allclose(a.grad, b.grad, atol=1e-11, rtol=1e-8), name
    assert grads > 10


def test_packed_microbatches_are_cut_by_real_tokens() -> None:
    lengths = [30, 5, 5, 5, 5, 30]
    padded = balanced_microbatches(lengths, 60)
    packed = balanced_microbatches(lengths, 60, packed=True)
    assert all(len(b) * max(lengths[i] for i in b) <= 60 for b in padded)
    assert all(sum(lengths[i] for i in b) <= 60 for b in packed)
    assert len(packed) < len(padded)  # fewer forward passes for the same tokens
    assert sorted(i for b in packed for i in b) == list(range(6))


def realistic_lengths(seed: int = 0) -> tuple[list[int], int]:
    """A GRPO batch shaped like code-interpreter math on SmolLM2 (docs/TRAINER.md): 4 prompts ×
    8 samples, a ~390-token shared system prompt + tools, responses log-normal around 140 tokens
    (a few long multi-turn ones up to the 2,048-token episode budget)."""
    rng = random.Random(seed)
    prompt = 390
    lengths = []
    for _ in range(4):
        task = rng.randint(20, 80)
        for _ in range(8):
            response = min(2048, max(8, int(rng.lognormvariate(4.9, 0.9))))
            lengths.append(prompt + task + response)
    return lengths, prompt


def test_padding_report_on_a_realistic_batch() -> None:
    lengths, prompt = realistic_lengths()
    report = padding_report(lengths, 8192)
    assert report["packed_pad_share"] == 0.0
    assert 0.0 < report["padded_pad_share"] < 1.0
    assert report["packed_positions"] == sum(lengths)
    assert report["positions_ratio"] < 1.0
    shared = padding_report(lengths, 8192, prefix=prompt)
    assert shared["packed_positions"] < report["packed_positions"]
    assert shared["padded_pad_share"] > report["padded_pad_share"]  # padding is all in the tails
    with pytest.raises(ValueError, match="prefix"):
        padding_report([5, 3], 100, prefix=3)
    with pytest.raises(ValueError, match="at least one"):
        padding_report([], 100)


def test_packed_moe_rows_replay_their_own_routes() -> None:
    """Keep routing with packing: each record's recorded (here: swapped) experts are replayed
    at its own positions of the packed row, as in the padded batch."""
    from test_train_policy import _mixtral
    from test_train_policy import _sample as routed_sample

    from envgym.trainer.routing import capture_routes

    model = _mixtral()
    samples = []
    for ids in ([5, 6, 7, 8, 9, 10, 11], [20, 21, 22, 23], [30, 31, 32, 33, 34, 35]):
        with torch.no_grad():
            own = capture_routes(model, torch.tensor([ids[:-1]]))[0]
        other = (own + 1) % 4  # experts the router would not pick: replay must show
        routes = torch.cat([other, torch.full((1, *own.shape[1:]), -1)])
        samples.append(
            routed_sample(ids, [0, 0] + [1] * (len(ids) - 2), [None] * len(ids), routes=routes)
        )
    policy = TrainablePolicy(model)
    with torch.no_grad():
        padded, _ = policy.logprobs(collate(samples), temperature=1.0)
        packed, _ = policy.logprobs(collate(samples, packed=True), temperature=1.0)
        live, _ = TrainablePolicy(model, keep_routing=False).logprobs(
            collate(samples, packed=True), temperature=1.0
        )
    assert torch.allclose(packed, padded, atol=1e-5, rtol=0)
    assert not torch.allclose(live, padded, atol=1e-3)
