"""Selected-token log-probs and entropies from hidden states and the LM head, no ``[N, V]``.

RL on an LLM needs one number per trained token, ``log π_θ(target | context)``, yet the obvious
code materializes the full logits ``[N, V]`` (and, in backward, their gradient and the saved
softmax): with a 49,152-token vocabulary, 4,096 tokens cost 0.8 GB per fp32 copy.  Here:

* :func:`selected_logprobs` — the op.  Logits ``z = hidden @ weight.T / T`` are computed
  ``chunk_size`` vocabulary columns at a time (and ``token_chunk`` tokens at a time); the
  forward keeps only the per-row log-normalizer ``log Z`` and the mean logit ``μ = E_p[z]``;
  the custom backward recomputes each chunk and turns it straight into the chunk's share of
  ``∂/∂hidden`` and ``∂/∂weight``.  Peak extra memory is O(rows × chunk), independent of V.
* :func:`naive_selected_logprobs` — the reference (materializes everything; tests and benches).

Math, per row with the allowed set S (the whole vocabulary, or the kept set):
``log p_t = z_t − log Σ_{v∈S} e^{z_v}``, entropy ``H = log Z − μ``, and with upstream gradients
``a = ∂L/∂log p_t`` and ``b = ∂L/∂H``:  ``∂L/∂z_v = a·[v=t] − p_v·(a + b·(z_v − μ))`` for
``v ∈ S`` (0 elsewhere), since ``∂H/∂z_v = −p_v (log p_v + H) = −p_v (z_v − μ)``.

Keep Sampling Mask (DeepSeek-V3.2 §3.1): where ``kept_rows`` is True, π_θ is renormalized over
the row's kept set (the ids the sampler's top-p/top-k kept when it drew the token), so π_θ and
π_old share one action subspace and the importance ratio of eq. 6 compares like with like.
Kept rows are scored over the *union* of their kept ids only (a per-chunk mask restricts each
row to its own set), so a batch of small nucleus sets costs far less than the full vocabulary.
A top-p *threshold* form (kept = {v: π(v) ≥ τ} recomputed from π_θ) is deliberately not
offered: it selects a different set than the sampler did as soon as π_θ ≠ π_old, which is
exactly the mismatch §3.1 removes; the record stores the exact ids instead.

The fused Triton kernels of :mod:`envgym.kernels.logprob_triton` run when asked for
(``backend="triton"``). ``"auto"`` picks the chunked torch op on every device: on one H200
(docs/GPU.md, V = 49,152, N = 4,096) it took 1.45x the naive op's time in float32 and 1.48x in
bfloat16 at about the same peak memory as the Triton kernel, which took 3.9x and 21x.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Literal

import torch
from torch import Tensor

from envgym.kernels.logprob_columns import Columns, plan_groups, rows_per_block
from envgym.kernels.logprob_inputs import LogprobInputs, check_inputs

__all__ = ["naive_selected_logprobs", "selected_logprobs", "triton_available"]

Backend = Literal["auto", "torch", "triton"]


def selected_logprobs(
    hidden: Tensor,  # [N, H]
    weight: Tensor,  # [V, H]: the LM head
    targets: Tensor,  # [N] int64
    *,
    temperature: float = 1.0,
    kept_ids: Tensor | None = None,  # [N, K] int64, -1 = padding
    kept_rows: Tensor | None = None,  # [N] bool: True where the row's kept set applies
    chunk_size: int = 1024,
    with_entropy: bool = False,
    token_chunk: int | None = None,
    backend: Backend = "auto",
) -> tuple[Tensor, Tensor | None]:  # (logp [N], entropy [N] or None)
    """Log-prob of each target under ``softmax(hidden @ weight.T / temperature)``.

    Where ``kept_rows`` is True the distribution is renormalized over that row's kept ids
    (``kept_rows=None`` with ``kept_ids`` given: every row).  With ``with_entropy`` also the
    entropy of the same (renormalized) distribution.  Differentiable w.r.t. ``hidden`` and
    ``weight``; never materializes ``[N, V]``.  Results are float32 (float64 for float64
    inputs) whatever the input dtype; gradients come back in the inputs' dtypes.
    ``token_chunk``: tokens per block (default: as many as keep one ``[tokens, chunk_size]``
    tile ≤ 4M elements).  ``backend``: ``"auto"`` (= ``"torch"``, the faster on a GPU too),
    ``"torch"``, ``"triton"``.
    """
    inp = check_inputs(
        hidden,
        weight,
        targets,
        temperature=temperature,
        kept_ids=kept_ids,
        kept_rows=kept_rows,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
    )
    if token_chunk is not None and (
        isinstance(token_chunk, bool) or not isinstance(token_chunk, int) or token_chunk < 1
    ):
        raise ValueError(f"token_chunk must be a positive int or None, got {token_chunk!r}")
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'triton', got {backend!r}")
    if backend == "auto":
        backend = "torch"  # the faster of the two on the GPU too (module docstring)
    if backend == "triton":
        if not hidden.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(
                f"backend='triton' needs CUDA tensors (hidden is on {hidden.device}) "
                "or TRITON_INTERPRET=1"
            )
        from envgym.kernels.logprob_triton import triton_selected_logprobs

        return triton_selected_logprobs(inp)
    logp, ent = _ChunkedSelectedLogprobs.apply(
        hidden,
        weight,
        targets,
        inp.kept_ids,
        inp.kept_rows,
        inp,
        rows_per_block(token_chunk, chunk_size),
    )
    return logp, (ent if with_entropy else None)


def naive_selected_logprobs(
    hidden: Tensor,  # [N, H]
    weight: Tensor,  # [V, H]
    targets: Tensor,  # [N] int64
    *,
    temperature: float = 1.0,
    kept_ids: Tensor | None = None,  # [N, K] int64, -1 = padding
    kept_rows: Tensor | None = None,  # [N] bool
    chunk_size: int = 1024,  # unused: the same signature as selected_logprobs
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The reference: full ``[N, V]`` logits, a -inf mask outside the kept sets, log_softmax."""
    inp = check_inputs(
        hidden,
        weight,
        targets,
        temperature=temperature,
        kept_ids=kept_ids,
        kept_rows=kept_rows,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
    )
    dt = inp.compute_dtype
    z = (hidden.to(dt) @ weight.to(dt).T) * inp.inv_temperature  # [N, V]
    allowed = None
    if inp.kept_ids is not None:
        n, v = z.shape
        allowed = torch.zeros(n, v + 1, dtype=torch.bool, device=z.device)
        allowed.scatter_(1, torch.where(inp.kept_ids < 0, v, inp.kept_ids), True)  # -1 -> column V
        allowed = allowed[:, :v] | ~inp.kept_rows.unsqueeze(1)
        z = z.masked_fill(~allowed, float("-inf"))
    logp_all = torch.log_softmax(z, dim=1)
    logp = logp_all.gather(1, targets.unsqueeze(1)).squeeze(1)
    if not with_entropy:
        return logp, None
    finite = (
        logp_all if allowed is None else torch.where(allowed, logp_all, torch.zeros_like(logp_all))
    )
    return logp, -(logp_all.exp() * finite).sum(dim=1)


@functools.cache
def triton_available() -> bool:
    """True when ``import triton`` works (the GPU path; its tests run under TRITON_INTERPRET=1)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


class _ChunkedSelectedLogprobs(torch.autograd.Function):
    """Forward keeps ``log Z`` and ``μ`` per row; backward recomputes each logit chunk."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        targets: Tensor,
        kept_ids: Tensor | None,
        kept_rows: Tensor,
        inp: LogprobInputs,
        per_block: int,
    ) -> tuple[Tensor, Tensor]:
        dt, n = inp.compute_dtype, hidden.shape[0]
        h = hidden.to(dt)
        log_z = torch.empty(n, dtype=dt, device=h.device)
        mu = torch.zeros(n, dtype=dt, device=h.device)
        for rows, cols in plan_groups(
            kept_ids, kept_rows, weight.shape[0], inp.chunk_size, per_block
        ):
            lz, m = _group_forward(h[rows], weight, cols, inp)
            log_z[rows] = lz
            if m is not None:
                mu[rows] = m
        z_target = (h * weight[targets].to(dt)).sum(dim=1) * inp.inv_temperature  # [N]
        logp = z_target - log_z
        ent = log_z - mu if inp.with_entropy else logp.new_empty(0)
        if not inp.with_entropy:
            ctx.mark_non_differentiable(ent)
        ctx.save_for_backward(hidden, weight, targets, kept_ids, kept_rows, log_z, mu)
        ctx.inp, ctx.per_block = inp, per_block
        return logp, ent

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g_logp: Tensor | None, g_ent: Tensor | None
    ) -> tuple[Any, ...]:
        hidden, weight, targets, kept_ids, kept_rows, log_z, mu = ctx.saved_tensors
        inp: LogprobInputs = ctx.inp
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dt, (n, hsz), v = inp.compute_dtype, hidden.shape, weight.shape[0]
        h = hidden.to(dt)
        a = torch.zeros(n, dtype=dt, device=h.device) if g_logp is None else g_logp.to(dt)
        b = g_ent.to(dt) if (inp.with_entropy and g_ent is not None) else None
        dh = torch.zeros(n, hsz, dtype=dt, device=h.device) if need_h else None
        dw = torch.zeros(v, hsz, dtype=dt, device=h.device) if need_w else None
        for rows, cols in plan_groups(kept_ids, kept_rows, v, inp.chunk_size, ctx.per_block):
            dh_g = _group_backward(
                h[rows],
                weight,
                cols,
                inp,
                log_z[rows],
                mu[rows],
                a[rows],
                None if b is None else b[rows],
                dw,
                need_h,
            )
            if dh is not None and dh_g is not None:
                dh.index_add_(0, rows, dh_g)
        # the a·[v = t] term: one row of the head per token
        a_scaled = (a * inp.inv_temperature).unsqueeze(1)
        if dh is not None:
            dh.add_(a_scaled * weight[targets].to(dt))
        if dw is not None:
            dw.index_add_(0, targets, a_scaled * h)
        return (
            None if dh is None else dh.to(hidden.dtype),
            None if dw is None else dw.to(weight.dtype),
            None,
            None,
            None,
            None,
            None,
        )


class _Tile:
    """One reusable ``[n, chunk]`` buffer.  Allocating a fresh 16 MiB tile per chunk lets the
    C allocator's heap grow with the number of chunks (measured: ~4x the peak at V=49,152);
    writing every chunk into the same storage keeps the extra memory at a fixed few tiles."""

    def __init__(self, rows: int, cols: int, like: Tensor) -> None:
        self.buf = like.new_empty(rows * cols)
        self.rows = rows

    def view(self, cols: int) -> Tensor:
        return self.buf[: self.rows * cols].view(self.rows, cols)


def _chunk_logits(
    h: Tensor, weight: Tensor, cols: Columns, c0: int, c1: int, inp: LogprobInputs, tile: _Tile
) -> tuple[Tensor, Tensor]:
    """``z [n, c1-c0]`` (1/T applied, written into ``tile``) and the head rows ``w [c1-c0, H]``."""
    w = weight[c0:c1] if cols.ids is None else weight.index_select(0, cols.ids[c0:c1])
    w = w.to(inp.compute_dtype)
    z = torch.mm(h, w.T, out=tile.view(c1 - c0))
    if inp.inv_temperature != 1.0:  # T = 1 is the common case: skip a pass over the tile
        z.mul_(inp.inv_temperature)
    return z, w


def _group_forward(
    h: Tensor, weight: Tensor, cols: Columns, inp: LogprobInputs
) -> tuple[Tensor, Tensor | None]:
    """``log Z [n]`` and (with entropy) ``μ [n]`` of one group of rows, chunk by chunk.

    Each chunk gives its own log-sum-exp ``l_c`` and softmax-mean ``μ_c``; they combine as
    ``log Z = logsumexp_c l_c`` and ``μ = Σ_c e^{l_c − log Z} μ_c`` (exact, no running rescale).
    Few, large tensor ops per chunk: on a busy CPU every op is a parallel region that waits
    for its slowest thread, so passes over the tile cost more than their arithmetic.
    """
    lses, mus = [], []
    width = min(inp.chunk_size, cols.width)
    z_tile, ls_tile = _Tile(h.shape[0], width, h), _Tile(h.shape[0], width, h)
    for ci, (c0, c1) in enumerate(cols.chunks(inp.chunk_size)):
        z, _ = _chunk_logits(h, weight, cols, c0, c1, inp, z_tile)
        mask = cols.mask(ci, h.shape[0], c0, c1)
        if mask is not None:
            z.masked_fill_(~mask, float("-inf"))
        if mask is None:
            # one fused pass instead of logsumexp's several: log_softmax(z)_0 = z_0 - lse
            ls = torch.ops.aten._log_softmax.out(z, 1, False, out=ls_tile.view(c1 - c0))
            lses.append(z[:, 0] - ls[:, 0])
            if inp.with_entropy:
                mus.append(ls.exp_().mul_(z).sum(dim=1))  # Σ_v softmax_c(z)_v z_v
            continue
        if not inp.with_entropy:
            lses.append(torch.logsumexp(z, dim=1))  # -inf where nothing of the row's set is here
            continue
        m = z.amax(dim=1, keepdim=True)
        m.nan_to_num_(neginf=0.0)  # a row with nothing kept in this chunk: e = 0 below
        if mask is not None:
            z.masked_fill_(~mask, 0.0)  # now finite; e is zeroed there instead (avoids 0 · -inf)
        e = torch.exp(z - m)
        if mask is not None:
            e.masked_fill_(~mask, 0.0)
        s = e.sum(dim=1)
        lses.append(m.squeeze(1) + s.log())
        mus.append(e.mul_(z).sum(dim=1) / s.clamp_min(torch.finfo(s.dtype).tiny))
    lse = torch.stack(lses, dim=1)  # [n, chunks]
    log_z = torch.logsumexp(lse, dim=1)
    if not inp.with_entropy:
        return log_z, None
    return log_z, ((lse - log_z.unsqueeze(1)).exp() * torch.stack(mus, dim=1)).sum(dim=1)


def _group_backward(
    h: Tensor,  # [n, H] compute dtype
    weight: Tensor,  # [V, H]
    cols: Columns,
    inp: LogprobInputs,
    log_z: Tensor,  # [n]
    mu: Tensor,  # [n]
    a: Tensor,  # [n]: ∂L/∂logp
    b: Tensor | None,  # [n]: ∂L/∂H
    dw: Tensor | None,  # [V, H] accumulated in place
    need_h: bool,
) -> Tensor | None:  # dh [n, H] (without the target term)
    """Recompute each chunk, form ``g = −p (a + b (z − μ))`` and add ``g @ w`` / ``gᵀ @ h``."""
    dh = torch.zeros_like(h) if need_h else None
    z_tile = _Tile(h.shape[0], min(inp.chunk_size, cols.width), h)
    lz = log_z.unsqueeze(1)
    if b is None:
        # g = −a·e^{z − log Z} = −sign(a)·e^{z − (log Z − log|a|)}: two passes over the tile
        # (sub, exp); the row signs go onto the [n, H] operands instead (a = 0: e^{−∞} = 0)
        shift = (log_z - a.abs().log()).unsqueeze(1)
        neg_sign = -torch.sign(a).unsqueeze(1)
        h_signed = h * neg_sign
    for ci, (c0, c1) in enumerate(cols.chunks(inp.chunk_size)):
        z, w = _chunk_logits(h, weight, cols, c0, c1, inp, z_tile)
        mask = cols.mask(ci, h.shape[0], c0, c1)
        if b is None:
            g = z.sub_(
                shift
            ).exp_()  # in place: the tile is the only [n, c] buffer; g = neg_sign·this
            h_g = h_signed
        else:
            p = torch.exp(z - lz)
            g = p.mul_(z.sub_(mu.unsqueeze(1)).mul_(b.unsqueeze(1)).add_(a.unsqueeze(1))).neg_()
            h_g = h
        if mask is not None:
            g.masked_fill_(~mask, 0.0)
        if dh is not None:
            dh.addmm_(g, w, alpha=inp.inv_temperature)
        if dw is not None:
            if cols.ids is None:  # a contiguous slice: accumulate in place, no [c, H] temporary
                dw[c0:c1].addmm_(g.T, h_g, alpha=inp.inv_temperature)
            else:
                dw.index_add_(0, cols.ids[c0:c1], torch.mm(g.T, h_g).mul_(inp.inv_temperature))
    if dh is not None and b is None:
        dh.mul_(neg_sign)
    return dh
