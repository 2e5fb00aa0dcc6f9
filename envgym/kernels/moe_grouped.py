"""Grouped matmul over contiguous row segments: the expert GEMM of a sorted MoE dispatch.

``grouped_mm(a, w, counts)``: rows ``a[o_e : o_e + counts[e]]`` (``o_e = Σ_{j<e} counts[j]``)
are multiplied by ``w[e].T``, in ``nn.Linear`` layout:  ``out[s] = a[s] @ w[e].T``.

The torch version writes each segment's product straight into one preallocated output (no
``torch.cat``, no per-expert masks) and its custom backward does the same for
``∂a = g @ w[e]`` and ``∂w[e] = g[s].T @ a[s]``.  torch's own ``grouped_mm`` is not used:
on CPU (torch 2.13) it has no float64 and its backward fails, and float64 is what the tests
compare in.  ``backend="triton"`` runs :mod:`envgym.kernels.moe_triton` instead.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["grouped_mm", "segment_bounds"]


def grouped_mm(
    a: Tensor,  # [M, K] rows sorted by group
    w: Tensor,  # [E, Nout, K]
    counts: Tensor,  # [E] int64 rows per group, Σ = M
    *,
    backend: str = "torch",
) -> Tensor:  # [M, Nout]
    """``out[segment e] = a[segment e] @ w[e].T`` (see the module docstring)."""
    if a.dim() != 2 or w.dim() != 3 or w.shape[2] != a.shape[1]:
        raise ValueError(
            f"grouped_mm needs a [M, K] and w [E, Nout, K], got {tuple(a.shape)} "
            f"and {tuple(w.shape)}"
        )
    if counts.shape != (w.shape[0],) or int(counts.sum()) != a.shape[0]:
        raise ValueError(
            f"counts must be [E={w.shape[0]}] summing to M={a.shape[0]}, got shape "
            f"{tuple(counts.shape)} summing to {int(counts.sum())}"
        )
    if backend == "triton":
        from envgym.kernels.moe_triton import triton_grouped_mm

        return triton_grouped_mm(a, w, counts)
    if backend != "torch":
        raise ValueError(f"backend must be 'torch' or 'triton', got {backend!r}")
    return _GroupedMM.apply(a, w, segment_bounds(counts))


def segment_bounds(counts: Tensor) -> tuple[tuple[int, int, int], ...]:
    """``(group, start, end)`` of every non-empty segment (one host sync for all of them)."""
    ends = torch.cumsum(counts, 0).tolist()
    starts = [0, *ends[:-1]]
    return tuple((e, s, t) for e, (s, t) in enumerate(zip(starts, ends, strict=True)) if t > s)


class _GroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, a: Tensor, w: Tensor, bounds: tuple[tuple[int, int, int], ...]
    ) -> Tensor:
        dt = torch.promote_types(a.dtype, w.dtype)
        out = a.new_zeros(a.shape[0], w.shape[1], dtype=dt)
        for e, s, t in bounds:
            torch.mm(a[s:t].to(dt), w[e].T.to(dt), out=out[s:t])
        ctx.save_for_backward(a, w)
        ctx.bounds = bounds
        return out

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g: Tensor
    ) -> tuple[Tensor | None, Tensor | None, None]:
        a, w = ctx.saved_tensors
        need_a, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        da = torch.zeros(a.shape, dtype=g.dtype, device=g.device) if need_a else None
        dw = torch.zeros(w.shape, dtype=g.dtype, device=g.device) if need_w else None
        for e, s, t in ctx.bounds:
            if da is not None:
                torch.mm(g[s:t], w[e].to(g.dtype), out=da[s:t])
            if dw is not None:
                torch.mm(g[s:t].T, a[s:t].to(g.dtype), out=dw[e])
        return (
            None if da is None else da.to(a.dtype),
            None if dw is None else dw.to(w.dtype),
            None,
        )
