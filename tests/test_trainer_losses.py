"""GRPO loss terms on tiny float64 tensors, expected values worked out by hand in each test.

Log-probs are built from chosen ratios (logp = old + log r) so the arithmetic stays in r and Â.
Defaults unless a test says otherwise: ε_low = 0.2, ε_high = 0.28, dual clip c = 3.
"""

from __future__ import annotations

import math

import pytest
import torch

from envgym.trainer.losses import (
    LossConfig,
    aggregate,
    aggregate_parts,
    clipped_surrogate,
    finite_batch,
    grpo_loss,
    nonfinite_count,
    unbiased_kl,
)
from envgym.trainer.masks import keep_mask_logprobs, kept_log_mass, opsm_mask, tis_weights

F64 = torch.float64
NO_TIS = LossConfig(tis_cap=None)


def t(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def from_ratios(old: torch.Tensor, ratios: list[list[float]]) -> torch.Tensor:
    """log π_θ = log π_old + log r, as a leaf that wants gradients."""
    return (old + torch.log(t(ratios))).detach().requires_grad_(True)


def close(a: torch.Tensor | float, b: torch.Tensor | float) -> bool:
    return torch.allclose(torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), atol=1e-12)


# ---- the clipped surrogate (eq. 5–6, clip-higher, dual clip) --------------------------------

RATIOS = [0.5, 0.9, 1.0, 1.2, 1.5, 4.0]


def test_surrogate_positive_advantage_by_hand() -> None:
    r = t([RATIOS]).requires_grad_(True)
    obj, flags = clipped_surrogate(r, t([[2.0]]), 0.2, 0.28, 3.0)
    # min(r·2, clip(r, 0.8, 1.28)·2): 0.5 → min(1.0, 1.6); 1.5 → min(3.0, 2.56); 4 → min(8, 2.56)
    assert close(obj, t([[1.0, 1.8, 2.0, 2.4, 2.56, 2.56]]))
    assert flags["clip_high"].tolist() == [[False, False, False, False, True, True]]
    assert not flags["clip_low"].any() and not flags["dual"].any()
    obj.sum().backward()
    # ∂(r·Â)/∂r = Â = 2 where unclipped, 0 where the clipped constant 1.28·2 is taken
    assert close(r.grad, t([[2.0, 2.0, 2.0, 2.0, 0.0, 0.0]]))


def test_surrogate_negative_advantage_with_dual_clip_by_hand() -> None:
    r = t([RATIOS]).requires_grad_(True)
    obj, flags = clipped_surrogate(r, t([[-2.0]]), 0.2, 0.28, 3.0)
    # min(−2r, −2·clip(r)): 0.5 → min(−1.0, −1.6) = −1.6; 1.5 → min(−3.0, −2.56) = −3.0;
    # 4 → min(−8, −2.56) = −8, then the dual clip max(−8, 3·(−2)) = −6
    assert close(obj, t([[-1.6, -1.8, -2.0, -2.4, -3.0, -6.0]]))
    assert flags["clip_low"].tolist() == [[True, False, False, False, False, False]]
    assert flags["dual"].tolist() == [[False, False, False, False, False, True]]
    assert not flags["clip_high"].any()
    obj.sum().backward()
    assert close(r.grad, t([[0.0, -2.0, -2.0, -2.0, -2.0, 0.0]]))


def test_surrogate_without_dual_clip_is_unbounded_for_negative_advantages() -> None:
    r = t([[4.0]]).requires_grad_(True)
    obj, flags = clipped_surrogate(r, t([[-2.0]]), 0.2, 0.28, None)
    assert close(obj, t([[-8.0]])) and not flags["dual"].any()
    obj.sum().backward()
    assert close(r.grad, t([[-2.0]]))


def test_clipped_regions_have_exactly_zero_gradient_through_grpo_loss() -> None:
    old = t([[-1.0, -1.0, -1.0]])
    # Â = +1 with r = 1.5 (> 1.28), Â = −1 with r = 0.5 (< 0.8) and r = 5 (> c = 3)
    logp = from_ratios(old.expand(3, 3), [[1.5, 1.5, 1.5], [0.5, 0.5, 0.5], [5.0, 5.0, 5.0]])
    loss, d = grpo_loss(logp, old.expand(3, 3), t([1.0, -1.0, -1.0]), torch.ones(3, 3), NO_TIS)
    loss.backward()
    assert torch.equal(logp.grad, torch.zeros(3, 3, dtype=F64))
    assert close(d["clip_high_fraction"], 1 / 3)
    assert close(d["clip_low_fraction"], 1 / 3)
    assert close(d["dual_clip_fraction"], 1 / 3)
    # each token's objective is a constant: 1.28·1, 0.8·(−1), 3·(−1) → loss −(3.84 − 2.4 − 9)/9
    assert close(loss, -(3 * 1.28 - 3 * 0.8 - 3 * 3.0) / 9)


# ---- grpo_loss: one batch, every aggregation mode ----------------------------------------------

OLD = t([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
RAT = [[1.5, 1.0, 0.5], [1.2, 4.0, 1.0]]
ADV = t([1.0, -0.5])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
# per-token objective by hand:
#   seq 0 (Â = +1):   r 1.5 → min(1.5, 1.28) = 1.28;  r 1 → 1.0;  r 0.5 → min(0.5, 0.8) = 0.5
#   seq 1 (Â = −0.5): r 1.2 → −0.6;  r 4 → min(−2.0, −0.64) = −2.0 → max(−2.0, 3·(−0.5)) = −1.5
#   token losses (−objective): [−1.28, −1.0, −0.5] and [0.6, 1.5]; sum −2.78 + 2.1 = −0.68
TOKEN_LOSS_SUM = -1.28 - 1.0 - 0.5 + 0.6 + 1.5


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    logp = from_ratios(OLD, RAT)
    with torch.no_grad():
        logp[1, 2] = float("nan")  # untrained position: must not leak into anything
    return logp, OLD.clone()


@pytest.mark.parametrize(
    ("aggregation", "normalizer", "expected", "units"),
    [
        ("token-mean", None, TOKEN_LOSS_SUM / 5, 5.0),
        ("seq-mean-token-mean", None, ((-1.28 - 1.0 - 0.5) / 3 + (0.6 + 1.5) / 2) / 2, 2.0),
        ("constant", 10.0, TOKEN_LOSS_SUM / 10, 10.0),
        ("constant", 0.5, TOKEN_LOSS_SUM / 0.5, 0.5),  # below 1: used as given, not clamped
    ],
)
def test_grpo_loss_aggregations_by_hand(
    aggregation: str, normalizer: float | None, expected: float, units: float
) -> None:
    logp, old = _batch()
    cfg = LossConfig(
        aggregation=aggregation,
        normalizer=normalizer,
        tis_cap=None,  # type: ignore[arg-type]
    )
    loss, d = grpo_loss(logp, old, ADV, MASK, cfg)
    assert close(loss, expected)
    assert close(d["n_units"], units) and close(d["loss_sum"] / d["n_units"], expected)
    assert close(d["clip_high_fraction"], 1 / 5) and close(d["dual_clip_fraction"], 1 / 5)
    assert close(d["clip_low_fraction"], 0.0)
    assert close(d["ratio_mean"], (1.5 + 1.0 + 0.5 + 1.2 + 4.0) / 5)
    assert close(d["tokens"], 5.0) and close(d["sequences"], 2.0) and close(d["nonfinite"], 0.0)
    loss.backward()
    # ∂ℓ/∂logp = −Â·r·(1/units) where unclipped; 0 at r = 1.5 (clip-high), r = 4 (dual), masked
    per_token_scale = {
        "token-mean": [[1 / 5] * 3, [1 / 5] * 3],
        "seq-mean-token-mean": [[1 / 6] * 3, [1 / 4] * 3],
        "constant": [[1 / units] * 3, [1 / units] * 3],
    }[aggregation]
    raw = t([[0.0, -1.0 * 1.0, -1.0 * 0.5], [0.5 * 1.2, 0.0, 0.0]])
    assert close(logp.grad, raw * t(per_token_scale))


def test_seq_mean_skips_sequences_without_trained_tokens() -> None:
    logp, old = _batch()
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    cfg = LossConfig(aggregation="seq-mean-token-mean", tis_cap=None)
    loss, d = grpo_loss(logp, old, t([1.0, float("nan")]), mask, cfg)
    # only sequence 0 counts: (−1.28 − 1.0 − 0.5) / 3; its empty partner's NaN Â is unused
    assert close(loss, (-1.28 - 1.0 - 0.5) / 3) and close(d["n_units"], 1.0)
    assert close(d["sequences"], 1.0) and close(d["nonfinite"], 0.0)


def test_empty_mask_gives_zero_loss_and_zero_units() -> None:
    logp, old = _batch()
    loss, d = grpo_loss(logp, old, ADV, torch.zeros(2, 3, dtype=torch.bool), NO_TIS)
    loss.backward()
    assert close(loss, 0.0) and close(d["n_units"], 0.0)
    assert torch.equal(logp.grad, torch.zeros(2, 3, dtype=F64))


def test_float_mask_must_be_zero_or_one() -> None:
    logp, old = _batch()
    loss, _ = grpo_loss(logp, old, ADV, MASK.to(F64), NO_TIS)
    assert close(loss, TOKEN_LOSS_SUM / 5)
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        grpo_loss(logp, old, ADV, MASK.to(F64) * 0.5, NO_TIS)


def test_split_batch_with_summed_parts_equals_whole_batch() -> None:
    """loss_sum / n_units summed over microbatches (what envgym.trainer.distributed does) = one
    batch."""
    for aggregation in ("token-mean", "seq-mean-token-mean"):
        cfg = LossConfig(aggregation=aggregation, tis_cap=None)  # type: ignore[arg-type]
        logp, old = _batch()
        whole, _ = grpo_loss(logp, old, ADV, MASK, cfg)
        parts = [
            grpo_loss(logp[i : i + 1], old[i : i + 1], ADV[i : i + 1], MASK[i : i + 1], cfg)[1]
            for i in range(2)
        ]
        total = sum(p["loss_sum"] for p in parts) / sum(p["n_units"] for p in parts)
        assert close(total, whole)


# ---- unbiased KL (eq. 7) ----------------------------------------------------------------------


def test_unbiased_kl_by_hand() -> None:
    # π_θ = 0.5, π_old = 0.25, π_ref = 0.25 → r = 2, π_ref/π_θ = 0.5
    logp = t([[math.log(0.5)]]).requires_grad_(True)
    old, ref = t([[math.log(0.25)]]), t([[math.log(0.25)]])
    kl = unbiased_kl(logp, old, ref)
    # 2·(0.5 − log 0.5 − 1) = 2·(−0.5 + 0.693147…) = 0.386294…
    assert close(kl, 2 * (0.5 - math.log(0.5) - 1))
    kl.sum().backward()
    # ∂/∂logp = r·(log π_θ − log π_ref) = 2·log 2
    assert close(logp.grad, 2 * math.log(2))


def test_kl_term_in_grpo_loss_by_hand() -> None:
    logp = t([[math.log(0.5), math.log(0.5)]]).requires_grad_(True)
    old = t([[math.log(0.25), math.log(0.5)]])
    ref = t([[math.log(0.25), math.log(0.5)]])
    cfg = LossConfig(kl_beta=0.1, tis_cap=None)
    loss, d = grpo_loss(logp, old, t([0.0]), torch.ones(1, 2), cfg, ref_logp=ref)
    # Â = 0: only β·KL; token 2 has π_θ = π_ref → 0; token-mean over 2 tokens
    kl0 = 2 * (0.5 - math.log(0.5) - 1)
    assert close(d["kl"], kl0 / 2) and close(loss, 0.1 * kl0 / 2) and close(d["pg_loss"], 0.0)
    loss.backward()
    assert close(logp.grad, t([[0.1 * 2 * math.log(2) / 2, 0.0]]))


def test_unbiased_kl_expectation_and_gradient_match_exact_kl() -> None:
    """Over a 3-token vocabulary: E_{o~π_old}[eq. 7] = KL(π_θ‖π_ref) and so is its gradient."""
    theta = t([0.3, -0.2, 0.5]).requires_grad_(True)
    old_logits, ref_logits = t([0.1, 0.4, -0.3]), t([-0.5, 0.2, 0.6])
    logp = torch.log_softmax(theta, 0)
    old, ref = torch.log_softmax(old_logits, 0), torch.log_softmax(ref_logits, 0)
    estimate = (old.exp() * unbiased_kl(logp[None], old[None], ref[None])[0]).sum()
    exact = (logp.exp() * (logp - ref)).sum()
    assert torch.allclose(estimate, exact, atol=1e-12)
    (g_est,) = torch.autograd.grad(estimate, theta, retain_graph=True)
    (g_exact,) = torch.autograd.grad(exact, theta)
    assert torch.allclose(g_est, g_exact, atol=1e-12)


# ---- off-policy sequence masking (eq. 8–9) ----------------------------------------------------


def _opsm_batch() -> dict[str, torch.Tensor]:
    engine = t([[-1.0, -1.0]] * 4)
    # mean_t (engine − logp): 0.4, 0.1, 0.4, 0.25 (exactly δ: not "> δ")
    logp = t([[-1.5, -1.3], [-1.2, -1.0], [-1.5, -1.3], [-1.25, -1.25]]).requires_grad_(True)
    return {"logp": logp, "engine": engine, "adv": t([-1.0, -2.0, 3.0, -4.0])}


def test_opsm_masks_only_divergent_negative_sequences_by_hand() -> None:
    b = _opsm_batch()
    cfg = LossConfig(opsm_delta=0.25, tis_cap=None)
    old = b["logp"].detach().clone()  # r = 1: each token's objective is Â
    loss, d = grpo_loss(b["logp"], old, b["adv"], torch.ones(4, 2), cfg, engine_logp=b["engine"])
    # seq 0 (Â −1, 0.4 > 0.25) masked; seq 1 (0.1) kept; seq 2 (Â > 0) kept; seq 3 (= δ) kept
    # token losses −Â: 0, 0 | 2, 2 | −3, −3 | 4, 4 → sum 6 over 8 tokens
    assert close(loss, 6 / 8)
    assert close(d["opsm_masked_fraction"], 1 / 4)
    assert close(d["opsm_kl"], (0.4 + 0.1 + 0.4 + 0.25) / 4)
    loss.backward()
    # ∂/∂logp = −Â·r/8 on kept sequences, 0 on the masked one
    assert close(b["logp"].grad, t([[0, 0], [2 / 8, 2 / 8], [-3 / 8, -3 / 8], [4 / 8, 4 / 8]]))


def test_opsm_off_and_fallback_to_old_logp() -> None:
    b = _opsm_batch()
    old = b["logp"].detach().clone()
    off, d = grpo_loss(b["logp"], old, b["adv"], torch.ones(4, 2), NO_TIS, engine_logp=b["engine"])
    assert close(off, (1 + 1 + 2 + 2 - 3 - 3 + 4 + 4) / 8) and close(d["opsm_masked_fraction"], 0)
    # no engine log-probs: eq. 9's π_old is old_logp itself; using the engine's as old masks seq 0
    cfg = LossConfig(opsm_delta=0.25, tis_cap=None)
    logp = b["logp"].detach().clone().requires_grad_(True)
    loss, d = grpo_loss(logp, b["engine"], b["adv"], torch.ones(4, 2), cfg)
    assert close(d["opsm_masked_fraction"], 1 / 4)


def test_opsm_mask_function_uses_trained_tokens_only() -> None:
    logp = t([[-3.0, -1.0], [-1.0, -1.0]])
    engine = t([[-1.0, -1.0], [-1.0, -1.0]])
    mask = torch.tensor([[False, True], [True, True]])
    keep, div = opsm_mask(logp, engine, t([-1.0, -1.0]), mask, 0.1)
    # the 2-nat gap is at an untrained position: divergence 0 for both
    assert keep.tolist() == [True, True] and close(div, t([0.0, 0.0]))


# ---- truncated importance sampling ------------------------------------------------------------


def test_tis_weights_by_hand() -> None:
    engine = t([[math.log(0.2), math.log(0.2), math.log(0.1)]])
    old = t([[math.log(0.1), math.log(0.3), math.log(0.3)]])
    w, raw = tis_weights(old, engine, 2.0)
    assert close(raw, t([[0.5, 1.5, 3.0]])) and close(w, t([[0.5, 1.5, 2.0]]))


def test_tis_in_grpo_loss_by_hand() -> None:
    engine = t([[math.log(0.2), math.log(0.2), math.log(0.1)]])
    old = t([[math.log(0.1), math.log(0.3), math.log(0.3)]])  # π_old/π_engine = 0.5, 1.5, 3
    logp = old.clone().requires_grad_(True)  # r = 1
    loss, d = grpo_loss(
        logp, old, t([1.0]), torch.ones(1, 3), LossConfig(tis_cap=2.0), engine_logp=engine
    )
    # −w·r·Â per token: −0.5, −1.5, −2.0 (3 truncated to C = 2) → mean −4/3
    assert close(loss, -4 / 3)
    assert close(d["tis_ratio_mean"], 5 / 3) and close(d["tis_ratio_mean_truncated"], 4 / 3)
    assert close(d["tis_truncated_fraction"], 1 / 3)
    loss.backward()
    assert close(logp.grad, t([[-0.5 / 3, -1.5 / 3, -2.0 / 3]]))
    off, d = grpo_loss(logp, old, t([1.0]), torch.ones(1, 3), NO_TIS, engine_logp=engine)
    assert close(off, -1.0) and close(d["tis_ratio_mean_truncated"], 5 / 3)
    no_engine, d = grpo_loss(logp, old, t([1.0]), torch.ones(1, 3), LossConfig())
    assert close(no_engine, -1.0) and close(d["tis_ratio_mean"], 1.0)


# ---- positive-example LM loss (Seed-Thinking eq. 2) -------------------------------------------


@pytest.mark.parametrize(
    ("positive", "expected_lm", "grad_rows"),
    [
        (torch.tensor([True, False]), (1 + 2) / 4, [1, 0]),
        (t([1.0, 0.0]), (1 + 2) / 4, [1, 0]),
        (t([-1.0, 2.0]), (3 + 4) / 4, [0, 1]),
    ],
)
def test_positive_example_lm_loss_by_hand(
    positive: torch.Tensor, expected_lm: float, grad_rows: list[int]
) -> None:
    logp = t([[-1.0, -2.0], [-3.0, -4.0]]).requires_grad_(True)
    cfg = LossConfig(lm_coef=0.5, tis_cap=None)
    loss, d = grpo_loss(
        logp, logp.detach(), t([0.0, 0.0]), torch.ones(2, 2), cfg, rewards_positive=positive
    )
    # Â = 0 → no policy gradient; μ·(−Σ log π_θ over positive tokens)/4 tokens
    assert close(d["lm_loss"], expected_lm) and close(loss, 0.5 * expected_lm)
    loss.backward()
    rows = t(grad_rows)[:, None].expand(2, 2)
    assert close(logp.grad, -0.5 / 4 * rows)


def test_diagnostic_parts_sum_to_the_loss_in_every_mode() -> None:
    logp, old = _batch()
    ref = old - 0.3
    engine = old + t([[0.1, -0.2, 0.05], [0.3, 0.0, 0.0]])
    for aggregation, normalizer in (
        ("token-mean", None),
        ("seq-mean-token-mean", None),
        ("constant", 7.0),
    ):
        cfg = LossConfig(
            kl_beta=0.05,
            lm_coef=0.3,
            opsm_delta=0.0,
            aggregation=aggregation,
            normalizer=normalizer,  # type: ignore[arg-type]
        )
        loss, d = grpo_loss(
            logp,
            old,
            ADV,
            MASK,
            cfg,
            ref_logp=ref,
            engine_logp=engine,
            rewards_positive=t([1.0, 0.0]),
        )
        assert close(loss, d["pg_loss"] + 0.05 * d["kl"] + 0.3 * d["lm_loss"])


# ---- gradcheck ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg",
    [
        LossConfig(kl_beta=0.1, lm_coef=0.2, opsm_delta=0.05, tis_cap=1.5),
        LossConfig(aggregation="seq-mean-token-mean", kl_beta=0.1, dual_clip=None),
        LossConfig(aggregation="constant", normalizer=12.0, lm_coef=0.5, eps_high=0.2),
    ],
)
def test_gradcheck_all_terms(cfg: LossConfig) -> None:
    old = t([[-1.0, -2.0, -0.7, -1.1], [-0.4, -1.6, -2.2, -0.9], [-1.3, -0.8, -1.9, -0.5]])
    # ratios kept away from every kink (0.8, 1.2/1.28, 3) and OPSM divergences away from δ
    ratios = [[1.1, 0.6, 1.5, 0.95], [2.0, 3.5, 0.9, 1.05], [0.7, 1.15, 4.5, 1.0]]
    logp = from_ratios(old, ratios)
    # mean_t log(π_engine/π_θ): ≈ 0.34 (Â > 0), ≈ −0.41, ≈ 0.39 (Â < 0: masked when δ = 0.05)
    engine = old + t([[0.2, -0.1, 0.9, 0.0], [0.05, 0.3, -0.2, 0.1], [0.0, 0.4, 1.8, 0.6]])
    ref = old + t([[0.1, 0.2, -0.3, 0.4], [0.0, -0.1, 0.2, 0.3], [0.5, -0.2, 0.1, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 1, 1]])
    adv = t([0.7, -1.2, -0.4])

    def f(x: torch.Tensor) -> torch.Tensor:
        return grpo_loss(
            x,
            old,
            adv,
            mask,
            cfg,
            ref_logp=ref,
            engine_logp=engine,
            rewards_positive=t([1.0, 0.0, 1.0]),
        )[0]

    assert torch.autograd.gradcheck(f, (logp,), eps=1e-6, atol=1e-8)
    _, d = grpo_loss(
        logp,
        old,
        adv,
        mask,
        cfg,
        ref_logp=ref,
        engine_logp=engine,
        rewards_positive=t([1.0, 0.0, 1.0]),
    )
    assert close(d["opsm_masked_fraction"], 1 / 3 if cfg.opsm_delta is not None else 0.0)


# ---- non-finite inputs ------------------------------------------------------------------------


def test_nonfinite_at_trained_positions_is_flagged_and_counted() -> None:
    logp, old = _batch()  # NaN at the untrained [1, 2]: fine
    assert finite_batch(logp, old, ADV, MASK) and nonfinite_count(logp, old, ADV, MASK) == 0
    bad_old = old.clone()
    bad_old[0, 1] = float("inf")
    engine = old.clone()
    engine[1, 0] = float("nan")
    assert nonfinite_count(logp, bad_old, ADV, MASK, engine_logp=engine) == 2
    assert not finite_batch(logp, bad_old, ADV, MASK)
    loss, d = grpo_loss(logp, bad_old, ADV, MASK, LossConfig(), engine_logp=engine)
    assert not torch.isfinite(loss) and close(d["nonfinite"], 2.0)
    with pytest.raises(ValueError, match=r"old_logp: 1, engine_logp: 1"):
        grpo_loss(logp, bad_old, ADV, MASK, LossConfig(), engine_logp=engine, on_nonfinite="raise")
    with pytest.raises(ValueError, match="advantages: 1"):
        grpo_loss(logp, old, t([float("nan"), 1.0]), MASK, NO_TIS, on_nonfinite="raise")


def test_minus_inf_at_untrained_positions_stays_out_of_loss_and_grad() -> None:
    old = t([[-1.0, float("-inf")]])
    logp = t([[-1.0, float("-inf")]]).requires_grad_(True)
    ref = t([[-1.0, float("-inf")]])
    cfg = LossConfig(kl_beta=0.1, lm_coef=0.1)
    loss, _ = grpo_loss(
        logp,
        old,
        t([1.0]),
        torch.tensor([[1, 0]]),
        cfg,
        ref_logp=ref,
        engine_logp=old,
        rewards_positive=t([1.0]),
    )
    loss.backward()
    # one trained token, r = 1: −1 + 0.1·0 + 0.1·1
    assert close(loss, -1.0 + 0.1) and torch.isfinite(logp.grad).all()
    assert close(logp.grad, t([[-1.0 - 0.1, 0.0]]))


# ---- bad config and bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"eps_low": 1.0}, ValueError, "eps_low"),
        ({"eps_low": -0.1}, ValueError, "eps_low"),
        ({"eps_high": -0.01}, ValueError, "eps_high"),
        ({"eps_high": float("nan")}, ValueError, "eps_high must be finite"),
        ({"dual_clip": 1.0}, ValueError, "dual_clip"),
        ({"dual_clip": "3"}, TypeError, "dual_clip"),
        ({"kl_beta": -0.1}, ValueError, "kl_beta"),
        ({"kl_beta": True}, TypeError, "kl_beta"),
        ({"opsm_delta": -1.0}, ValueError, "opsm_delta"),
        ({"tis_cap": 0.5}, ValueError, "tis_cap"),
        ({"tis_cap": float("inf")}, ValueError, "tis_cap must be finite"),
        ({"lm_coef": -1.0}, ValueError, "lm_coef"),
        ({"aggregation": "sum"}, ValueError, "aggregation"),
        ({"aggregation": "constant"}, ValueError, "normalizer"),
        ({"aggregation": "constant", "normalizer": 0.0}, ValueError, "normalizer"),
        ({"normalizer": 5.0}, ValueError, "only used by aggregation 'constant'"),
    ],
)
def test_bad_config_values_raise_naming_the_field(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        LossConfig(**kwargs)  # type: ignore[arg-type]


def test_config_defaults() -> None:
    cfg = LossConfig()
    assert (cfg.eps_low, cfg.eps_high, cfg.dual_clip, cfg.kl_beta) == (0.2, 0.28, 3.0, 0.0)
    assert (cfg.opsm_delta, cfg.tis_cap, cfg.lm_coef) == (None, 2.0, 0.0)
    assert (cfg.aggregation, cfg.normalizer) == ("token-mean", None)


def test_mismatched_shapes_and_missing_inputs_raise() -> None:
    logp, old = _batch()
    cases = [
        (lambda: grpo_loss(logp, old[:, :2], ADV, MASK, NO_TIS), ValueError, "old_logp has shape"),
        (
            lambda: grpo_loss(logp, old, ADV[:, None], MASK, NO_TIS),
            ValueError,
            "advantages has shape",
        ),
        (lambda: grpo_loss(logp, old, ADV, MASK[:, :2], NO_TIS), ValueError, "mask has shape"),
        (lambda: grpo_loss(logp[0], old, ADV, MASK, NO_TIS), ValueError, "logp must be"),
        (lambda: grpo_loss(logp, old, ADV, MASK, NO_TIS, ref_logp=old[:1]), ValueError, "ref_logp"),
        (
            lambda: grpo_loss(logp, old, ADV, MASK, NO_TIS, engine_logp=old.long()),
            TypeError,
            "engine_logp",
        ),
        (
            lambda: grpo_loss(logp, old, ADV, MASK, NO_TIS, rewards_positive=ADV[:1]),
            ValueError,
            "rewards_positive",
        ),
        (lambda: grpo_loss(logp, old, torch.tensor([1, 0]), MASK, NO_TIS), TypeError, "advantages"),
        (lambda: grpo_loss(logp, old, ADV, MASK.tolist(), NO_TIS), TypeError, "mask"),
        (lambda: grpo_loss(logp, old, ADV, MASK, {"eps_low": 0.2}), TypeError, "LossConfig"),
        (lambda: grpo_loss(logp, old, ADV, MASK, LossConfig(kl_beta=0.1)), ValueError, "ref_logp"),
        (
            lambda: grpo_loss(logp, old, ADV, MASK, LossConfig(lm_coef=0.1)),
            ValueError,
            "rewards_positive",
        ),
        (
            lambda: grpo_loss(logp, old, ADV, MASK, NO_TIS, on_nonfinite="skip"),
            ValueError,
            "on_nonfinite",
        ),
        (lambda: aggregate(old, MASK, "token-mean"), TypeError, "mask must be a bool"),
        (lambda: aggregate(old, MASK.bool()[:1], "token-mean"), ValueError, "must both be"),
        (lambda: aggregate(old, MASK.bool(), "mean"), ValueError, "aggregation"),
        (lambda: aggregate_parts(old, MASK.bool(), "constant"), ValueError, "normalizer"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()


# ---- keep sampling mask reference (DeepSeek-V3.2 §3.1) ----------------------------------------

# softmax([0, ln 2, ln 3, ln 4]) = [1, 2, 3, 4] / 10
LOGITS = torch.log(t([[[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]]]))  # [B=1, T=2, V=4]


def test_keep_mask_logprobs_by_hand() -> None:
    kept = torch.tensor([[[1, 3, -1], [3, 3, 1]]])  # padding and a duplicate: same set {1, 3}
    rows = torch.tensor([[True, False]])
    targets = torch.tensor([[3, 3]])
    out = keep_mask_logprobs(LOGITS, kept, rows, targets)
    # row 0 kept {1, 3}: 4 / (2 + 4); row 1 not truncated: 4 / 10
    assert close(out, torch.log(t([[4 / 6, 4 / 10]])))
    # temperature 0.5 squares the probabilities: [1, 4, 9, 16] / 30; kept {1, 3}: 16 / 20
    out = keep_mask_logprobs(LOGITS, kept, rows, targets, temperature=0.5)
    assert close(out, torch.log(t([[16 / 20, 16 / 30]])))
    assert close(kept_log_mass(LOGITS, kept, rows), torch.log(t([[6 / 10, 1.0]])))
    # without targets the helper returns the kept mass (the renormalizer)
    assert close(keep_mask_logprobs(LOGITS, kept, rows), torch.log(t([[6 / 10, 1.0]])))
    # a target outside its kept set could not have been sampled: −inf
    assert keep_mask_logprobs(LOGITS, kept, rows, torch.tensor([[0, 0]]))[0, 0] == float("-inf")


def test_keep_mask_logprobs_is_full_logprob_minus_kept_mass_and_differentiable() -> None:
    logits = t([[[0.3, -1.2, 0.8, 0.1, -0.4], [1.1, 0.2, -0.7, 0.0, 0.5]]]).requires_grad_(True)
    kept = torch.tensor([[[0, 2, 3], [4, 0, -1]]])
    rows = torch.tensor([[True, True]])
    targets = torch.tensor([[2, 4]])
    out = keep_mask_logprobs(logits, kept, rows, targets, temperature=0.8)
    full = torch.log_softmax(logits / 0.8, -1).gather(-1, targets[..., None])[..., 0]
    assert torch.allclose(out, full - kept_log_mass(logits, kept, rows, temperature=0.8))

    def f(x: torch.Tensor) -> torch.Tensor:
        return keep_mask_logprobs(x, kept, rows, targets, temperature=0.8)

    assert torch.autograd.gradcheck(f, (logits,), eps=1e-6, atol=1e-8)


def test_keep_mask_bad_input() -> None:
    rows = torch.tensor([[True, True]])
    targets = torch.tensor([[0, 0]])
    cases = [
        (torch.tensor([[[4], [0]]]), rows, ValueError, r"kept_ids must lie in \[0, 4\)"),
        (torch.tensor([[[-2], [0]]]), rows, ValueError, "kept_ids must lie"),
        (torch.tensor([[[-1], [0]]]), rows, ValueError, "empty kept set"),
        (torch.tensor([[[1], [0]]]).int(), rows, TypeError, "int64"),
        (torch.tensor([[[1]]]), rows, ValueError, "kept_ids must have shape"),
        (torch.tensor([[[1], [0]]]), rows.long(), ValueError, "kept_rows"),
    ]
    for kept, kept_rows, error, match in cases:
        with pytest.raises(error, match=match):
            keep_mask_logprobs(LOGITS, kept, kept_rows, targets)
    ok = torch.tensor([[[1], [0]]])
    with pytest.raises(ValueError, match="temperature"):
        keep_mask_logprobs(LOGITS, ok, rows, targets, temperature=0.0)
    with pytest.raises(ValueError, match="targets"):
        keep_mask_logprobs(LOGITS, ok, rows, torch.tensor([[0, 4]]))
    with pytest.raises(ValueError, match="logits"):
        keep_mask_logprobs(LOGITS[0], ok, rows, targets)
    # an empty kept set where the row is not truncated is fine (the full vocabulary applies)
    out = keep_mask_logprobs(
        LOGITS, torch.tensor([[[-1], [0]]]), torch.tensor([[False, True]]), targets
    )
    assert close(out, torch.log(t([[1 / 10, 1.0]])))


def test_keep_mask_reference_agrees_with_the_kernels_op() -> None:
    """The plain-torch helper and envgym.kernels.logprob (chunked, [N, V] never materialized)
    agree."""
    from envgym.kernels.logprob import naive_selected_logprobs, selected_logprobs

    g = torch.Generator().manual_seed(1)
    B, T, H, V = 2, 3, 4, 7
    hidden = torch.randn(B * T, H, generator=g, dtype=F64)
    weight = torch.randn(V, H, generator=g, dtype=F64)
    kept = torch.tensor([[0, 3, 5], [2, -1, -1], [1, 2, 3], [6, 0, -1], [4, 4, 4], [0, 1, 2]])
    rows = torch.tensor([True, True, False, True, True, False])
    targets = torch.tensor([3, 2, 6, 0, 4, 1])
    ours = keep_mask_logprobs(
        (hidden @ weight.T).view(B, T, V),
        kept.view(B, T, 3),
        rows.view(B, T),
        targets.view(B, T),
        temperature=0.7,
    )
    for op in (selected_logprobs, naive_selected_logprobs):
        theirs, _ = op(
            hidden, weight, targets, temperature=0.7, kept_ids=kept, kept_rows=rows, chunk_size=3
        )
        assert torch.allclose(ours.view(-1), theirs, atol=1e-10)
