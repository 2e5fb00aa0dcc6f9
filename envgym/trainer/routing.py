"""Keep Routing (DeepSeek-V3.2 §3.1): replay the engine's expert choices in the training forward.

An MoE policy's log-probs depend on which experts each token went through.  The inference engine
and the trainer compute the router with different kernels (and, off-policy, different weights), so
a token's top-k may differ between the sampling forward and the training forward; the trainer then
optimizes a different sub-network than the one that produced the sample.  DeepSeek-V3.2 keeps the
routing paths the engine used and enforces them in training.  Here:

- :func:`capture_routes` runs a forward and returns the experts every MoE layer chose for every
  position: ``[B, T, L, k]`` int64 (``L`` = MoE layers in module order, most weighted expert first);
- :func:`replay_routes` is a context manager inside which every MoE router returns the given experts
  instead of its own top-k.  Gates are recomputed from the *current* router logits over the replayed
  experts, the way each architecture normalizes them (Mixtral always renormalizes the top-k
  softmax; Qwen2-MoE, Qwen3-MoE and OLMoE when ``norm_topk_prob``), so gradients still reach the
  router weights;
- :func:`routing_flip_rate` is the diagnostic: the fraction of recorded expert choices the current
  router would not make.

It works by a forward hook on each router module (``MixtralTopKRouter``, ``Qwen2MoeTopKRouter``,
``Qwen3MoeTopKRouter``, ``OlmoeTopKRouter`` in transformers 5.23: ``forward(hidden [N, H]) ->
(logits [N, E], gates [N, k], experts [N, k])`` with ``N = B·T`` flattened batch-major).  A hook
only rewrites the router's returned gates and experts, so the expert kernels and the rest of the
block are untouched, and removing the hook restores the model (done on exit, exceptions included).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn


def moe_routers(model: nn.Module) -> list[nn.Module]:
    """The model's MoE router modules in module order (one per MoE layer)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    classes = _recorded_router_classes(model)
    return [m for m in model.modules() if isinstance(m, classes) or _looks_like_router(m)]


def route_shape(model: nn.Module) -> tuple[int, int]:
    """``(L, k)``: MoE layers and experts per token; a ValueError for a model without routers."""
    routers = _routers_or_raise(model)
    return len(routers), _top_k(routers)


@contextmanager
def recording_routes(model: nn.Module) -> Iterator[list[list[Tensor]]]:
    """Record the experts each router returns during forwards run inside the block.

    Yields one list per router (module order) that receives each call's ``[N, k]`` int64 experts
    (``N`` = the call's flattened positions).  Recorded after any active replay, so it sees the
    experts actually used.
    """
    routers = _routers_or_raise(model)
    calls: list[list[Tensor]] = [[] for _ in routers]
    handles = []
    try:
        for router, sink in zip(routers, calls, strict=True):
            handles.append(router.register_forward_hook(_recorder(sink)))
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def capture_routes(
    model: nn.Module, input_ids: Tensor, *, attention_mask: Tensor | None = None
) -> Tensor:
    """``[B, T, L, k]`` int64: the experts each MoE layer chose for each position of ``input_ids``.

    ``input_ids: [B, T]``.  One no-grad forward without KV cache; the routes are the same top-k the
    model's own router takes (ties as it breaks them), most weighted expert first.
    """
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a [B, T] tensor, got {_describe(input_ids)}")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"input_ids must be int64 or int32, got {input_ids.dtype}")
    batch, seq = input_ids.shape
    with recording_routes(model) as calls, torch.no_grad():
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    per_layer = []
    for layer, layer_calls in enumerate(calls):
        if len(layer_calls) != 1 or layer_calls[0].shape[0] != batch * seq:
            raise RuntimeError(
                f"MoE layer {layer} routed {[c.shape[0] for c in layer_calls]} rows in one "
                f"forward, "
                f"expected one call of B*T={batch * seq}"
            )
        per_layer.append(layer_calls[0].view(batch, seq, -1))
    return torch.stack(per_layer, dim=2).to(torch.int64)


@contextmanager
def replay_routes(model: nn.Module, routes: Tensor) -> Iterator[None]:
    """Inside the block every MoE layer uses ``routes`` (``[B, T, L, k]``) instead of its top-k.

    Each forward must feed ``B·T`` positions (the full sequences the routes were recorded for; a
    KV-cached step raises).  A position whose row holds a negative entry (e.g. ``-1`` for padding
    the engine never routed) keeps the live router's choice.  Gates over the replayed experts are
    recomputed from the current router logits: ``softmax(logits)`` at the replayed experts,
    renormalized over them where the architecture renormalizes (Mixtral always, the others when
    ``norm_topk_prob``), so the router still gets gradients.  With routes equal to the router's
    own choice the outputs are bit-identical to a forward without replay.
    """
    routers = _routers_or_raise(model)
    _check_routes(routes, routers)
    handles = []
    try:
        for layer, router in enumerate(routers):
            layer_routes = routes[:, :, layer, :].reshape(-1, routes.shape[-1])  # [B*T, k]
            handles.append(router.register_forward_hook(_replayer(router, layer, layer_routes)))
        yield
    finally:
        for handle in handles:
            handle.remove()


def routing_flip_rate(recorded: Tensor, current: Tensor, mask: Tensor | None = None) -> float:
    """Fraction of recorded expert choices absent from the current top-k set (order ignored).

    ``recorded, current: [B, T, L, k]`` int; ``mask: [B, T]`` bool selects the positions counted
    (default all).  Per (position, layer) the count is ``|recorded \\ current|``, averaged over the
    ``k`` slots, layers and selected positions: 0 = identical routing, 1 = disjoint.  No selected
    position gives 0.0 (nothing could flip).
    """
    for name, value in (("recorded", recorded), ("current", current)):
        if not isinstance(value, Tensor) or value.dim() != 4:
            raise ValueError(f"{name} must be a [B, T, L, k] tensor, got {_describe(value)}")
        if value.dtype.is_floating_point or value.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer expert ids, got {value.dtype}")
    if recorded.shape != current.shape:
        raise ValueError(
            f"recorded {tuple(recorded.shape)} and current {tuple(current.shape)} differ in shape"
        )
    kept = (recorded.unsqueeze(-1) == current.unsqueeze(-2)).any(-1)  # [B, T, L, k]
    flipped = (~kept).to(torch.float64).mean(dim=(-2, -1))  # [B, T]
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.shape != recorded.shape[:2]:
            raise ValueError(
                f"mask must be [B, T] = {tuple(recorded.shape[:2])}, got {_describe(mask)}"
            )
        flipped = flipped[mask.to(torch.bool)]
    return float(flipped.mean()) if flipped.numel() else 0.0


# --- internals -------------------------------------------------------------------------------


def _recorder(sink: list[Tensor]) -> Any:
    def hook(module: nn.Module, args: Any, output: Any) -> None:
        sink.append(_unpack(module, output)[2].detach().clone())

    return hook


def _replayer(router: nn.Module, layer: int, layer_routes: Tensor) -> Any:
    normalize = bool(getattr(router, "norm_topk_prob", True))  # Mixtral has no flag: always on
    live_rows = (layer_routes < 0).any(-1)  # [B*T]: rows the engine did not route
    any_live = bool(live_rows.any())

    def hook(module: nn.Module, args: Any, output: Any) -> tuple[Tensor, Tensor, Tensor]:
        logits, gates, experts = _unpack(module, output)  # [N, E], [N, k], [N, k]
        if logits.shape[0] != layer_routes.shape[0]:
            raise ValueError(
                f"replay_routes: MoE layer {layer} got {logits.shape[0]} positions but the routes "
                f"hold B*T={layer_routes.shape[0]}; replay needs the full sequences they were "
                "recorded for (no KV-cached steps)"
            )
        chosen = layer_routes.to(experts.device)
        if any_live:
            chosen = torch.where(live_rows.to(experts.device)[:, None], experts, chosen)
        # The same ops as the routers' own gates (fp32 softmax, gather = topk values,
        # renormalize), so replaying the router's own choice is bit-identical.
        probs = torch.softmax(logits.float(), dim=-1)
        new_gates = probs.gather(-1, chosen)
        if normalize:
            new_gates = new_gates / new_gates.sum(dim=-1, keepdim=True)
        return logits, new_gates.to(gates.dtype), chosen.to(experts.dtype)

    return hook


def _unpack(module: nn.Module, output: Any) -> tuple[Tensor, Tensor, Tensor]:
    if not (isinstance(output, tuple) and len(output) == 3):
        raise TypeError(
            f"{type(module).__name__} returned {type(output).__name__}; keep routing expects a "
            "router returning (logits, gates, experts)"
        )
    return output


def _check_routes(routes: Tensor, routers: list[nn.Module]) -> None:
    if not isinstance(routes, Tensor) or routes.dim() != 4:
        raise ValueError(f"routes must be a [B, T, L, k] tensor, got {_describe(routes)}")
    if routes.dtype.is_floating_point or routes.dtype == torch.bool:
        raise TypeError(f"routes must hold integer expert ids, got {routes.dtype}")
    n_layers, k = len(routers), _top_k(routers)
    if routes.shape[2] != n_layers or routes.shape[3] != k:
        raise ValueError(
            f"routes have L={routes.shape[2]}, k={routes.shape[3]}; the model has "
            f"{n_layers} MoE layers with top-{k}"
        )
    n_experts = min(_n_experts(r) for r in routers)
    if routes.numel() and int(routes.max()) >= n_experts:
        raise ValueError(f"routes name expert {int(routes.max())}; the model has {n_experts}")
    routed = (routes >= 0).all(-1)  # [B, T, L]: rows that are replayed
    ordered = routes.sort(dim=-1).values
    repeats = (ordered[..., 1:] == ordered[..., :-1]).any(-1) & routed
    if bool(repeats.any()):
        where = tuple(int(i) for i in repeats.nonzero()[0])
        raise ValueError(f"routes repeat an expert within one top-k at (b, t, layer)={where}")


def _routers_or_raise(model: nn.Module) -> list[nn.Module]:
    routers = moe_routers(model)
    if not routers:
        raise ValueError(
            f"{type(model).__name__} has no MoE router modules (supported: Mixtral, Qwen2-MoE, "
            "Qwen3-MoE, OLMoE top-k routers)"
        )
    return routers


def _int_attr(module: nn.Module, name: str) -> int:
    """A plain int attribute of ``module`` (``top_k``): torch types ``Module.__getattr__`` as
    ``Tensor | Module``, which only covers parameters, buffers and submodules."""
    return int(getattr(module, name))


def _top_k(routers: list[nn.Module]) -> int:
    ks = {_int_attr(r, "top_k") for r in routers}
    if len(ks) != 1:
        raise ValueError(f"MoE layers disagree on top-k: {sorted(ks)}")
    return ks.pop()


def _n_experts(router: nn.Module) -> int:
    weight = router.weight
    if not isinstance(weight, Tensor):
        raise TypeError(f"{type(router).__name__}.weight is not a tensor")
    return int(getattr(router, "num_experts", None) or weight.shape[0])


def _recorded_router_classes(model: nn.Module) -> tuple[type, ...]:
    """Router classes transformers records ``router_logits`` from (``_can_record_outputs``)."""
    spec = getattr(model, "_can_record_outputs", None) or {}
    entries = spec.get("router_logits") if isinstance(spec, dict) else None
    if entries is None:
        return ()
    entries = entries if isinstance(entries, (list, tuple)) else [entries]
    classes = [getattr(e, "target_class", e) for e in entries]
    return tuple(c for c in classes if isinstance(c, type) and issubclass(c, nn.Module))


def _looks_like_router(module: nn.Module) -> bool:
    """A top-k router by the HF convention: ``*TopKRouter`` with ``top_k`` and a 2-D ``weight``."""
    weight = getattr(module, "weight", None)
    return (
        type(module).__name__.endswith("TopKRouter")
        and isinstance(getattr(module, "top_k", None), int)
        and isinstance(weight, Tensor)
        and weight.dim() == 2
    )


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return type(value).__name__
