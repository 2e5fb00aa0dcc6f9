"""Input checks for :func:`envgym.trainer.losses.grpo_loss`: shapes, the mask, non-finite values.

The trainer skips a batch whose inputs hold NaN/inf where they would be used (trained positions
of log-probs, advantages of sequences with a trained token): :func:`finite_batch` answers that
before the update, and ``grpo_loss`` reports the same count as ``diagnostics["nonfinite"]``.
Values at untrained positions (padding, prompt and tool tokens) are never used, so they may hold
anything, including −inf.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["bool_mask", "check_inputs", "finite_batch", "nonfinite_by_input", "nonfinite_count"]


def bool_mask(mask: object, shape: torch.Size) -> Tensor:  # [B, T] bool
    """``mask`` as bool, checked: a tensor of ``shape`` holding only 0/1 (or already bool)."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor [B, T], not {type(mask).__name__}")
    if mask.shape != shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)}, logp {tuple(shape)}")
    if mask.dtype == torch.bool:
        return mask
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0 and 1 (or be bool)")
    return mask != 0


Inputs = dict[str, "Tensor | None"]


def check_inputs(logp: Tensor, per_token: Inputs, per_seq: Inputs) -> None:
    if not isinstance(logp, Tensor) or logp.dim() != 2 or not logp.is_floating_point():
        got = tuple(logp.shape) if isinstance(logp, Tensor) else type(logp).__name__
        raise ValueError(f"logp must be a floating tensor [B, T], got {got}")
    for name, t in per_token.items():
        if t is None:
            continue
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor [B, T]")
        if t.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, logp {tuple(logp.shape)}")
    for name, t in per_seq.items():
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a tensor [B]")
        if t.shape != logp.shape[:1]:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected [B] = [{logp.shape[0]}]")


def nonfinite_by_input(mask: Tensor, per_token: Inputs, per_seq: Inputs) -> dict[str, int]:
    """Count of NaN/inf values per input at trained positions (sequences with a trained token)."""
    counts: dict[str, int] = {}
    has_tokens = mask.any(dim=1)
    for name, t in per_token.items():
        if t is not None:
            counts[name] = int((mask & ~torch.isfinite(t)).sum())
    for name, t in per_seq.items():
        if t is not None and t.is_floating_point():
            counts[name] = int((has_tokens & ~torch.isfinite(t)).sum())
    return counts


def per_token_inputs(
    logp: Tensor, old_logp: Tensor, ref_logp: Tensor | None, engine_logp: Tensor | None
) -> Inputs:
    return {"logp": logp, "old_logp": old_logp, "ref_logp": ref_logp, "engine_logp": engine_logp}


def nonfinite_count(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    ref_logp: Tensor | None = None,
    engine_logp: Tensor | None = None,
) -> int:
    """How many NaN/inf values the inputs of ``grpo_loss`` hold where they would be used."""
    per_token = per_token_inputs(logp, old_logp, ref_logp, engine_logp)
    per_seq: Inputs = {"advantages": advantages}
    check_inputs(logp, per_token, per_seq)
    return sum(nonfinite_by_input(bool_mask(mask, logp.shape), per_token, per_seq).values())


def finite_batch(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    ref_logp: Tensor | None = None,
    engine_logp: Tensor | None = None,
) -> bool:
    """True when every value ``grpo_loss`` would use is finite (else the trainer skips the batch)."""
    kw = {"ref_logp": ref_logp, "engine_logp": engine_logp}
    return nonfinite_count(logp, old_logp, advantages, mask, **kw) == 0
