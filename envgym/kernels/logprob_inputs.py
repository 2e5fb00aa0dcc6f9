"""Checked inputs of the selected-token log-prob op, shared by the torch and Triton versions.

:func:`check_inputs` raises a ValueError/TypeError that names the offending argument, and
returns the inputs in the form both implementations compute with:

* ``kept_ids`` deduplicated (a kept *set*: a repeated id counts once, the later copies become
  ``-1`` padding) and ``None`` when no row uses its kept set;
* ``kept_rows`` always a ``[N]`` bool tensor (all False without kept sets);
* the compute dtype: float32 for half-precision inputs (log-probs in bf16 would round a
  log-ratio by ~1e-2), float64 for float64 inputs.

The keep-sampling-mask rows (DeepSeek-V3.2 §3.1, "Keep Sampling Mask") must contain their
target: the sampler drew the target from that set, so a target outside it means the record and
the batch disagree, and the renormalized log-prob would be ``-inf``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class LogprobInputs:
    hidden: Tensor  # [N, H]
    weight: Tensor  # [V, H]
    targets: Tensor  # [N] int64
    inv_temperature: float
    kept_ids: Tensor | None  # [N, K] int64, -1 padding, no repeated id in a row; None = no kept row
    kept_rows: Tensor  # [N] bool: True where the row's kept set applies
    chunk_size: int
    with_entropy: bool
    compute_dtype: torch.dtype  # float32 or float64


def check_inputs(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float,
    kept_ids: Tensor | None,
    kept_rows: Tensor | None,
    chunk_size: int,
    with_entropy: bool,
) -> LogprobInputs:
    """Validate the arguments of ``selected_logprobs`` (see there) and normalize the kept sets."""
    _check_float_matrix("hidden", hidden)
    _check_float_matrix("weight", weight)
    n, h = hidden.shape
    v = weight.shape[0]
    if weight.shape[1] != h:
        raise ValueError(
            f"weight must have shape [V, H={h}] to match hidden {tuple(hidden.shape)}, "
            f"got {tuple(weight.shape)}"
        )
    if v == 0 or h == 0:
        raise ValueError(
            f"vocabulary and hidden size must be positive, got weight {tuple(weight.shape)}"
        )
    if weight.device != hidden.device:
        raise ValueError(f"weight is on {weight.device} but hidden is on {hidden.device}")
    _check_targets(targets, n, v, hidden.device)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a float, got {type(temperature).__name__}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size must be an int, got {type(chunk_size).__name__}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if not isinstance(with_entropy, bool):
        raise TypeError(f"with_entropy must be a bool, got {type(with_entropy).__name__}")
    ids, rows = _check_kept(kept_ids, kept_rows, targets, n, v, hidden.device)
    dtype = torch.promote_types(torch.promote_types(hidden.dtype, weight.dtype), torch.float32)
    return LogprobInputs(
        hidden=hidden,
        weight=weight,
        targets=targets,
        inv_temperature=1.0 / float(temperature),
        kept_ids=ids,
        kept_rows=rows,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        compute_dtype=dtype,
    )


def _check_float_matrix(name: str, t: object) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")


def _check_targets(targets: object, n: int, v: int, device: torch.device) -> None:
    if not isinstance(targets, Tensor):
        raise TypeError(f"targets must be a torch.Tensor, got {type(targets).__name__}")
    if targets.dtype != torch.int64:
        raise TypeError(f"targets must be int64, got {targets.dtype}")
    if targets.shape != (n,):
        raise ValueError(f"targets must have shape [N={n}], got {tuple(targets.shape)}")
    if targets.device != device:
        raise ValueError(f"targets is on {targets.device} but hidden is on {device}")
    if n and (int(targets.min()) < 0 or int(targets.max()) >= v):
        raise ValueError(
            f"targets must lie in [0, V={v}), got values in "
            f"[{int(targets.min())}, {int(targets.max())}]"
        )


def _check_kept(
    kept_ids: Tensor | None,
    kept_rows: Tensor | None,
    targets: Tensor,
    n: int,
    v: int,
    device: torch.device,
) -> tuple[Tensor | None, Tensor]:
    if kept_ids is None:
        if kept_rows is not None:
            raise ValueError("kept_rows was given without kept_ids")
        return None, torch.zeros(n, dtype=torch.bool, device=device)
    if not isinstance(kept_ids, Tensor):
        raise TypeError(f"kept_ids must be a torch.Tensor, got {type(kept_ids).__name__}")
    if kept_ids.dtype != torch.int64:
        raise TypeError(f"kept_ids must be int64, got {kept_ids.dtype}")
    if kept_ids.dim() != 2 or kept_ids.shape[0] != n or kept_ids.shape[1] < 1:
        raise ValueError(f"kept_ids must have shape [N={n}, K>=1], got {tuple(kept_ids.shape)}")
    if kept_ids.device != device:
        raise ValueError(f"kept_ids is on {kept_ids.device} but hidden is on {device}")
    if kept_rows is None:
        kept_rows = torch.ones(n, dtype=torch.bool, device=device)
    if not isinstance(kept_rows, Tensor):
        raise TypeError(f"kept_rows must be a torch.Tensor, got {type(kept_rows).__name__}")
    if kept_rows.dtype != torch.bool or kept_rows.shape != (n,):
        raise ValueError(
            f"kept_rows must be a bool tensor of shape [N={n}], got "
            f"{kept_rows.dtype} {tuple(kept_rows.shape)}"
        )
    if kept_rows.device != device:
        raise ValueError(f"kept_rows is on {kept_rows.device} but hidden is on {device}")
    if n and (int(kept_ids.min()) < -1 or int(kept_ids.max()) >= v):
        raise ValueError(
            f"kept_ids must lie in [0, V={v}) with -1 as padding, got values in "
            f"[{int(kept_ids.min())}, {int(kept_ids.max())}]"
        )
    if not bool(kept_rows.any()):
        return None, kept_rows
    ids = dedupe_rows(kept_ids)
    empty = kept_rows & ~(ids >= 0).any(dim=1)
    if bool(empty.any()):
        row = int(empty.nonzero()[0, 0])
        raise ValueError(
            f"kept_rows is True at row {row} (and {int(empty.sum()) - 1} more) "
            "with an empty kept set"
        )
    missing = kept_rows & ~(ids == targets.unsqueeze(1)).any(dim=1)
    if bool(missing.any()):
        row = int(missing.nonzero()[0, 0])
        raise ValueError(
            f"targets[{row}] = {int(targets[row])} is not in row {row}'s kept set "
            f"({int(missing.sum())} such row(s)): the record and the batch disagree"
        )
    return ids, kept_rows


def dedupe_rows(kept_ids: Tensor) -> Tensor:  # [N, K] -> [N, K]
    """Each row ascending with repeated ids replaced by -1 (so padding sorts first)."""
    ids = kept_ids.sort(dim=1).values
    if ids.shape[1] > 1:
        repeat = torch.zeros_like(ids, dtype=torch.bool)
        repeat[:, 1:] = (ids[:, 1:] == ids[:, :-1]) & (ids[:, 1:] >= 0)
        ids = ids.masked_fill(repeat, -1)
    return ids
