"""Off-policy corrections as pure functions: sequence masking, truncated IS, the keep sampling mask.

* :func:`opsm_mask` — DeepSeek-V3.2 §3.1 "Off-Policy Sequence Masking", eq. 8–9.
* :func:`tis_weights` — truncated importance sampling for the inference-engine / trainer mismatch
  (LongCat §3.2.1, "engine numerical gap": weight min(π_train / π_μ, C)).
* :func:`keep_mask_logprobs` / :func:`kept_log_mass` — DeepSeek-V3.2 §3.1 "Keep Sampling Mask":
  π_θ renormalized over the token set the sampler kept (top-p / top-k).  A plain-torch reference
  that materializes ``[B, T, V]``; training uses ``envgym.kernels.logprob.selected_logprobs``.

All inputs that are not π_θ are treated as constants (the results carry no gradient).
"""

from __future__ import annotations

import torch
from torch import Tensor

from envgym.trainer.aggregation import per_trajectory, trajectory_index

__all__ = ["keep_mask_logprobs", "kept_log_mass", "opsm_mask", "tis_weights"]


def opsm_mask(
    logp: Tensor,  # [B, T]: log π_θ of the sampled tokens
    sample_logp: Tensor,  # [B, T]: log π_old, the inference engine's sampling log-probs
    advantages: Tensor,  # [B]
    mask: Tensor,  # [B, T] bool: trained tokens
    delta: float,
    trajectory: Tensor | None = None,  # [B] int64: segments of one episode share an id
) -> tuple[Tensor, Tensor]:  # (keep [B] bool, divergence [B]), per row, its trajectory's value
    """M_i of DeepSeek-V3.2 eq. 9: 0 if Â_i < 0 and (1/|o_i|) Σ_t log(π_old/π_θ) > δ, else 1.

    ``divergence[i]`` is that per-sequence KL(π_old‖π_θ) estimate (the mean over the sequence's
    trained tokens; 0 for a sequence with none).  Only negative-advantage sequences are masked:
    per §3.1 the model learns most from its own mistakes, but highly off-policy negatives mislead.
    π_old is the *engine's* log-prob so the estimate covers both staleness and engine mismatch.

    o_i is a whole trajectory: with ``trajectory`` the sum and |o_i| run over every segment of
    the episode, and every row of it gets the same M_i and divergence (eq. 9 masks a sampled
    output, not a piece the context policy cut from it).  Without it each row is its own.
    """
    with torch.no_grad():
        diff = torch.where(mask, sample_logp - logp, torch.zeros_like(logp))
        if trajectory is None:
            count = mask.sum(dim=1).clamp_min(1).to(logp.dtype)
            divergence = diff.sum(dim=1) / count
        else:
            index, k = trajectory_index(trajectory, logp.shape[0], logp.device)
            tokens = per_trajectory(mask.sum(dim=1).to(logp.dtype), index, k)
            total = per_trajectory(diff.sum(dim=1), index, k)
            divergence = (total / tokens.clamp_min(1.0))[index]
        keep = ~((advantages < 0) & (divergence > delta))
    return keep, divergence


def tis_weights(
    old_logp: Tensor,  # [B, T]: log π_old from the trainer (recomputed at the rollout weights)
    engine_logp: Tensor,  # [B, T]: log π_μ, the inference engine's sampling log-probs
    cap: float,
) -> tuple[Tensor, Tensor]:  # (truncated weights [B, T], raw ratios [B, T])
    """Truncated IS weight min(π_old_trainer / π_engine, C) per token (LongCat §3.2.1).

    The raw ratio corrects for sampling from the engine's numerics while optimizing the trainer's
    π_old; truncating at C bounds its variance (Ionides 2008, cited by LongCat).  Detached: the
    weight multiplies the policy-gradient term but is not itself optimized.
    """
    with torch.no_grad():
        ratio = torch.exp(old_logp - engine_logp)
        return ratio.clamp(max=cap), ratio


def _kept_bool(kept_ids: Tensor, kept_rows: Tensor, shape: tuple[int, int, int]) -> Tensor:
    """[B, T, V] bool: True on the kept set where ``kept_rows``, on every id elsewhere."""
    B, T, V = shape
    if kept_ids.dtype != torch.int64:
        raise TypeError(f"kept_ids must be int64, not {kept_ids.dtype}")
    if kept_ids.dim() != 3 or kept_ids.shape[:2] != (B, T):
        raise ValueError(f"kept_ids must have shape [B={B}, T={T}, K], got {tuple(kept_ids.shape)}")
    if kept_rows.dtype != torch.bool or kept_rows.shape != (B, T):
        raise ValueError(
            f"kept_rows must be a bool tensor of shape [{B}, {T}], got "
            f"{kept_rows.dtype} {tuple(kept_rows.shape)}"
        )
    if kept_ids.numel() and (int(kept_ids.min()) < -1 or int(kept_ids.max()) >= V):
        raise ValueError(
            f"kept_ids must lie in [0, {V}) with -1 as padding; got values in "
            f"[{int(kept_ids.min())}, {int(kept_ids.max())}]"
        )
    keep = torch.zeros(B, T, V + 1, dtype=torch.bool, device=kept_ids.device)
    # padding (-1) lands in the extra column V, dropped below; duplicates are harmless
    keep.scatter_(2, torch.where(kept_ids < 0, V, kept_ids), True)
    keep = keep[..., :V]
    empty = kept_rows & ~keep.any(dim=2)
    if bool(empty.any()):
        n = int(empty.sum())
        raise ValueError(f"kept_rows is True at {n} position(s) with an empty kept set")
    return keep | ~kept_rows.unsqueeze(2)


def _check_logits(logits: Tensor, temperature: float) -> None:
    if not isinstance(logits, Tensor) or logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError("logits must be a floating tensor of shape [B, T, V]")
    number = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not number or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}")


def kept_log_mass(
    logits: Tensor,  # [B, T, V]
    kept_ids: Tensor,  # [B, T, K] int64, -1 = padding
    kept_rows: Tensor,  # [B, T] bool: True where the kept set applies
    *,
    temperature: float = 1.0,
) -> Tensor:  # [B, T]: log Σ_{v ∈ kept} softmax(logits / T)_v; 0 where kept_rows is False
    """The log of the probability mass the sampler's top-p/top-k truncation kept."""
    _check_logits(logits, temperature)
    B, T, V = logits.shape  # 3-D: _check_logits
    keep = _kept_bool(kept_ids, kept_rows, (B, T, V))
    z = logits / temperature
    neg_inf = torch.full_like(z, float("-inf"))
    return torch.logsumexp(torch.where(keep, z, neg_inf), dim=2) - torch.logsumexp(z, dim=2)


def keep_mask_logprobs(
    logits: Tensor,  # [B, T, V]
    kept_ids: Tensor,  # [B, T, K] int64, -1 = padding
    kept_rows: Tensor,  # [B, T] bool: True where the kept set applies, False = full vocabulary
    targets: Tensor | None = None,  # [B, T] int64: the sampled tokens
    *,
    temperature: float = 1.0,
) -> Tensor:  # [B, T]
    """log π_θ(target) renormalized over the kept set (DeepSeek-V3.2 §3.1 Keep Sampling Mask).

    With ``targets``: log softmax(logits/T)[target] − log(kept mass) where ``kept_rows`` is True
    (−inf if the target is outside its kept set: the sampler could not have drawn it), the plain
    log-softmax elsewhere.  Without ``targets``: :func:`kept_log_mass` (the renormalizer itself).
    Reference implementation for tests: materializes the [B, T, V] log-softmax.
    """
    if targets is None:
        return kept_log_mass(logits, kept_ids, kept_rows, temperature=temperature)
    _check_logits(logits, temperature)
    B, T, V = logits.shape
    keep = _kept_bool(kept_ids, kept_rows, (B, T, V))
    if not isinstance(targets, Tensor) or targets.dtype != torch.int64 or targets.shape != (B, T):
        raise ValueError(f"targets must be an int64 tensor of shape [{B}, {T}]")
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= V):
        raise ValueError(f"targets must lie in [0, {V})")
    z = logits / temperature
    masked = torch.where(keep, z, torch.full_like(z, float("-inf")))
    logp = torch.log_softmax(masked, dim=2)
    return logp.gather(2, targets.unsqueeze(2)).squeeze(2)
