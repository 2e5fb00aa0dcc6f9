"""Padding-free sequence packing (``packing: true``): a microbatch's records as one row.

A :class:`~envgym.trainer.batch.TrainBatch` is right-padded ``[B, T]``; a forward over it spends
``B·T − Σ n_b`` positions on padding.  Packed, the real tokens of every row are concatenated
into one row of ``N = Σ n_b`` tokens with

* position ids that restart at 0 for each record (RoPE sees each record where it was);
* attention that never crosses records: block-diagonal causal.  With no mask and reset position
  ids, transformers' mask builder (``masking_utils.find_packed_sequence_indices``) makes exactly
  that mask for sdpa/eager/flex attention and the flash kernels run varlen, so the model class
  picks its own implementation (sliding windows included).

With a shared prefix (envgym/trainer/policy.py: the rows' common first ``p`` tokens run once) the
rows' tails are packed after it: tail tokens attend to the whole prefix and causally within their
own record (:func:`prefix_block_mask`, an explicit 4-D mask; transformers does not infer packing
over a KV cache).

The loss still sees ``[B, T]`` tensors: :attr:`PackedRow.index` maps each real position of the
padded batch to its hidden state in the packed output, so the trained positions are gathered in
the same row-major order the padded path uses (kept sets, scatter back) and nothing downstream
changes.  :func:`padding_report` counts the positions each layout runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from envgym.trainer.microbatches import balanced_microbatches


@dataclass(frozen=True)
class PackedRow:
    """One packed row of a batch's real tokens (after a shared prefix of ``prefix`` tokens)."""

    input_ids: Tensor  # [1, N] int64: the rows' tokens from position ``prefix`` on, row after row
    position_ids: Tensor  # [1, N] int64: each token's position in its own record
    seq_ids: Tensor  # [N] int64: which row (record) each token comes from
    index: Tensor  # [B, T] int64: where position t of row b sits in cat(prefix, packed); -1 = pad
    routes: Tensor | None  # [1, N, L, k] the rows' MoE routes, packed the same way
    prefix: int

    @property
    def tokens(self) -> int:
        return int(self.input_ids.shape[1])


def pack(
    input_ids: Tensor, attention_mask: Tensor, routes: Tensor | None = None, *, prefix: int = 0
) -> PackedRow:
    """Pack right-padded ``input_ids [B, T]`` (real where ``attention_mask`` is 1) into one row,
    leaving out each row's first ``prefix`` tokens (shared, run once by the caller)."""
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} "
            "must be one [B, T] shape"
        )
    real = attention_mask > 0
    lengths = real.sum(dim=1)
    B, T = input_ids.shape
    positions = torch.arange(T, device=input_ids.device).expand(B, -1)
    if not bool((real == (positions < lengths[:, None])).all()):
        raise ValueError("packing needs right-padded rows (real tokens first, then padding)")
    if prefix < 0 or bool((lengths <= prefix).any()):
        raise ValueError(f"a prefix of {prefix} tokens leaves a row with nothing of its own")
    own = real & (positions >= prefix)  # [B, T]: the tokens that go into the packed row
    tail = (lengths - prefix).clamp_min(0)
    offsets = torch.cumsum(tail, 0) - tail  # [B]: where each row's tail starts in the row
    index = torch.where(
        positions < prefix, positions, prefix + offsets[:, None] + positions - prefix
    )
    index = torch.where(real, index, torch.full_like(index, -1))
    rows = torch.arange(B, device=input_ids.device).expand(T, B).t()
    packed_routes = routes[own].unsqueeze(0) if routes is not None else None
    return PackedRow(
        input_ids=input_ids[own].unsqueeze(0),
        position_ids=positions[own].unsqueeze(0),
        seq_ids=rows[own],
        index=index,
        routes=packed_routes,
        prefix=prefix,
    )


def prefix_block_mask(row: PackedRow, *, additive: torch.dtype | None = None) -> Tensor:
    """``[1, 1, N, prefix + N]``: packed token i may see every prefix position and the earlier
    tokens of its own record.  Boolean (True = attend; sdpa) or, with ``additive`` (a float
    dtype; eager attention), 0 where allowed and the dtype's minimum elsewhere."""
    seq = row.seq_ids
    n = seq.shape[0]
    k = torch.arange(n, device=seq.device)
    own = (seq[:, None] == seq[None, :]) & (k[None, :] <= k[:, None])  # [N, N]
    allowed = torch.cat([torch.ones(n, row.prefix, dtype=torch.bool, device=seq.device), own], 1)
    allowed = allowed[None, None]
    if additive is None:
        return allowed
    zero = torch.zeros((), dtype=additive, device=seq.device)
    return torch.where(allowed, zero, torch.finfo(additive).min)


def padding_report(
    lengths: Sequence[int], micro_tokens: int, *, prefix: int = 0
) -> dict[str, float]:
    """Positions through the model and the share of them that is padding, for ``lengths``
    (each sample's tokens) split into microbatches as the update splits them, padded vs packed.

    ``prefix``: tokens every sample shares (a GRPO group's prompt), run once per microbatch by
    the shared-prefix path, padded or packed.  Keys: ``padded_positions``, ``padded_pad_share``,
    ``packed_positions``, ``packed_pad_share`` (0: a packed row holds no padding),
    ``microbatches_padded``, ``microbatches_packed`` and ``positions_ratio`` (packed / padded).
    """
    if not lengths:
        raise ValueError("padding_report needs at least one length")
    if prefix < 0 or prefix >= min(lengths):
        raise ValueError(f"prefix {prefix} must be in [0, shortest length {min(lengths)})")
    padded = balanced_microbatches(lengths, micro_tokens)
    packed = balanced_microbatches(lengths, micro_tokens, packed=True)
    real = sum(lengths)
    pad_run = sum(prefix + len(b) * (max(lengths[i] for i in b) - prefix) for b in padded)
    real_padded = sum(prefix + sum(lengths[i] - prefix for i in b) for b in padded)
    pack_run = sum(prefix + sum(lengths[i] - prefix for i in b) for b in packed)
    assert real_padded <= real
    return {
        "padded_positions": float(pad_run),
        "padded_pad_share": 1.0 - real_padded / pad_run,
        "packed_positions": float(pack_run),
        "packed_pad_share": 0.0,
        "microbatches_padded": float(len(padded)),
        "microbatches_packed": float(len(packed)),
        "positions_ratio": pack_run / pad_run if pad_run else math.nan,
    }
