"""Triton grouped matmul for the sorted MoE dispatch
(:func:`envgym.kernels.moe_grouped.grouped_mm`).

Rows of ``a [M, K]`` are sorted by expert; segment ``e`` (``counts[e]`` rows) is multiplied by
``w[e].T``.  One launch covers every expert:

* forward / ``∂a``: a 2-D grid over (row tile, output-column tile).  The row tiles are laid out
  per expert (``cdiv(counts[e], BM)`` tiles each, none straddling two experts) by a small
  schedule built on the device; the grid is sized by the upper bound ``cdiv(M, BM) + E`` so no
  host sync is needed, and the spare programs store nothing.  ``∂a = g @ w[e]`` is the same
  kernel reading ``w`` through transposed strides.
* ``∂w[e] = g[s]ᵀ @ a[s]``: a grid over (expert, output tile) that walks the expert's
  segment ``BM`` rows at a time.

Accumulation is float32 (float64 for float64 inputs), ``tl.dot`` at ``ieee`` precision.  On
CPU the kernels run under ``TRITON_INTERPRET=1`` (the tests).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

__all__ = ["triton_grouped_mm"]

BM, BN, BK = 32, 32, 32


def triton_grouped_mm(
    a: Tensor, w: Tensor, counts: Tensor
) -> Tensor:  # [M, K], [E, Nout, K], [E] -> [M, Nout]
    """``out[segment e] = a[segment e] @ w[e].T`` on Triton, differentiable in ``a`` and ``w``."""
    return _TritonGroupedMM.apply(a, w, counts)


def _acc(dt: torch.dtype) -> Any:
    return tl.float64 if dt == torch.float64 else tl.float32


def _schedule(counts: Tensor, m: int) -> tuple[Tensor, Tensor, Tensor, int]:
    """Per row tile: its expert (−1 = spare), first row and segment end (0 = spare); and the
    grid size.  ``searchsorted`` instead of ``repeat_interleave``: no host sync."""
    e = counts.numel()
    ends = torch.cumsum(counts, 0)
    tiles = (counts + BM - 1) // BM  # [E]
    tile_ends = torch.cumsum(tiles, 0)  # [E]
    n_tiles = triton.cdiv(m, BM) + e  # an upper bound on Σ tiles
    idx = torch.arange(n_tiles, device=counts.device)
    expert = torch.searchsorted(tile_ends, idx, right=True)  # [n_tiles], E for spare tiles
    real = expert < e
    ex = expert.clamp(max=e - 1)
    within = idx - (tile_ends - tiles)[ex]
    row = torch.where(real, (ends - counts)[ex] + within * BM, 0)
    end = torch.where(real, ends[ex], 0)
    return torch.where(real, expert, -1), row, end, n_tiles


class _TritonGroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: Tensor, w: Tensor, counts: Tensor) -> Tensor:  # type: ignore[override]
        dt = torch.promote_types(a.dtype, w.dtype)
        a, w = a.to(dt).contiguous(), w.to(dt).contiguous()
        sched = _schedule(counts, a.shape[0])
        out = _segments_mm(a, w, w.stride(1), w.stride(2), w.shape[1], sched)
        ctx.save_for_backward(a, w, counts)
        return out

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g: Tensor
    ) -> tuple[Tensor | None, Tensor | None, None]:
        a, w, counts = ctx.saved_tensors
        g = g.to(a.dtype).contiguous()
        da = dw = None
        if ctx.needs_input_grad[0]:  # ∂a = g @ w[e]: w[e].T read through swapped strides
            da = _segments_mm(
                g, w, w.stride(2), w.stride(1), w.shape[2], _schedule(counts, g.shape[0])
            )
        if ctx.needs_input_grad[1]:
            e, nout, k = w.shape
            dw = torch.zeros_like(w)
            bounds = torch.cumsum(torch.cat([counts.new_zeros(1), counts]), 0)
            grid = (e, triton.cdiv(nout, BN), triton.cdiv(k, BK))
            _weight_grad[grid](g, a, dw, bounds, nout, k, BM=BM, BN=BN, BK=BK, ACC=_acc(a.dtype))
        return da, dw, None


def _segments_mm(
    a: Tensor, w: Tensor, s_n: int, s_k: int, nout: int, sched: tuple[Tensor, Tensor, Tensor, int]
) -> Tensor:
    expert, row, end, n_tiles = sched
    m, k = a.shape
    out = torch.zeros(m, nout, dtype=a.dtype, device=a.device)
    if m == 0:
        return out
    grid = (n_tiles, triton.cdiv(nout, BN))
    _segment_tiles[grid](
        a,
        w,
        out,
        expert,
        row,
        end,
        nout,
        k,
        w.stride(0),
        s_n,
        s_k,
        BM=BM,
        BN=BN,
        BK=BK,
        ACC=_acc(a.dtype),
    )
    return out


@triton.jit
def _segment_tiles(
    a_ptr,
    w_ptr,
    out_ptr,
    expert_ptr,
    row_ptr,
    end_ptr,
    NOUT,
    K,
    s_e,
    s_n,
    s_k,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    ACC: tl.constexpr,
):
    """``out[rows] = a[rows] @ W_e.T`` for one row tile of expert ``e`` (W_e[n, k] at
    ``w + e·s_e + n·s_n + k·s_k``)."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    e = tl.load(expert_ptr + pid_m)
    r0 = tl.load(row_ptr + pid_m)
    r_end = tl.load(end_ptr + pid_m)
    rows = r0 + tl.arange(0, BM)
    r_ok = rows < r_end  # a spare tile has end 0: it stores nothing
    e_safe = tl.maximum(e, 0)
    cols = pid_n * BN + tl.arange(0, BN)
    c_ok = cols < NOUT
    acc = tl.zeros((BM, BN), dtype=ACC)
    for k0 in range(0, K, BK):
        kk = k0 + tl.arange(0, BK)
        k_ok = kk < K
        at = tl.load(
            a_ptr + rows[:, None] * K + kk[None, :], mask=r_ok[:, None] & k_ok[None, :], other=0.0
        )
        wt = tl.load(
            w_ptr + e_safe * s_e + cols[:, None] * s_n + kk[None, :] * s_k,
            mask=c_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        acc += tl.dot(at, tl.trans(wt), input_precision="ieee", out_dtype=ACC)
    tl.store(
        out_ptr + rows[:, None] * NOUT + cols[None, :], acc, mask=r_ok[:, None] & c_ok[None, :]
    )


@triton.jit
def _weight_grad(
    g_ptr,
    a_ptr,
    dw_ptr,
    bounds_ptr,
    NOUT,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    ACC: tl.constexpr,
):
    """``dw[e, n_tile, k_tile] = g[seg e, n_tile].T @ a[seg e, k_tile]``."""
    e, pid_n, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(bounds_ptr + e)
    end = tl.load(bounds_ptr + e + 1)
    cols = pid_n * BN + tl.arange(0, BN)
    kk = pid_k * BK + tl.arange(0, BK)
    c_ok, k_ok = cols < NOUT, kk < K
    acc = tl.zeros((BN, BK), dtype=ACC)
    for r0 in range(start, end, BM):
        rows = r0 + tl.arange(0, BM)
        r_ok = rows < end
        gt = tl.load(
            g_ptr + rows[:, None] * NOUT + cols[None, :],
            mask=r_ok[:, None] & c_ok[None, :],
            other=0.0,
        )
        at = tl.load(
            a_ptr + rows[:, None] * K + kk[None, :], mask=r_ok[:, None] & k_ok[None, :], other=0.0
        )
        acc += tl.dot(tl.trans(gt), at, input_precision="ieee", out_dtype=ACC)
    tl.store(
        dw_ptr + e * NOUT * K + cols[:, None] * K + kk[None, :],
        acc,
        mask=c_ok[:, None] & k_ok[None, :],
    )
