"""MoE dispatch/combine for SwiGLU experts (Mixtral layout), with replayed routes (keep routing).

A mixture-of-experts MLP sends each token ``x_i`` to ``k`` of ``E`` experts and sums their
outputs weighted by the gates:  ``y_i = Σ_j g_ij · E_{e_ij}(x_i)`` with
``E_e(x) = w2_e (silu(w1_e x) ⊙ w3_e x)`` (Mixtral; weights stacked ``w1, w3: [E, F, D]``,
``w2: [E, D, F]`` in ``nn.Linear`` layout, i.e. ``x @ w.T``).

* :func:`route` — the router: ``softmax(logits)`` in float32, the top-k experts, gates
  renormalized over them (``normalize=True``: Mixtral, and Qwen-MoE/OLMoE with
  ``norm_topk_prob``).  With ``routes`` (keep routing, DeepSeek-V3.2 §3.1 "Keep Routing";
  also Seed-Thinking-v1.5 / LongCat's routing replay) the given experts replace the router's
  top-k and the gates are recomputed from the *current* logits over those experts, so the
  router still gets gradients.  A row of ``routes`` holding any ``-1`` is "not recorded":
  it keeps the router's own top-k (the same convention as ``envgym/trainer/routing.py``).
* :func:`moe_experts` — dispatch + expert MLPs + combine, two interchangeable ways:
  ``"loop"``, the reference (per expert: find its tokens, gather, MLP, scale, scatter-add —
  the shape of transformers' eager experts), and ``"grouped"``: one stable sort of the
  ``N·k`` (token, slot) assignments by expert, one gather, a grouped matmul over the
  contiguous per-expert segments (:func:`envgym.kernels.moe_grouped.grouped_mm`, a custom autograd
  op; Triton on CUDA), SwiGLU and gate scaling once over all rows, one ``index_add`` back.
* :func:`moe_experts_concat` — the same on transformers' ``gate_up_proj [E, 2F, D]`` /
  ``down_proj [E, D, F]`` layout (what an ``ExpertsInterface`` registration would call).
* :func:`moe_forward` — router + experts in one call.
"""

from __future__ import annotations

import os
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from envgym.kernels.moe_grouped import grouped_mm

__all__ = ["moe_experts", "moe_experts_concat", "moe_forward", "route"]

Impl = Literal["auto", "grouped", "loop", "triton"]


def route(
    router_logits: Tensor,  # [N, E]
    top_k: int,
    *,
    routes: Tensor | None = None,  # [N, k] int64 expert ids; a row with any -1 = not recorded
    normalize: bool = True,
) -> tuple[Tensor, Tensor]:  # (experts [N, k] int64, gates [N, k] float32 or float64)
    """The router's experts and gates, or the replayed ``routes`` with recomputed gates."""
    if (
        not isinstance(router_logits, Tensor)
        or router_logits.dim() != 2
        or not router_logits.is_floating_point()
    ):
        raise ValueError(
            f"router_logits must be a floating [N, E] tensor, got {_describe(router_logits)}"
        )
    n, e = router_logits.shape
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= e:
        raise ValueError(f"top_k must be an int in [1, E={e}], got {top_k!r}")
    dt = torch.promote_types(router_logits.dtype, torch.float32)
    probs = torch.softmax(router_logits.to(dt), dim=-1)  # [N, E]
    gates, experts = torch.topk(probs, top_k, dim=-1)
    if routes is not None:
        _check_routes(routes, n, e, top_k, router_logits.device)
        live = (routes < 0).any(dim=1, keepdim=True)  # [N, 1]: rows the engine did not record
        experts = torch.where(live, experts, routes)
        gates = probs.gather(1, experts)
    if normalize:
        gates = gates / gates.sum(dim=-1, keepdim=True)
    return experts, gates


def moe_experts(
    x: Tensor,  # [N, D]
    experts: Tensor,  # [N, k] int64
    gates: Tensor,  # [N, k]
    w1: Tensor,  # [E, F, D]  gate projection
    w3: Tensor,  # [E, F, D]  up projection
    w2: Tensor,  # [E, D, F]  down projection
    *,
    impl: Impl = "auto",
) -> Tensor:  # [N, D]
    """``y_i = Σ_j gates_ij · w2_e (silu(w1_e x_i) ⊙ w3_e x_i)`` with ``e = experts_ij``.

    ``impl``: ``"loop"`` (reference), ``"grouped"`` (torch), ``"triton"`` (Triton grouped
    matmul), ``"auto"`` (= ``"grouped"``, the faster on a GPU too).  Differentiable
    w.r.t. ``x``, ``gates`` and the weights.
    """
    _check_experts(x, experts, gates, w1, w3, w2)
    if impl not in ("auto", "grouped", "loop", "triton"):
        raise ValueError(f"impl must be 'auto', 'grouped', 'loop' or 'triton', got {impl!r}")
    if impl == "loop":
        return _loop(x, experts, gates, w1, w3, w2)
    if impl == "auto":
        # The torch grouped version beat the Triton one on an H200 (docs/GPU.md: 0.53-0.57x the
        # per-expert loop's time against 0.69-0.89x); Triton runs when asked for by name.
        impl = "grouped"
    if impl == "triton" and not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            f"impl='triton' needs CUDA tensors (x is on {x.device}) or TRITON_INTERPRET=1"
        )
    return _grouped(
        x, experts, gates, w1, w3, w2, backend="triton" if impl == "triton" else "torch"
    )


def moe_experts_concat(
    x: Tensor,  # [N, D]
    experts: Tensor,  # [N, k] int64
    gates: Tensor,  # [N, k]
    gate_up: Tensor,  # [E, 2F, D]: [w1; w3] stacked, transformers' ``gate_up_proj``
    down: Tensor,  # [E, D, F]: w2, transformers' ``down_proj``
    *,
    impl: Impl = "auto",
) -> Tensor:  # [N, D]
    """:func:`moe_experts` on transformers' concatenated expert layout (Mixtral, Qwen-MoE,
    OLMoE ``*Experts`` modules): the gate/up halves are views, so gradients reach ``gate_up``."""
    if not isinstance(gate_up, Tensor) or gate_up.dim() != 3 or gate_up.shape[1] % 2:
        raise ValueError(f"gate_up must be a [E, 2F, D] tensor, got {_describe(gate_up)}")
    f = gate_up.shape[1] // 2
    return moe_experts(x, experts, gates, gate_up[:, :f], gate_up[:, f:], down, impl=impl)


def moe_forward(
    x: Tensor,  # [N, D]
    router_weight: Tensor,  # [E, D]
    w1: Tensor,  # [E, F, D]
    w3: Tensor,  # [E, F, D]
    w2: Tensor,  # [E, D, F]
    *,
    top_k: int,
    routes: Tensor | None = None,  # [N, k]
    normalize: bool = True,
    impl: Impl = "auto",
) -> tuple[Tensor, Tensor, Tensor]:  # (y [N, D], experts [N, k], router_logits [N, E])
    """Router + experts: the whole MoE MLP of one layer (see :func:`route`, :func:`moe_experts`)."""
    if (
        not isinstance(router_weight, Tensor)
        or router_weight.dim() != 2
        or router_weight.shape[1:] != x.shape[1:]
    ):
        raise ValueError(
            f"router_weight must have shape [E, D={x.shape[-1]}], got {_describe(router_weight)}"
        )
    logits = x @ router_weight.T  # [N, E]
    experts, gates = route(logits, top_k, routes=routes, normalize=normalize)
    return moe_experts(x, experts, gates.to(x.dtype), w1, w3, w2, impl=impl), experts, logits


def _loop(x: Tensor, experts: Tensor, gates: Tensor, w1: Tensor, w3: Tensor, w2: Tensor) -> Tensor:
    """The reference: one Python iteration per expert, each finding its own tokens."""
    out = torch.zeros_like(x)
    for e in range(w1.shape[0]):
        tok, slot = torch.where(experts == e)
        if tok.numel() == 0:
            continue
        xe = x[tok]
        he = F.silu(xe @ w1[e].T) * (xe @ w3[e].T)
        out = out.index_add(0, tok, (he @ w2[e].T) * gates[tok, slot].unsqueeze(1))
    return out


def _grouped(
    x: Tensor, experts: Tensor, gates: Tensor, w1: Tensor, w3: Tensor, w2: Tensor, *, backend: str
) -> Tensor:
    """Sort assignments by expert, grouped matmuls over contiguous segments, one scatter back."""
    k = experts.shape[1]
    flat = experts.reshape(-1)  # [N·k]: assignment a = token a // k, slot a % k
    order = torch.argsort(flat, stable=True)  # stable: tokens stay in order inside a segment
    counts = torch.bincount(flat, minlength=w1.shape[0])  # [E]
    tok = order // k  # [M = N·k]
    xs = x.index_select(0, tok)  # [M, D] sorted by expert
    h = F.silu(grouped_mm(xs, w1, counts, backend=backend)) * grouped_mm(
        xs, w3, counts, backend=backend
    )  # [M, F]
    ys = grouped_mm(h, w2, counts, backend=backend) * gates.reshape(-1).index_select(
        0, order
    ).unsqueeze(1)
    return torch.zeros_like(x).index_add(0, tok, ys.to(x.dtype))


def _check_experts(
    x: Tensor, experts: Tensor, gates: Tensor, w1: Tensor, w3: Tensor, w2: Tensor
) -> None:
    for name, t, dim in (
        ("x", x, 2),
        ("gates", gates, 2),
        ("w1", w1, 3),
        ("w3", w3, 3),
        ("w2", w2, 3),
    ):
        if not isinstance(t, Tensor) or t.dim() != dim or not t.is_floating_point():
            raise ValueError(f"{name} must be a floating {dim}-D tensor, got {_describe(t)}")
    n, d = x.shape
    e, f = w1.shape[0], w1.shape[1]
    if w1.shape != (e, f, d) or w3.shape != (e, f, d):
        raise ValueError(
            f"w1 and w3 must be [E, F, D={d}], got {tuple(w1.shape)} and {tuple(w3.shape)}"
        )
    if w2.shape != (e, d, f):
        raise ValueError(f"w2 must be [E={e}, D={d}, F={f}], got {tuple(w2.shape)}")
    if (
        not isinstance(experts, Tensor)
        or experts.dtype != torch.int64
        or experts.dim() != 2
        or experts.shape[0] != n
    ):
        raise ValueError(f"experts must be an int64 [N={n}, k] tensor, got {_describe(experts)}")
    if gates.shape != experts.shape:
        raise ValueError(
            f"gates must have the shape of experts {tuple(experts.shape)}, got {tuple(gates.shape)}"
        )
    if experts.numel() and (int(experts.min()) < 0 or int(experts.max()) >= e):
        raise ValueError(
            f"experts must lie in [0, E={e}), got values in "
            f"[{int(experts.min())}, {int(experts.max())}]"
        )
    for name, t in (("experts", experts), ("gates", gates), ("w1", w1), ("w3", w3), ("w2", w2)):
        if t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x is on {x.device}")


def _check_routes(routes: Tensor, n: int, e: int, k: int, device: torch.device) -> None:
    if not isinstance(routes, Tensor) or routes.dtype != torch.int64 or routes.shape != (n, k):
        raise ValueError(f"routes must be an int64 [N={n}, k={k}] tensor, got {_describe(routes)}")
    if routes.device != device:
        raise ValueError(f"routes is on {routes.device} but router_logits is on {device}")
    if n and (int(routes.min()) < -1 or int(routes.max()) >= e):
        raise ValueError(
            f"routes must lie in [0, E={e}) with -1 = not recorded, got values in "
            f"[{int(routes.min())}, {int(routes.max())}]"
        )
    recorded = routes[(routes >= 0).all(dim=1)]
    if k > 1 and recorded.numel():
        s = recorded.sort(dim=1).values
        if bool((s[:, 1:] == s[:, :-1]).any()):
            raise ValueError("routes name the same expert twice in one row")


def _describe(t: object) -> str:
    if isinstance(t, Tensor):
        return f"{t.dtype} tensor of shape {tuple(t.shape)}"
    return type(t).__name__
