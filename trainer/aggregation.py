"""Loss aggregation: per-token losses [B, T] and a mask → one scalar, in three modes.

Kept apart from the loss terms because the same aggregation serves every term (policy gradient,
KL, LM loss) and the distributed step needs its two parts (a sum and a unit count) separately.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = ["AGGREGATIONS", "Aggregation", "aggregate", "aggregate_parts"]

Aggregation = Literal["token-mean", "seq-mean-token-mean", "constant"]
AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "constant")


def aggregate_parts(
    token_loss: Tensor,  # [B, T]
    mask: Tensor,  # [B, T] bool
    aggregation: Aggregation,
    normalizer: float | None = None,
) -> tuple[Tensor, Tensor]:  # (loss_sum, n_units): loss = loss_sum / n_units
    """The loss as a sum and a unit count, so a batch split across ranks or microbatches can be
    normalized globally (``trainer.distributed`` sums both):

    * ``token-mean``: Σ_{i,t} ℓ / Σ_{i,t} m; every token weighs the same (Seed §4.2
      token-level loss)
    * ``seq-mean-token-mean``: Σ_i (Σ_t ℓ / |o_i|) / #sequences; eq. 5's 1/G Σ_i 1/|o_i| Σ_t,
      sequences without a trained token are not counted
    * ``constant``: Σ_{i,t} ℓ / normalizer; LongCat §3.2.1 (Dr. GRPO): a fixed denominator,
      e.g. #sequences × T_max, removes the length bias of per-sequence means
    """
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError("mask must be a bool tensor [B, T]")
    if token_loss.dim() != 2 or mask.shape != token_loss.shape:
        raise ValueError(
            f"token_loss {tuple(token_loss.shape)} and mask {tuple(mask.shape)} must both be [B, T]"
        )
    ell = torch.where(mask, token_loss, torch.zeros_like(token_loss))
    if aggregation == "token-mean":
        return ell.sum(), mask.sum().to(ell.dtype)
    if aggregation == "seq-mean-token-mean":
        per_seq = mask.sum(dim=1).to(ell.dtype)
        return (ell.sum(dim=1) / per_seq.clamp_min(1.0)).sum(), (per_seq > 0).sum().to(ell.dtype)
    if aggregation == "constant":
        if normalizer is None or not normalizer > 0:
            raise ValueError(f"aggregation 'constant' needs normalizer > 0, got {normalizer!r}")
        return ell.sum(), torch.tensor(float(normalizer), dtype=ell.dtype, device=ell.device)
    raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got {aggregation!r}")


def aggregate(
    token_loss: Tensor,  # [B, T]
    mask: Tensor,  # [B, T] bool
    aggregation: Aggregation,
    normalizer: float | None = None,
) -> Tensor:  # scalar
    """loss_sum / n_units of :func:`aggregate_parts`; 0 (with a graph) when nothing is trained."""
    total, units = aggregate_parts(token_loss, mask, aggregation, normalizer)
    return total / nonzero(units)


def nonzero(units: Tensor) -> Tensor:  # scalar
    """``units``, or 1 when it is 0 (nothing trained: the loss is 0 with its graph).

    Not ``clamp_min(1)``: a constant normalizer may be below 1 and must be used as given."""
    return torch.where(units > 0, units, torch.ones_like(units))
