"""The GRPO loss as a pure function of explicit tensors and masks, diagnostics beside it.

Per trained token t of sequence i (``mask`` zeroes prompt, tool, user and padding tokens):

    r      = π_θ / π_old                                           DeepSeek-V3.2 §3.1 eq. 6
    s      = min(r·Â, clip(r, 1−ε_low, 1+ε_high)·Â)                eq. 5 with clip-higher
             (decoupled ε_low / ε_high: Seed-Thinking §4.2 eq. 1)
    s      = max(s, c·Â) where Â < 0                               dual clip (LongCat §3.2.1
             triple clip: ε_neg_high ↔ c = 1 + ε_neg_high; Ye et al. 2020)
    w      = min(π_old / π_engine, C)                              truncated IS (LongCat §3.2.1)
    M_i    = 0 if Â_i < 0 and mean_t log(π_engine/π_θ) > δ else 1  OPSM, eq. 8–9
    kl     = r·(π_ref/π_θ − log(π_ref/π_θ) − 1)                    unbiased KL, eq. 7
    nll    = −log π_θ on positive sequences                        Seed-Thinking §4.2 eq. 2
    H      = entropy of π_θ at the token (envgym.kernels.logprob)         entropy bonus, η ≥ 0
    ℓ      = −M_i·w·s + β·kl + μ·nll − η·H

Options (``LossConfig``): ``ratio_level: sequence`` replaces r by GSPO's sequence ratio
s_i = exp(mean_t log r) over the trajectory, clipped with its own ε (Qwen GSPO §4.1);
``kind: cispo`` replaces s by sg(min(r, 1+ε_high))·Â·log π_θ (MiniMax-M1 §3.1), dual clip off.

and the loss is ℓ aggregated by ``LossConfig.aggregation`` (see :func:`aggregate_parts`).  A
sequence o_i is a trajectory (one episode): ``trajectory [B]`` names the rows (record segments)
of each, so OPSM's statistic and seq-mean-token-mean run over whole episodes.  The
keep sampling mask (§3.1) is applied upstream: ``logp`` is already renormalized over the kept set
by ``envgym.kernels.logprob.selected_logprobs`` (reference:
:func:`envgym.trainer.masks.keep_mask_logprobs`).

**Non-finite inputs** are flagged, not raised, by default: values at untrained positions are
ignored (never propagate), a NaN/inf at a trained position makes the loss non-finite and is
counted in ``diagnostics["nonfinite"]``.  The GRPO trainer (envgym/trainer/update.py) skips a batch
whose engine or recomputed log-probs are non-finite at trained positions before it trains, and
an optimizer step whose loss or gradient norm is non-finite (counted in ``minibatches_skipped``
and logged); ``envgym.trainer.distributed.distributed_step`` drops a non-finite step the same way.
:func:`finite_batch` asks the same question of the inputs before a forward pass is spent, for
callers that want to check first (the trainer does not call it).  Pass
``on_nonfinite="raise"`` for a ValueError naming the input instead.  docs/LOSSES.md has the rest.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from envgym.trainer.aggregation import (
    Aggregation,
    aggregate,
    aggregate_parts,
    nonzero,
    per_trajectory,
    trajectory_index,
)
from envgym.trainer.loss_config import LossConfig
from envgym.trainer.loss_inputs import (
    Inputs,
    bool_mask,
    check_inputs,
    finite_batch,
    nonfinite_by_input,
    nonfinite_count,
    per_token_inputs,
)
from envgym.trainer.masks import opsm_mask, tis_weights

__all__ = [
    "Aggregation",
    "LossConfig",
    "aggregate",
    "aggregate_parts",
    "cispo_surrogate",
    "clipped_surrogate",
    "finite_batch",
    "grpo_loss",
    "nonfinite_count",
    "sequence_ratio",
    "unbiased_kl",
]


def clipped_surrogate(
    ratio: Tensor,  # [B, T]: r = π_θ / π_old
    adv: Tensor,  # [B, T] (or broadcastable): Â per token
    eps_low: float,
    eps_high: float,
    dual_clip: float | None,
) -> tuple[Tensor, dict[str, Tensor]]:  # (objective s [B, T] to maximize, region flags [B, T] bool)
    """s = min(r·Â, clip(r, 1−ε_low, 1+ε_high)·Â), then max(s, c·Â) where Â < 0.

    Eq. 5 with decoupled bounds (Seed-Thinking eq. 1) and the dual clip (LongCat §3.2.1).  In each
    flagged region s is a constant times Â, so its gradient w.r.t. π_θ is exactly zero:
    ``clip_high`` Â > 0, r > 1+ε_high; ``clip_low`` Â < 0, r < 1−ε_low;
    ``dual`` Â < 0, r > c.
    """
    adv = adv.expand_as(ratio)
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    obj = torch.minimum(ratio * adv, clipped * adv)
    with torch.no_grad():
        flags = {
            "clip_low": (adv < 0) & (ratio < 1.0 - eps_low),
            "clip_high": (adv > 0) & (ratio > 1.0 + eps_high),
            "dual": (adv < 0) & (ratio > (dual_clip if dual_clip is not None else math.inf)),
        }
    if dual_clip is not None:
        obj = torch.where(adv < 0, torch.maximum(obj, dual_clip * adv), obj)
    return obj, flags


def sequence_ratio(
    log_ratio: Tensor,  # [B, T]: log π_θ − log π_old (with grad through log π_θ)
    mask: Tensor,  # [B, T] bool: trained tokens
    trajectory: Tensor | None = None,  # [B] int64: segments of one episode share an id
) -> Tensor:  # [B, T]: each row's trajectory's s_i on every position
    """GSPO's sequence ratio s_i = exp((1/|o_i|) Σ_t log r_{i,t}): the geometric mean of the
    token ratios over the trajectory's trained tokens (Qwen, "Group Sequence Policy
    Optimization" §4.1, eq. 7: (π_θ(o_i)/π_old(o_i))^{1/|o_i|}).

    o_i is the whole trajectory (every segment of the episode), as for OPSM and
    seq-mean-token-mean; a trajectory without a trained token gets s = 1.  Differentiable: each
    trained token of o_i gets ∂s_i/∂log π_θ = s_i/|o_i|.
    """
    index, k = trajectory_index(trajectory, log_ratio.shape[0], log_ratio.device)
    lr = torch.where(mask, log_ratio, torch.zeros_like(log_ratio))
    total = per_trajectory(lr.sum(dim=1), index, k)
    count = per_trajectory(mask.sum(dim=1).to(lr.dtype), index, k)
    s = torch.exp(total / count.clamp_min(1.0))[index]  # [B]
    return s.unsqueeze(1).expand_as(log_ratio)


def cispo_surrogate(
    logp: Tensor,  # [B, T]: log π_θ (with grad)
    old_logp: Tensor,  # [B, T]: log π_old
    adv: Tensor,  # [B, T] (or broadcastable)
    eps_high: float,
) -> tuple[Tensor, dict[str, Tensor]]:  # (objective [B, T] to maximize, region flags)
    """CISPO (MiniMax-M1 report §3.1): sg(r̂)·Â·log π_θ with r̂ = min(r, 1 + ε_high).

    The IS weight is clipped and stop-gradient, so every token keeps the gradient r̂·Â·∇log π_θ
    (PPO's clip zeroes it outside the trust region).  The report sets no lower bound on the
    weight (ε_low^IS large), so only ε_high applies here.  The value returned is r̂·Â (written
    sg(r̂)·Â·exp(log π_θ − sg(log π_θ)), whose gradient is exactly the report's), so ``pg_loss``
    reads on the scale of the clipped surrogate instead of carrying log π_θ's magnitude.
    ``clip_high`` flags tokens whose weight was capped (their gradient is not zero).
    """
    with torch.no_grad():
        ratio = torch.exp(logp - old_logp)
        weight = ratio.clamp(max=1.0 + eps_high)
    adv = adv.expand_as(logp)
    obj = weight * adv * torch.exp(logp - logp.detach())
    with torch.no_grad():
        none = torch.zeros_like(ratio, dtype=torch.bool)
        flags = {"clip_low": none, "clip_high": ratio > 1.0 + eps_high, "dual": none}
    return obj, flags


def unbiased_kl(
    logp: Tensor,  # [B, T]: log π_θ
    old_logp: Tensor,  # [B, T]: log π_old (the tokens were sampled from it)
    ref_logp: Tensor,  # [B, T]: log π_ref
) -> Tensor:  # [B, T]
    """DeepSeek-V3.2 eq. 7: (π_θ/π_old)·(π_ref/π_θ − log(π_ref/π_θ) − 1).

    The K3 estimator importance-weighted by π_θ/π_old so that, for tokens drawn from π_old, its
    gradient is unbiased: ∂/∂logp = (π_θ/π_old)·(log π_θ − log π_ref).  Differentiable in
    ``logp``.
    """
    d = ref_logp - logp
    return torch.exp(logp - old_logp) * (torch.exp(d) - d - 1.0)


def grpo_loss(
    logp: Tensor,  # [B, T]: log π_θ of the sampled tokens (keep-mask renormalized); has grad
    old_logp: Tensor,  # [B, T]: log π_old (trainer recompute at the rollout weights, or engine's)
    advantages: Tensor,  # [B]: Â per sequence (envgym.trainer.advantages.group_advantages)
    mask: Tensor,  # [B, T] bool or 0/1: trained tokens (policy-sampled, not overlong/padding)
    cfg: LossConfig,
    *,
    ref_logp: Tensor | None = None,  # [B, T]: log π_ref, needed when cfg.kl_beta > 0
    engine_logp: Tensor | None = None,  # [B, T]: the sampler's log-probs (TIS, OPSM's π_old)
    rewards_positive: Tensor | None = None,  # [B] bool (or rewards: positive where > 0)
    trajectory: Tensor | None = None,  # [B] int64: rows sharing an id are one episode's segments
    entropy: Tensor | None = None,  # [B, T]: H of π_θ per token, with grad; for entropy_coef
    on_nonfinite: Literal["flag", "raise"] = "flag",
) -> tuple[Tensor, dict[str, Tensor]]:
    """The GRPO loss (to minimize) and detached 0-d diagnostics; see the module docstring.

    Diagnostics: ``loss_sum``/``n_units`` (loss = loss_sum / n_units, for global normalizers),
    ``pg_loss``, ``kl``, ``lm_loss``, ``entropy_bonus`` (each aggregated like the loss, so
    loss = pg_loss + β·kl + μ·lm_loss − η·entropy_bonus), ``clip_low_fraction``,
    ``clip_high_fraction``, ``dual_clip_fraction`` and ``ratio_mean`` (over trained tokens), ``opsm_masked_fraction`` and ``opsm_kl`` (over
    trajectories with a trained token), ``tis_ratio_mean``, ``tis_ratio_mean_truncated``,
    ``tis_truncated_fraction`` (over trained tokens), ``tokens``, ``sequences`` (trajectories
    with a trained token), ``nonfinite``.  ``trajectory`` (None: every row its own) groups the
    rows of one episode; their advantages must agree.  Only ``logp`` (and ``entropy``, when
    ``entropy_coef > 0``) receive gradients; the other inputs are constants.
    """
    if not isinstance(cfg, LossConfig):
        raise TypeError(f"cfg must be a LossConfig, not {type(cfg).__name__}")
    if on_nonfinite not in ("flag", "raise"):
        raise ValueError(f"on_nonfinite must be 'flag' or 'raise', got {on_nonfinite!r}")
    per_token = per_token_inputs(logp, old_logp, ref_logp, engine_logp)
    if entropy is not None:
        per_token["entropy"] = entropy
    per_seq: Inputs = {"advantages": advantages, "rewards_positive": rewards_positive}
    check_inputs(logp, per_token, per_seq)
    if not advantages.is_floating_point():
        raise TypeError(f"advantages must be a floating tensor [B], not {advantages.dtype}")
    m = bool_mask(mask, logp.shape)
    index, n_traj_all = trajectory_index(trajectory, logp.shape[0], logp.device)
    if trajectory is not None:
        _one_advantage_per_trajectory(advantages, m, index, n_traj_all)
    if cfg.kl_beta > 0 and ref_logp is None:
        raise ValueError(f"kl_beta = {cfg.kl_beta} > 0 needs ref_logp (the reference log-probs)")
    if cfg.entropy_coef > 0 and entropy is None:
        raise ValueError(
            f"entropy_coef = {cfg.entropy_coef} > 0 needs entropy (the per-token entropies)"
        )
    if cfg.lm_coef > 0 and rewards_positive is None:
        raise ValueError(f"lm_coef = {cfg.lm_coef} > 0 needs rewards_positive (which are positive)")
    bad = nonfinite_by_input(m, per_token, per_seq)
    if on_nonfinite == "raise" and any(bad.values()):
        counts = ", ".join(f"{k}: {v}" for k, v in bad.items() if v)
        raise ValueError(f"non-finite inputs at trained positions: {counts}")

    def clean(t: Tensor) -> Tensor:  # untrained positions may hold anything (padding, -inf)
        return torch.where(m, t, torch.zeros_like(t))

    lp, old = clean(logp), clean(old_logp.detach())
    adv = advantages.detach().to(lp.dtype)
    seq_has = m.any(dim=1)
    adv = torch.where(seq_has, adv, torch.zeros_like(adv))
    if cfg.ratio_level == "sequence":  # GSPO: one ratio per trajectory, its own clip range
        ratio = sequence_ratio(lp - old, m, trajectory)
        eps_low, eps_high = cfg.seq_eps_low, cfg.seq_eps_high
    else:
        ratio = torch.exp(lp - old)
        eps_low, eps_high = cfg.eps_low, cfg.eps_high
    if cfg.kind == "cispo":
        obj, flags = cispo_surrogate(lp, old, adv.unsqueeze(1), cfg.eps_high)
    else:
        obj, flags = clipped_surrogate(ratio, adv.unsqueeze(1), eps_low, eps_high, cfg.dual_clip)

    engine = clean(engine_logp.detach()) if engine_logp is not None else None
    sample_logp = engine if engine is not None else old  # eq. 9's π_old: what was sampled from
    keep, divergence = opsm_mask(
        lp.detach(), sample_logp, adv, m, cfg.opsm_delta or 0.0, trajectory
    )
    if cfg.opsm_delta is None:
        keep = torch.ones_like(keep)
    if engine is not None:
        # without a cap the ratio is reported (before = after) but not applied
        trunc, raw = tis_weights(old, engine, cfg.tis_cap if cfg.tis_cap is not None else math.inf)
        w = trunc if cfg.tis_cap is not None else torch.ones_like(lp)
    else:  # no engine log-probs: π_old is the engine's, the ratio is 1 by definition
        trunc = raw = w = torch.ones_like(lp)
    pg_tok = -(keep.unsqueeze(1).to(lp.dtype) * w * obj)

    if ref_logp is not None:
        kl_tok = unbiased_kl(lp, old, clean(ref_logp.detach()))
    else:
        kl_tok = torch.zeros_like(lp)
    if rewards_positive is not None:
        pos = rewards_positive
        if pos.dtype != torch.bool:
            pos = pos.detach() > 0
        lm_tok = -lp * pos.unsqueeze(1).to(lp.dtype)
    else:
        lm_tok = torch.zeros_like(lp)

    ent_tok = clean(entropy) if entropy is not None else torch.zeros_like(lp)

    token_loss = pg_tok
    if cfg.kl_beta > 0:
        token_loss = token_loss + cfg.kl_beta * kl_tok
    if cfg.lm_coef > 0:
        token_loss = token_loss + cfg.lm_coef * lm_tok
    if cfg.entropy_coef > 0:  # a bonus: higher entropy lowers the loss, masked like the rest
        token_loss = token_loss - cfg.entropy_coef * ent_tok
    loss_sum, n_units = aggregate_parts(token_loss, m, cfg.aggregation, cfg.normalizer, trajectory)
    loss = loss_sum / nonzero(n_units)

    with torch.no_grad():
        tokens = m.sum().to(lp.dtype)
        # per trajectory: a row's keep and divergence are its trajectory's (opsm_mask)
        traj_has = per_trajectory(seq_has.to(lp.dtype), index, n_traj_all) > 0  # [K]
        traj_masked = per_trajectory((seq_has & ~keep).to(lp.dtype), index, n_traj_all) > 0
        traj_div = torch.zeros(n_traj_all, dtype=lp.dtype, device=lp.device)
        traj_div = traj_div.scatter(0, index, divergence.to(lp.dtype))  # 0 for empty ones
        n_seq = traj_has.sum().to(lp.dtype)

        def token_mean(x: Tensor) -> Tensor:
            x = torch.where(m, x.to(lp.dtype), torch.zeros_like(lp))
            return x.sum() / tokens.clamp_min(1.0)

        def part(x: Tensor) -> Tensor:
            return aggregate(x.detach(), m, cfg.aggregation, cfg.normalizer, trajectory)

        diagnostics = {
            "loss_sum": loss_sum.detach(),
            "n_units": n_units.detach(),
            "pg_loss": part(pg_tok),
            "kl": part(kl_tok),
            "lm_loss": part(lm_tok),
            "entropy_bonus": part(ent_tok),
            "clip_low_fraction": token_mean(flags["clip_low"]),
            "clip_high_fraction": token_mean(flags["clip_high"]),
            "dual_clip_fraction": token_mean(flags["dual"]),
            "ratio_mean": token_mean(ratio.detach()),
            "opsm_masked_fraction": traj_masked.sum().to(lp.dtype) / n_seq.clamp_min(1.0),
            "opsm_kl": traj_div.sum() / n_seq.clamp_min(1.0),  # 0 for empty trajectories
            "tis_ratio_mean": token_mean(raw),
            "tis_ratio_mean_truncated": token_mean(trunc),
            "tis_truncated_fraction": token_mean(raw > trunc),
            "tokens": tokens,
            "sequences": n_seq,
            "nonfinite": torch.tensor(float(sum(bad.values())), dtype=lp.dtype),
        }
    return loss, diagnostics


def _one_advantage_per_trajectory(
    advantages: Tensor,  # [B]
    mask: Tensor,  # [B, T] bool
    index: Tensor,  # [B] int64: trajectory_index
    count: int,  # K
) -> None:
    """ValueError when two trained rows of one trajectory carry different advantages: the rows
    are segments of one episode, scored by one reward (a caller that mixed episodes up)."""
    rows = mask.any(dim=1)
    if not bool(rows.any()):
        return
    a, i = advantages.detach()[rows], index[rows]
    hi = torch.full((count,), -math.inf, dtype=a.dtype, device=a.device)
    lo = torch.full((count,), math.inf, dtype=a.dtype, device=a.device)
    hi = hi.scatter_reduce(0, i, a, reduce="amax")
    lo = lo.scatter_reduce(0, i, a, reduce="amin")
    differ = (hi != lo) & torch.isfinite(hi) & torch.isfinite(lo)
    if bool(differ.any()):
        raise ValueError(
            f"{int(differ.sum())} trajectory(ies) have rows with different advantages: the "
            "segments of one episode share its advantage"
        )
