"""transformers' MoE expert layers on ``envgym.kernels.moe``, so the trainer uses the project's
kernels.

Mixtral, Qwen-MoE and OLMoE keep their experts in one ``*Experts`` module whose forward
transformers dispatches through ``ALL_EXPERTS_FUNCTIONS`` by ``config._experts_implementation``.
Registering :func:`_kernel_experts` there and selecting it swaps only the expert compute (sort by
expert, one matmul per expert group, weighted scatter back); routers are untouched, so keep
routing (``envgym.trainer.routing.replay_routes``, which patches routers) composes with it.

Only the layout the kernel implements is switched: SwiGLU (SiLU) experts, gate and up
concatenated in ``gate_up_proj [E, 2F, D]``, ``down_proj [E, D, F]``, no bias. Anything else keeps
transformers' own implementation (:func:`use_kernel_experts` returns False and says why).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envgym.kernels.moe import moe_experts_concat

NAME = "envgym_grouped"
_PROBE = torch.linspace(-4.0, 4.0, 17)  # the activation is checked by value, whatever its class


def _kernel_experts(
    self: nn.Module, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor
) -> Tensor:
    """``[N, D]`` → ``[N, D]``: the experts' weighted sum for each token's top-k."""
    gate_up, down = self.gate_up_proj, self.down_proj
    if not isinstance(gate_up, Tensor) or not isinstance(down, Tensor):
        raise TypeError(f"{type(self).__name__}: gate_up_proj and down_proj must be tensors")
    n_experts = gate_up.shape[0]
    dropped = top_k_index >= n_experts  # transformers' "no expert" sentinel (expert parallel)
    if bool(dropped.any()):
        top_k_index = top_k_index.masked_fill(dropped, 0)
        top_k_weights = top_k_weights.masked_fill(dropped, 0.0)
    return moe_experts_concat(
        hidden_states,
        top_k_index,
        top_k_weights.to(hidden_states.dtype),
        gate_up,
        down,
    )


def register() -> None:
    """Make :data:`NAME` a valid ``experts_implementation`` (idempotent)."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(NAME, _kernel_experts)


def kernel_layout_problem(model: nn.Module) -> str | None:
    """Why ``model``'s experts cannot run on the kernel, or None when every one can."""
    experts = [m for m in model.modules() if hasattr(m, "gate_up_proj") and hasattr(m, "down_proj")]
    if not experts:
        return "no MoE experts module (a dense model)"
    for m in experts:
        gate_up, down = m.gate_up_proj, m.down_proj
        if not (isinstance(gate_up, Tensor) and isinstance(down, Tensor)) or gate_up.dim() != 3:
            return f"{type(m).__name__}: expert weights are not [E, 2F, D] tensors"
        e, two_f, d = gate_up.shape
        if two_f % 2 or tuple(down.shape) != (e, d, two_f // 2):
            return f"{type(m).__name__}: gate_up_proj {tuple(gate_up.shape)} / down_proj {tuple(down.shape)}"
        if getattr(m, "has_bias", False) or getattr(m, "is_transposed", False):
            return f"{type(m).__name__}: biased or transposed experts"
        if not getattr(m, "is_concatenated", True) or not getattr(m, "has_gate", True):
            return f"{type(m).__name__}: interleaved or gateless experts"
        act = getattr(m, "act_fn", None)
        if not callable(act) or not torch.allclose(act(_PROBE), F.silu(_PROBE)):
            return f"{type(m).__name__}: activation {type(act).__name__} is not SiLU"
    return None


def use_kernel_experts(model: Any) -> str | None:
    """Switch an HF MoE model's experts to the kernel; returns None, or why it was not switched."""
    problem = kernel_layout_problem(model)
    if problem is None and not model._can_set_experts_implementation():
        problem = f"{type(model).__name__} does not dispatch its experts through transformers"
    if problem is not None:
        return problem
    register()
    model.set_experts_implementation(NAME)
    return None
