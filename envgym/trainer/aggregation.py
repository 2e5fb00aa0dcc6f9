"""Loss aggregation: per-token losses [B, T] and a mask → one scalar, in three modes.

Kept apart from the loss terms because the same aggregation serves every term (policy gradient,
KL, LM loss) and the distributed step needs its two parts (a sum and a unit count) separately.

A *sequence* here is a trajectory (one episode), not a row: a context policy may split one
episode into several record segments, each its own row, and ``trajectory [B]`` says which rows
belong together.  Without it every row is its own trajectory.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "aggregate",
    "aggregate_parts",
    "per_trajectory",
    "trajectory_index",
]

Aggregation = Literal["token-mean", "seq-mean-token-mean", "constant"]
AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "constant")


def trajectory_index(
    trajectory: Tensor | None,  # [B] int64: rows with one id are segments of one episode
    rows: int,
    device: torch.device,
) -> tuple[Tensor, int]:  # (index [B] int64 in [0, K), K trajectories)
    """Each row's trajectory as a dense index (ids in any order and range); ``None``: one
    trajectory per row."""
    if trajectory is None:
        return torch.arange(rows, device=device), rows
    if not isinstance(trajectory, Tensor) or trajectory.dtype != torch.int64:
        raise TypeError("trajectory must be an int64 tensor [B]")
    if trajectory.shape != (rows,):
        raise ValueError(f"trajectory has shape {tuple(trajectory.shape)}, expected [B] = [{rows}]")
    ids, index = torch.unique(trajectory, return_inverse=True)
    return index.to(device), int(ids.numel())


def per_trajectory(
    values: Tensor,  # [B]: one value per row
    index: Tensor,  # [B] int64: trajectory_index
    count: int,  # K
) -> Tensor:  # [K]: the sum over each trajectory's rows
    return torch.zeros(count, dtype=values.dtype, device=values.device).index_add(0, index, values)


def aggregate_parts(
    token_loss: Tensor,  # [B, T]
    mask: Tensor,  # [B, T] bool
    aggregation: Aggregation,
    normalizer: float | None = None,
    trajectory: Tensor | None = None,  # [B] int64: segments of one episode share an id
) -> tuple[Tensor, Tensor]:  # (loss_sum, n_units): loss = loss_sum / n_units
    """The loss as a sum and a unit count, so a batch split across ranks or microbatches can be
    normalized globally (``envgym.trainer.distributed`` sums both):

    * ``token-mean``: Σ_{i,t} ℓ / Σ_{i,t} m; every token weighs the same (Seed §4.2
      token-level loss)
    * ``seq-mean-token-mean``: Σ_i (Σ_t ℓ / |o_i|) / #trajectories; eq. 5's 1/G Σ_i 1/|o_i| Σ_t
      with o_i a whole trajectory (every row of it: |o_i| its trained tokens over all its
      segments), trajectories without a trained token are not counted
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
        per_row = mask.sum(dim=1).to(ell.dtype)
        if trajectory is None:
            return (ell.sum(dim=1) / per_row.clamp_min(1.0)).sum(), (per_row > 0).sum().to(
                ell.dtype
            )
        index, k = trajectory_index(trajectory, mask.shape[0], mask.device)
        per_traj = per_trajectory(per_row, index, k)  # [K]: |o_i| over all its segments
        total = (ell.sum(dim=1) / per_traj[index].clamp_min(1.0)).sum()
        return total, (per_traj > 0).sum().to(ell.dtype)
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
    trajectory: Tensor | None = None,  # [B] int64: segments of one episode share an id
) -> Tensor:  # scalar
    """loss_sum / n_units of :func:`aggregate_parts`; 0 (with a graph) when nothing is trained."""
    total, units = aggregate_parts(token_loss, mask, aggregation, normalizer, trajectory)
    return total / nonzero(units)


def nonzero(units: Tensor) -> Tensor:  # scalar
    """``units``, or 1 when it is 0 (nothing trained: the loss is 0 with its graph).

    Not ``clamp_min(1)``: a constant normalizer may be below 1 and must be used as given."""
    return torch.where(units > 0, units, torch.ones_like(units))
