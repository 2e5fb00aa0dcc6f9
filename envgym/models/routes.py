"""MoE routes for Keep Routing (DeepSeek-V3.2 §3.1): which experts each MoE layer used.

For every position a forward pass feeds (prompt, tool and sampled tokens alike), the engine
records per MoE layer the top-k experts the router chose for that position's hidden state: the
routing the trainer replays over the whole sequence to compute π_θ (envgym/trainer/routing.py).  The
routes live beside the KV cache (envgym.models.kv.KVStore), so prefix reuse and prefix copies
carry the routes of the keys and values they reuse.
"""

from __future__ import annotations

from typing import Any

import torch


def moe_top_k(config: Any) -> int:
    """Experts per token when the model is a mixture of experts, else 0."""
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    return int(getattr(config, "num_experts_per_tok", 0) or 0) if experts else 0


def top_experts(
    router_logits: tuple[torch.Tensor, ...], batch: int, new: int, k: int
) -> torch.Tensor:
    """``[batch, new, L, k]`` int64: per row, position and MoE layer the top-k experts.

    Each layer's router logits are ``[batch * new, experts]`` (rows flattened batch-major).  The
    experts are taken as softmax-top-k routers take them (Mixtral, Qwen-MoE, OLMoE: top-k of
    the fp32 softmax, most weighted first), so ties resolve as the router's own do.
    """
    per_layer = [
        torch.topk(torch.softmax(logits.float(), dim=-1), k, dim=-1).indices.view(batch, new, k)
        for logits in router_logits
    ]
    return torch.stack(per_layer, dim=2)
