"""envgym/trainer/policy.py and envgym/trainer/update.py: π_θ log-probs of recorded sequences (keep
sampling mask, keep routing) checked against a full-logits computation; non-finite inputs skip
updates."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

from envgym.models.kept import encode_kept
from envgym.trainer.batch import Sample, collate
from envgym.trainer.config import config_from_dict
from envgym.trainer.policy import TrainablePolicy
from envgym.trainer.update import Update

V = 97


def _llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).double()


def _mixtral(seed: int = 0) -> MixtralForCausalLM:
    torch.manual_seed(seed)
    cfg = MixtralConfig(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        router_jitter_noise=0.0,
    )
    return MixtralForCausalLM(cfg).float()  # grouped expert matmuls: no float64


def _sample(
    ids: list[int],
    mask: list[int],
    kept: list[Any],
    *,
    adv: float = 1.0,
    routes: torch.Tensor | None = None,
    engine: float = -1.0,
) -> Sample:
    return Sample(
        token_ids=ids,
        loss_mask=mask,
        engine_logp=[engine if m else 0.0 for m in mask],
        kept=[None if k is None else encode_kept(k) for k in kept],
        routes=routes,
        advantage=adv,
        reward=float(adv > 0),
        group=0,
        task_id="t",
        policy_version=0,
    )


def _samples() -> list[Sample]:
    return [
        _sample(
            [5, 6, 7, 8, 9, 10], [0, 0, 1, 1, 0, 1], [None, None, [7, 3, 50], None, None, [10, 11]]
        ),
        _sample([20, 21, 22], [0, 1, 1], [None, [21, 1, 2, 3], None], adv=-1.0),
    ]


def _expected(model: Any, batch: Any, temperature: float, keep: bool) -> tuple[torch.Tensor, ...]:
    """Full logits, -inf outside each trained row's kept set, log_softmax, gather: by hand."""
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    z = logits / temperature
    sel = batch.mask > 0
    rows = z[sel]  # [M, V], row-major like kept_ids
    if keep:
        allowed = torch.zeros_like(rows, dtype=torch.bool)
        for i, (ids, on) in enumerate(zip(batch.kept_ids.tolist(), batch.kept_rows.tolist())):
            if on:
                allowed[i, [j for j in ids if j >= 0]] = True
            else:
                allowed[i] = True
        rows = rows.masked_fill(~allowed, -math.inf)
    lp = torch.log_softmax(rows, dim=-1)
    picked = lp.gather(1, batch.targets[sel].unsqueeze(1)).squeeze(1)
    p = lp.exp()
    ent = -(p * torch.where(p > 0, lp, torch.zeros_like(lp))).sum(-1)
    return picked, ent


@pytest.mark.parametrize("keep", [True, False])
def test_logprobs_equal_full_logits_with_and_without_the_keep_sampling_mask(keep: bool) -> None:
    model = _llama()
    batch = collate(_samples(), pad_id=0, dtype=torch.float64)
    policy = TrainablePolicy(model, chunk_size=16, keep_sampling_mask=keep)
    logp, ent = policy.logprobs(batch, temperature=0.7, with_entropy=True)
    assert logp.shape == batch.mask.shape and ent is not None
    want_lp, want_ent = _expected(model, batch, 0.7, keep)
    sel = batch.mask > 0
    assert torch.allclose(logp[sel], want_lp, atol=1e-10, rtol=0)
    assert torch.allclose(ent[sel], want_ent, atol=1e-10, rtol=0)
    assert bool((logp[~sel] == 0).all()) and bool((ent[~sel] == 0).all())
    if keep:  # renormalized over kept sets: target 7 among {3, 7, 50} has log-prob > full vocab
        full, _ = _expected(model, batch, 0.7, False)
        assert bool((logp[sel][batch.kept_rows] > full[batch.kept_rows]).all())
    logp.sum().backward()
    assert model.get_output_embeddings().weight.grad is not None
    assert model.get_input_embeddings().weight.grad.abs().sum() > 0


def _group_samples() -> list[Sample]:
    """Three rows with the first 6 ids in common (a GRPO group: one prompt), different lengths."""
    prompt = [3, 4, 5, 6, 7, 8]
    return [
        _sample(
            prompt + [30, 31, 32, 33],
            [0] * 6 + [1, 1, 0, 1],
            [None] * 6 + [[30, 9], None, None, None],
        ),
        _sample(prompt + [40, 41], [0] * 6 + [1, 1], [None] * 8, adv=-1.0),
        _sample(prompt + [50, 51, 52], [0] * 5 + [1, 1, 1, 1], [None] * 9, adv=0.5),
    ]


def test_shared_prefix_len() -> None:
    from envgym.trainer.policy import shared_prefix_len

    batch = collate(_group_samples(), pad_id=0, dtype=torch.float64)
    assert shared_prefix_len(batch) == 6  # inputs are ids[:-1]: the prompt is shared whole
    same = [_sample([3, 4, 5], [0, 1, 1], [None] * 3) for _ in range(2)]
    assert shared_prefix_len(collate(same, dtype=torch.float64)) == 1  # one input left own
    assert shared_prefix_len(collate(same[:1], dtype=torch.float64)) == 0  # nothing to share
    assert shared_prefix_len(collate(_samples(), dtype=torch.float64)) == 0  # 5 vs 20
    # padding is never shared: the padded tail of a short row equals the pad id of another
    padded = [
        _sample([3, 4, 0, 0, 9], [0, 1, 1, 1, 1], [None] * 5),
        _sample([3, 4, 0], [0, 1, 1], [None] * 3),
    ]
    assert shared_prefix_len(collate(padded, pad_id=0, dtype=torch.float64)) == 1


@pytest.mark.parametrize("keep", [True, False])
def test_a_shared_prefix_runs_once_and_changes_nothing(keep: bool) -> None:
    """Log-probs, entropies and gradients with the shared prefix run once equal the plain
    full forward (float64), while the model sees the prefix tokens once instead of per row."""
    out = {}
    for share in (True, False):
        model = _llama()
        seen: list[int] = []
        model.model.embed_tokens.register_forward_hook(
            lambda _m, args, _o: seen.append(int(args[0].numel()))  # noqa: B023
        )
        batch = collate(_group_samples(), pad_id=0, dtype=torch.float64)
        policy = TrainablePolicy(model, chunk_size=16, keep_sampling_mask=keep, share_prefix=share)
        logp, ent = policy.logprobs(batch, temperature=0.7, with_entropy=True)
        assert ent is not None
        (logp * torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        out[share] = (logp.detach(), ent.detach(), grads, sum(seen))
    (lp1, e1, g1, n1), (lp0, e0, g0, n0) = out[True], out[False]
    assert torch.allclose(lp1, lp0, atol=1e-12, rtol=0) and torch.allclose(e1, e0, atol=1e-12)
    assert g1.keys() == g0.keys() and len(g1) > 5
    for name in g0:  # the cached attention's backward agrees to ~1e-7 relative, not 1e-12
        scale = float(g0[name].abs().max())
        assert torch.allclose(g1[name], g0[name], atol=1e-6 * scale, rtol=1e-5), name
    assert (n1, n0) == (6 + 3 * 3, 3 * 9)  # 6 prefix tokens once + 3 rows × 3 padded


def test_keep_routing_replays_recorded_routes() -> None:
    from envgym.trainer.routing import capture_routes

    model = _mixtral()
    ids = [5, 6, 7, 8, 9, 10, 11]
    with torch.no_grad():
        own = capture_routes(model, torch.tensor([ids[:-1]]))[0]  # [T-1, L, k]: inputs only
    routes = torch.cat([own, torch.full((1, *own.shape[1:]), -1)])  # the last token: never fed
    sample = _sample(ids, [0, 0, 1, 1, 1, 1, 1], [None] * 7, routes=routes)
    batch = collate([sample], dtype=torch.float32)
    plain = TrainablePolicy(model, keep_routing=False).logprobs(batch, temperature=1.0)[0]
    replay = TrainablePolicy(model)
    assert replay.routing_flip_rate(batch) == 0.0
    assert torch.equal(replay.logprobs(batch, temperature=1.0)[0], plain)
    # other experts (still distinct within each top-k): replay changes π_θ, flips are counted
    other = (own + 1) % 4
    swapped = _sample(
        ids,
        [0, 0, 1, 1, 1, 1, 1],
        [None] * 7,
        routes=torch.cat([other, torch.full((1, *own.shape[1:]), -1)]),
    )
    sbatch = collate([swapped], dtype=torch.float32)
    assert replay.routing_flip_rate(sbatch) > 0.0
    assert not torch.allclose(replay.logprobs(sbatch, temperature=1.0)[0], plain)
    assert torch.equal(
        TrainablePolicy(model, keep_routing=False).logprobs(sbatch, temperature=1.0)[0], plain
    )
    assert TrainablePolicy(_llama()).routing_flip_rate(collate(_samples())) is None


def test_heads_the_hidden_state_path_cannot_score_are_refused() -> None:
    model = _llama()
    model.lm_head = torch.nn.Linear(32, V, bias=True)
    with pytest.raises(ValueError, match="LM head has a bias"):
        TrainablePolicy(model)
    model = _llama()
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping=30.0"):
        TrainablePolicy(model)
    with pytest.raises(TypeError, match="no LM head"):
        TrainablePolicy(torch.nn.Linear(2, 2))  # type: ignore[arg-type]


def _update(model: Any, **overrides: Any) -> Update:
    data: dict[str, Any] = {
        "envs": [{"id": "x"}],
        "rollout": {"group_size": 2, "prompts": 1},
        "optimizer": {"lr": 1e-2},
        **overrides,
    }
    config = config_from_dict(data)
    return Update(config, TrainablePolicy(model), None)


def test_update_takes_optimizer_steps_on_finite_input() -> None:
    model = _llama()
    before = model.lm_head.weight.detach().clone()
    metrics, skipped = _update(model, minibatches=2).run(_samples(), step=0)
    assert skipped is None and metrics["optimizer_steps"] == 2
    assert not torch.equal(before, model.lm_head.weight)
    assert metrics["tokens"] == 5 and math.isfinite(metrics["loss"])


def test_fewer_samples_than_minibatches_after_masking_still_train() -> None:
    """Overlong masking can leave 1 trainable sample of a batch configured for 2 minibatches
    (seen end to end with SmolLM2): one optimizer step on it, not an error."""
    model = _llama()
    metrics, skipped = _update(model, minibatches=2).run(_samples()[:1], step=0)
    assert skipped is None and metrics["optimizer_steps"] == 1


def test_non_finite_log_probs_skip_the_update_and_say_why() -> None:
    model = _llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bad_engine = _samples()
    bad_engine[0].engine_logp[2] = math.nan
    metrics, skipped = _update(model).run(bad_engine, step=0)
    assert skipped == "non-finite engine log-probs (the engine did not report them?)"
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, 0] = math.nan  # the trainer's forward → NaN
    _, skipped = _update(model).run(_samples(), step=0)
    assert skipped == "non-finite log-probs from the trainer's recompute"
    _, skipped = _update(model, old_logprobs="engine").run(_samples(), step=0)
    assert skipped == "non-finite loss or gradients in every minibatch"
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if "up_proj" not in k)
    _, skipped = _update(_llama()).run([], step=0)
    assert skipped is not None and "empty batch" in skipped


def test_a_non_finite_minibatch_is_skipped_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A NaN advantage makes one of two minibatches' loss non-finite: that optimizer step is
    skipped, counted in minibatches_skipped and logged; the other minibatch trains."""
    samples = _samples()
    samples[0].advantage = math.nan
    with caplog.at_level(logging.WARNING, logger="envgym.trainer.update"):
        metrics, skipped = _update(_llama(), minibatches=2).run(samples, step=4)
    assert skipped is None
    assert (metrics["optimizer_steps"], metrics["minibatches_skipped"]) == (1.0, 1.0)
    assert "step 5: minibatch" in caplog.text and "skipped: non-finite loss" in caplog.text


def _one_pass_head_grad(samples: list[Sample], loss: Any) -> torch.Tensor:
    """The LM head's gradient of grpo_loss over the whole batch in one pass, by hand, from the
    same initial weights as ``_llama()``."""
    from envgym.trainer.losses import grpo_loss

    ref = _llama()
    batch = collate(samples, dtype=torch.float64)
    logp, _ = TrainablePolicy(ref).logprobs(batch, temperature=1.0)
    value, _ = grpo_loss(
        logp,
        logp.detach(),
        batch.advantages,
        batch.mask,
        loss,
        engine_logp=batch.engine_logp,
        rewards_positive=batch.rewards >= 1.0,
    )
    value.backward()
    return ref.lm_head.weight.grad


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
@pytest.mark.parametrize(
    ("aggregation", "normalizer"),
    [("token-mean", None), ("seq-mean-token-mean", None), ("constant", 7.0), ("constant", 0.5)],
)
def test_microbatches_accumulate_to_the_one_pass_gradient(
    aggregation: str, normalizer: float | None
) -> None:
    """One-row microbatches accumulate exactly the gradient of grpo_loss over the whole batch
    (a constant normalizer below 1 included: grpo_loss clamps its unit count at 1)."""
    loss = {"aggregation": aggregation, **({"normalizer": normalizer} if normalizer else {})}
    model = _llama()
    upd = _update(model, micro_tokens=1, loss=loss, optimizer={"lr": 1e-2, "max_grad_norm": None})
    upd.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]  # keep the grads
    upd.run(_samples(), step=0)
    got = model.lm_head.weight.grad.clone()

    want = _one_pass_head_grad(_samples(), upd.config.loss)
    assert torch.allclose(got, want, atol=1e-12, rtol=1e-9)


def test_gradient_checkpointing_with_a_shared_prefix_runs_the_batch_whole() -> None:
    """transformers returns no KV cache under gradient checkpointing in training mode, so the
    shared-prefix pass cannot be used; the batch runs whole and gives the plain log-probs."""
    batch = collate(_group_samples(), pad_id=0, dtype=torch.float64)
    plain = TrainablePolicy(_llama(), chunk_size=16, share_prefix=False)
    expected, _ = plain.logprobs(batch, temperature=0.7)
    model = _llama()
    model.train(True)
    model.gradient_checkpointing_enable()
    logp, _ = TrainablePolicy(model, chunk_size=16).logprobs(batch, temperature=0.7)
    assert torch.allclose(logp, expected, atol=1e-12)
    logp.sum().backward()
    assert model.model.embed_tokens.weight.grad is not None


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
def test_a_budget_that_fits_a_prompt_once_runs_each_group_together_with_the_same_gradient() -> None:
    """Two groups of three rows (one prompt each, 8-10 tokens): counted whole, an 18-token budget
    fits one row per microbatch; with each prompt run once (6 + 3 × 4) it fits each group in
    one.  The update groups them so, and accumulates exactly the one-pass gradient."""
    first = _group_samples()
    second = _group_samples()
    for s in second:
        s.token_ids = [60 + t if i < 6 else t for i, t in enumerate(s.token_ids)]
    samples = [first[0], second[0], first[1], second[1], first[2], second[2]]
    model = _llama()
    upd = _update(model, micro_tokens=18, optimizer={"lr": 1e-2, "max_grad_norm": None})
    assert upd._micro(samples, list(range(6))) == [[0, 2, 4], [1, 3, 5]]
    upd.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]  # keep the grads
    upd.run(samples, step=0)
    got = model.lm_head.weight.grad.clone()

    want = _one_pass_head_grad(samples, upd.config.loss)
    assert torch.allclose(got, want, atol=1e-12, rtol=1e-9)
    unshared = Update(upd.config, TrainablePolicy(_llama(), share_prefix=False), None)
    # counted whole: each 10-token row alone, the 8- and 9-token rows in pairs
    assert unshared._micro(samples, list(range(6))) == [[0], [1], [2, 4], [3, 5]]
