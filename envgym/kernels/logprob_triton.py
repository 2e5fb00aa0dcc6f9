"""Triton kernels for :func:`envgym.kernels.logprob.selected_logprobs` (forward and recompute
backward).

Same math as the torch version (see :mod:`envgym.kernels.logprob`); the GPU work is split in two:

* full-vocabulary rows — a 2-D grid over (token block, vocabulary block), as in "Cut Your
  Losses" (cut cross-entropy): each program builds one ``[BN, BV]`` logit tile in registers
  (``tl.dot`` over hidden blocks), and writes the tile's log-sum-exp and softmax-mean of ``z``
  per row (``[R, V/BV]`` partials, ~1/BV of the logits), combined exactly afterwards
  (``log Z = logsumexp_c l_c``, ``μ = Σ_c e^{l_c − log Z} μ_c``).  Backward recomputes the
  tile, forms ``g = −p (a + b (z − μ)) / T`` and atomically adds ``g @ W_tile`` into ``∂h``
  and ``gᵀ @ h_tile`` into ``∂W``: neither the logits nor their gradient ever exist in full.
* keep-sampling-mask rows (DeepSeek-V3.2 §3.1) — one program per row walks its own kept ids
  (``[K]``, −1 padding), gathers those head rows and keeps an online log-sum-exp; backward
  scatters ``g_k · h`` into the gathered head rows with atomics.  Cost O(K·H) per row.

The target logit and its ``a·[v = t]`` gradient term are a gather in torch (O(N·H)).
Accumulation is float32 (float64 for float64 inputs); ``tl.dot`` runs at ``ieee`` precision
so float32 log-probs are not rounded through TF32.  On CPU these kernels run under
``TRITON_INTERPRET=1`` (the tests); on CUDA ``selected_logprobs`` picks them automatically.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from envgym.kernels import logprob_triton_kernels as kern
from envgym.kernels.logprob_inputs import LogprobInputs

__all__ = ["Blocks", "triton_selected_logprobs"]


@dataclass(frozen=True)
class Blocks:
    """Tile sizes (powers of two, >= 16 for ``tl.dot``)."""

    tokens: int = 32
    vocab: int = 128
    hidden: int = 32
    kept: int = 64


def triton_selected_logprobs(
    inp: LogprobInputs, blocks: Blocks | None = None
) -> tuple[Tensor, Tensor | None]:
    """Run the op on Triton for already-checked inputs
    (``envgym.kernels.logprob_inputs.check_inputs``)."""
    b = blocks or Blocks()
    for name in ("tokens", "vocab", "hidden", "kept"):
        size = getattr(b, name)
        if size < 16 or size & (size - 1):
            raise ValueError(f"Blocks.{name} must be a power of two >= 16, got {size}")
    logp, ent = _TritonSelectedLogprobs.apply(
        inp.hidden, inp.weight, inp.targets, inp.kept_ids, inp.kept_rows, inp, b
    )
    return logp, (ent if inp.with_entropy else None)


def _operands(hidden: Tensor, weight: Tensor, dt: torch.dtype) -> tuple[Tensor, Tensor]:
    """Contiguous operands of one dtype: the native one when both agree (bf16 dots accumulate
    exactly in fp32), else the compute dtype."""
    if hidden.dtype != weight.dtype:
        hidden, weight = hidden.to(dt), weight.to(dt)
    return hidden.contiguous(), weight.contiguous()


def _tl(dt: torch.dtype) -> Any:
    return tl.float64 if dt == torch.float64 else tl.float32


class _TritonSelectedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        targets: Tensor,
        kept_ids: Tensor | None,
        kept_rows: Tensor,
        inp: LogprobInputs,
        blocks: Blocks,
    ) -> tuple[Tensor, Tensor]:
        dt = inp.compute_dtype
        h, w = _operands(hidden, weight, dt)
        (n, hsz), v = h.shape, w.shape[0]
        log_z = torch.empty(n, dtype=dt, device=h.device)
        mu = torch.empty(n, dtype=dt, device=h.device)
        full = (~kept_rows).nonzero().squeeze(1)
        if full.numel():
            nvb = triton.cdiv(v, blocks.vocab)
            lse_part = torch.empty(full.numel(), nvb, dtype=dt, device=h.device)
            mu_part = torch.empty_like(lse_part)
            grid = (triton.cdiv(full.numel(), blocks.tokens), nvb)
            kern.full_fwd[grid](
                h,
                w,
                full,
                lse_part,
                mu_part,
                full.numel(),
                v,
                hsz,
                nvb,
                inp.inv_temperature,
                BN=blocks.tokens,
                BV=blocks.vocab,
                BH=blocks.hidden,
                ACC=_tl(dt),
            )
            lz = torch.logsumexp(lse_part, dim=1)
            log_z[full] = lz
            mu[full] = ((lse_part - lz.unsqueeze(1)).exp() * mu_part).sum(dim=1)
        kept = kept_rows.nonzero().squeeze(1)
        ids = None
        if kept.numel():
            assert kept_ids is not None
            ids = kept_ids[kept].contiguous()
            kern.kept_fwd[(kept.numel(),)](
                h,
                w,
                kept,
                ids,
                log_z,
                mu,
                ids.shape[1],
                hsz,
                inp.inv_temperature,
                BK=blocks.kept,
                BH=blocks.hidden,
                ACC=_tl(dt),
            )
        z_target = (h.to(dt) * w[targets].to(dt)).sum(dim=1) * inp.inv_temperature
        logp = z_target - log_z
        ent = log_z - mu
        if not inp.with_entropy:
            ctx.mark_non_differentiable(ent)
        ctx.save_for_backward(hidden, weight, targets, full, kept, ids, log_z, mu)
        ctx.inp, ctx.blocks = inp, blocks
        return logp, ent

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g_logp: Tensor | None, g_ent: Tensor | None
    ) -> tuple[Any, ...]:
        hidden, weight, targets, full, kept, ids, log_z, mu = ctx.saved_tensors
        inp: LogprobInputs = ctx.inp
        blocks: Blocks = ctx.blocks
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dt = inp.compute_dtype
        h, w = _operands(hidden, weight, dt)
        (n, hsz), v = h.shape, w.shape[0]
        a = (
            torch.zeros(n, dtype=dt, device=h.device)
            if g_logp is None
            else g_logp.to(dt).contiguous()
        )
        has_b = inp.with_entropy and g_ent is not None
        b = g_ent.to(dt).contiguous() if has_b else a  # a placeholder pointer when unused
        dh = torch.zeros(n, hsz, dtype=dt, device=h.device)
        dw = torch.zeros(v, hsz, dtype=dt, device=h.device)
        if full.numel() and (need_h or need_w):
            grid = (triton.cdiv(full.numel(), blocks.tokens), triton.cdiv(v, blocks.vocab))
            kern.full_bwd[grid](
                h,
                w,
                full,
                log_z,
                mu,
                a,
                b,
                dh,
                dw,
                full.numel(),
                v,
                hsz,
                inp.inv_temperature,
                HAS_B=has_b,
                NEED_H=need_h,
                NEED_W=need_w,
                BN=blocks.tokens,
                BV=blocks.vocab,
                BH=blocks.hidden,
                ACC=_tl(dt),
            )
        if kept.numel() and (need_h or need_w):
            kern.kept_bwd[(kept.numel(),)](
                h,
                w,
                kept,
                ids,
                log_z,
                mu,
                a,
                b,
                dh,
                dw,
                ids.shape[1],
                hsz,
                inp.inv_temperature,
                HAS_B=has_b,
                NEED_H=need_h,
                NEED_W=need_w,
                BK=blocks.kept,
                BH=blocks.hidden,
                ACC=_tl(dt),
            )
        a_scaled = (a * inp.inv_temperature).unsqueeze(1)  # the a·[v = t] term
        if need_h:
            dh.add_(a_scaled * w[targets].to(dt))
        if need_w:
            dw.index_add_(0, targets, a_scaled * h.to(dt))
        return (
            dh.to(hidden.dtype) if need_h else None,
            dw.to(weight.dtype) if need_w else None,
            None,
            None,
            None,
            None,
            None,
        )
