"""The Triton kernels of :mod:`envgym.kernels.logprob_triton` (the math and the launch logic live
there).

* ``full_fwd`` / ``full_bwd``: one ``[BN, BV]`` logit tile per program (full-vocabulary rows);
* ``kept_fwd`` / ``kept_bwd``: one program per keep-sampling-mask row, over its kept ids.

Accumulation in ``ACC`` (float32, or float64 for float64 inputs); ``tl.dot`` at ``ieee``
precision.  ``triton.jit`` decides at decoration time whether these are interpreted
(``TRITON_INTERPRET=1``), which is why they sit in their own module: tests reload it.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Finite "minus infinity" for running maxima (exp(-inf - -inf) would be NaN); a constexpr
# because compiled Triton refuses plain module globals inside @jit (the interpreter does not).
_NEG = tl.constexpr(-1.0e30)


@triton.jit
def logit_tile(
    h_ptr,
    w_ptr,
    row_idx,
    r_ok,
    cols,
    c_ok,
    H,
    inv_t,
    BN: tl.constexpr,
    BV: tl.constexpr,
    BH: tl.constexpr,
    ACC: tl.constexpr,
):
    """``z [BN, BV] = h[row_idx] @ w[cols].T / T`` (0 outside the valid rows/columns)."""
    acc = tl.zeros((BN, BV), dtype=ACC)
    for k0 in range(0, H, BH):
        kk = k0 + tl.arange(0, BH)
        k_ok = kk < H
        ht = tl.load(
            h_ptr + row_idx[:, None] * H + kk[None, :],
            mask=r_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        wt = tl.load(
            w_ptr + cols[:, None] * H + kk[None, :], mask=c_ok[:, None] & k_ok[None, :], other=0.0
        )
        acc += tl.dot(ht, tl.trans(wt), input_precision="ieee", out_dtype=ACC)
    return acc * inv_t


@triton.jit
def full_fwd(
    h_ptr,
    w_ptr,
    rows_ptr,
    lse_ptr,
    mu_ptr,
    R,
    V,
    H,
    NVB,
    inv_t,
    BN: tl.constexpr,
    BV: tl.constexpr,
    BH: tl.constexpr,
    ACC: tl.constexpr,
):
    pid_n, pid_v = tl.program_id(0), tl.program_id(1)
    r = pid_n * BN + tl.arange(0, BN)
    r_ok = r < R
    row_idx = tl.load(rows_ptr + r, mask=r_ok, other=0)
    cols = pid_v * BV + tl.arange(0, BV)
    c_ok = cols < V
    z = logit_tile(h_ptr, w_ptr, row_idx, r_ok, cols, c_ok, H, inv_t, BN, BV, BH, ACC)
    z = tl.where(c_ok[None, :], z, float("-inf"))
    m = tl.max(z, axis=1)  # finite: every vocabulary block has at least one column
    e = tl.exp(z - m[:, None])
    s = tl.sum(e, axis=1)
    t = tl.sum(e * tl.where(c_ok[None, :], z, 0.0), axis=1)
    tl.store(lse_ptr + r * NVB + pid_v, m + tl.log(s), mask=r_ok)
    tl.store(mu_ptr + r * NVB + pid_v, t / s, mask=r_ok)


@triton.jit
def full_bwd(
    h_ptr,
    w_ptr,
    rows_ptr,
    logz_ptr,
    mu_ptr,
    a_ptr,
    b_ptr,
    dh_ptr,
    dw_ptr,
    R,
    V,
    H,
    inv_t,
    HAS_B: tl.constexpr,
    NEED_H: tl.constexpr,
    NEED_W: tl.constexpr,
    BN: tl.constexpr,
    BV: tl.constexpr,
    BH: tl.constexpr,
    ACC: tl.constexpr,
):
    pid_n, pid_v = tl.program_id(0), tl.program_id(1)
    r = pid_n * BN + tl.arange(0, BN)
    r_ok = r < R
    row_idx = tl.load(rows_ptr + r, mask=r_ok, other=0)
    cols = pid_v * BV + tl.arange(0, BV)
    c_ok = cols < V
    z = logit_tile(h_ptr, w_ptr, row_idx, r_ok, cols, c_ok, H, inv_t, BN, BV, BH, ACC)
    log_z = tl.load(logz_ptr + row_idx, mask=r_ok, other=0.0)
    a = tl.load(a_ptr + row_idx, mask=r_ok, other=0.0)
    p = tl.where(r_ok[:, None] & c_ok[None, :], tl.exp(z - log_z[:, None]), 0.0)
    coef = a[:, None]
    if HAS_B:
        b = tl.load(b_ptr + row_idx, mask=r_ok, other=0.0)
        mu = tl.load(mu_ptr + row_idx, mask=r_ok, other=0.0)
        coef = coef + b[:, None] * (z - mu[:, None])
    g = -p * coef * inv_t  # ∂L/∂(h·w) of the tile, without the target term
    for k0 in range(0, H, BH):
        kk = k0 + tl.arange(0, BH)
        k_ok = kk < H
        if NEED_H:
            wt = tl.load(
                w_ptr + cols[:, None] * H + kk[None, :],
                mask=c_ok[:, None] & k_ok[None, :],
                other=0.0,
            )
            dh = tl.dot(g, wt.to(ACC), input_precision="ieee", out_dtype=ACC)
            tl.atomic_add(
                dh_ptr + row_idx[:, None] * H + kk[None, :], dh, mask=r_ok[:, None] & k_ok[None, :]
            )
        if NEED_W:
            ht = tl.load(
                h_ptr + row_idx[:, None] * H + kk[None, :],
                mask=r_ok[:, None] & k_ok[None, :],
                other=0.0,
            )
            dw = tl.dot(tl.trans(g), ht.to(ACC), input_precision="ieee", out_dtype=ACC)
            tl.atomic_add(
                dw_ptr + cols[:, None] * H + kk[None, :], dw, mask=c_ok[:, None] & k_ok[None, :]
            )


@triton.jit
def kept_logits(
    h_ptr, w_ptr, row, ids, i_ok, H, inv_t, BK: tl.constexpr, BH: tl.constexpr, ACC: tl.constexpr
):
    """``z [BK]``: the row's logits at its kept ids (−inf at padding)."""
    acc = tl.zeros((BK,), dtype=ACC)
    for k0 in range(0, H, BH):
        kk = k0 + tl.arange(0, BH)
        k_ok = kk < H
        hv = tl.load(h_ptr + row * H + kk, mask=k_ok, other=0.0).to(ACC)
        wt = tl.load(
            w_ptr + ids[:, None] * H + kk[None, :], mask=i_ok[:, None] & k_ok[None, :], other=0.0
        )
        acc += tl.sum(wt.to(ACC) * hv[None, :], axis=1)
    return tl.where(i_ok, acc * inv_t, float("-inf"))


@triton.jit
def kept_fwd(
    h_ptr,
    w_ptr,
    rows_ptr,
    ids_ptr,
    logz_ptr,
    mu_ptr,
    K,
    H,
    inv_t,
    BK: tl.constexpr,
    BH: tl.constexpr,
    ACC: tl.constexpr,
):
    pid = tl.program_id(0)
    row = tl.load(rows_ptr + pid)
    m = tl.full((), _NEG, ACC)
    s = tl.zeros((), ACC)
    t = tl.zeros((), ACC)
    for j0 in range(0, K, BK):
        jj = j0 + tl.arange(0, BK)
        ids = tl.load(ids_ptr + pid * K + jj, mask=jj < K, other=-1)
        i_ok = ids >= 0
        z = kept_logits(h_ptr, w_ptr, row, ids, i_ok, H, inv_t, BK, BH, ACC)
        m_new = tl.maximum(m, tl.max(z, axis=0))
        scale = tl.exp(m - m_new)
        e = tl.exp(z - m_new)  # 0 at padding
        s = s * scale + tl.sum(e, axis=0)
        t = t * scale + tl.sum(e * tl.where(i_ok, z, 0.0), axis=0)
        m = m_new
    tl.store(logz_ptr + row, m + tl.log(s))
    tl.store(mu_ptr + row, t / s)


@triton.jit
def kept_bwd(
    h_ptr,
    w_ptr,
    rows_ptr,
    ids_ptr,
    logz_ptr,
    mu_ptr,
    a_ptr,
    b_ptr,
    dh_ptr,
    dw_ptr,
    K,
    H,
    inv_t,
    HAS_B: tl.constexpr,
    NEED_H: tl.constexpr,
    NEED_W: tl.constexpr,
    BK: tl.constexpr,
    BH: tl.constexpr,
    ACC: tl.constexpr,
):
    pid = tl.program_id(0)
    row = tl.load(rows_ptr + pid)
    log_z = tl.load(logz_ptr + row)
    coef0 = tl.load(a_ptr + row)
    for j0 in range(0, K, BK):
        jj = j0 + tl.arange(0, BK)
        ids = tl.load(ids_ptr + pid * K + jj, mask=jj < K, other=-1)
        i_ok = ids >= 0
        z = kept_logits(h_ptr, w_ptr, row, ids, i_ok, H, inv_t, BK, BH, ACC)
        p = tl.where(i_ok, tl.exp(z - log_z), 0.0)
        coef = tl.zeros((BK,), ACC) + coef0
        if HAS_B:
            coef = coef + tl.load(b_ptr + row) * (tl.where(i_ok, z, 0.0) - tl.load(mu_ptr + row))
        g = -p * coef * inv_t  # [BK]
        for k0 in range(0, H, BH):
            kk = k0 + tl.arange(0, BH)
            k_ok = kk < H
            if NEED_H:
                wt = tl.load(
                    w_ptr + ids[:, None] * H + kk[None, :],
                    mask=i_ok[:, None] & k_ok[None, :],
                    other=0.0,
                )
                tl.atomic_add(
                    dh_ptr + row * H + kk, tl.sum(g[:, None] * wt.to(ACC), axis=0), mask=k_ok
                )
            if NEED_W:
                hv = tl.load(h_ptr + row * H + kk, mask=k_ok, other=0.0).to(ACC)
                tl.atomic_add(
                    dw_ptr + ids[:, None] * H + kk[None, :],
                    g[:, None] * hv[None, :],
                    mask=i_ok[:, None] & k_ok[None, :],
                )
