"""Group-relative advantages: Â = R − mean(R) within each GRPO group (optionally / std).

GRPO (DeepSeek-V3.2 §3.1, eq. 5) samples a group {o_1..o_G} per prompt and scores every token of
o_i with one advantage Â_i computed from the group's rewards alone (no value model).  The default
is Â = R − mean(R) without the std division: dividing by the group's std up-weights prompts that
are nearly all-correct or all-wrong (a difficulty bias), and LongCat §3.2 / AM-Thinking train
without it; ``normalize_std=True`` gives the classic DeepSeekMath GRPO form.

Groups may be ragged (an errored episode dropped from a group): pass ``valid`` to exclude padding
entries from the statistics; they get advantage 0.  Non-finite rewards in valid entries raise (the
trainer drops such groups first — :func:`finite_groups` says which).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["finite_groups", "group_advantages"]


def group_advantages(
    rewards: Tensor,  # [G, n]: row g = the n samples of prompt g
    *,
    normalize_std: bool = False,
    eps: float = 1e-6,
    valid: Tensor | None = None,  # [G, n] bool: False = padding (ragged groups)
) -> Tensor:  # [G, n], floating; 0 at invalid entries
    """Â[g, j] = R[g, j] − mean_j R[g, :]  (/ (std_j R[g, :] + eps) when ``normalize_std``).

    Mean and std run over the valid entries of each row; std is the population std (divide by the
    group's count, not count − 1) so that a one-sample group gives Â = 0 instead of NaN.
    Integer or bool rewards are promoted to the default float dtype.
    """
    if not isinstance(rewards, Tensor):
        raise TypeError(f"rewards must be a torch.Tensor [G, n], not {type(rewards).__name__}")
    if rewards.dim() != 2 or rewards.shape[1] == 0:
        raise ValueError(f"rewards must have shape [G, n] with n ≥ 1, got {tuple(rewards.shape)}")
    if not isinstance(normalize_std, bool):
        raise TypeError(f"normalize_std must be a bool, not {type(normalize_std).__name__}")
    number = isinstance(eps, (int, float)) and not isinstance(eps, bool)
    if not number or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number ≥ 0, got {eps!r}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if valid is None:
        valid = torch.ones_like(rewards, dtype=torch.bool)
    else:
        if not isinstance(valid, Tensor) or valid.dtype != torch.bool:
            raise TypeError("valid must be a bool tensor [G, n]")
        if valid.shape != rewards.shape:
            raise ValueError(
                f"valid has shape {tuple(valid.shape)}, rewards {tuple(rewards.shape)}"
            )
    bad = (valid & ~torch.isfinite(rewards)).any(dim=1)
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        raise ValueError(f"rewards of groups {rows} are not finite (NaN/inf); drop them first")
    r = torch.where(valid, rewards, torch.zeros_like(rewards))  # padding may hold NaN
    w = valid.to(r.dtype)
    count = w.sum(dim=1, keepdim=True).clamp_min(1.0)  # an all-padding row: Â = 0
    mean = r.sum(dim=1, keepdim=True) / count
    adv = (r - mean) * w
    if normalize_std:
        std = ((adv**2).sum(dim=1, keepdim=True) / count).sqrt()
        scale = std + eps
        # eps = 0 and an all-equal group: 0 / 0; such a group carries no signal, keep Â = 0
        adv = torch.where(scale > 0, adv / torch.where(scale > 0, scale, 1.0), adv)
    return adv


def finite_groups(rewards: Tensor, valid: Tensor | None = None) -> Tensor:  # [G] bool
    """True for each group whose (valid) rewards are all finite: the groups safe to train on."""
    if not isinstance(rewards, Tensor) or rewards.dim() != 2:
        raise ValueError("rewards must be a tensor of shape [G, n]")
    if rewards.is_floating_point():
        ok = torch.isfinite(rewards)
    else:
        ok = torch.ones_like(rewards, dtype=torch.bool)
    if valid is not None:
        if not isinstance(valid, Tensor) or valid.dtype != torch.bool:
            raise ValueError(f"valid must be a bool tensor of shape {tuple(rewards.shape)}")
        if valid.shape != rewards.shape:
            raise ValueError(
                f"valid has shape {tuple(valid.shape)}, rewards {tuple(rewards.shape)}"
            )
        ok = ok | ~valid
    return ok.all(dim=1)
