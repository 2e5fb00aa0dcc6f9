"""``micro_tokens: auto``: the microbatch size from the model's shape and the memory there is.

What a microbatch costs is the transformer's activations autograd keeps for backward, per token
and per layer a few vectors of the hidden size and of the MLP's width (the normed inputs, q/k/v,
the attention output, the gate, up and gated products); the log-prob op adds no ``[N, V]``
(envgym/kernels/logprob.py).  What the run holds anyway is the training state: weights, gradients and
AdamW's two moments, 4 copies of the parameters.  ``auto`` lets the activations of one
microbatch take at most as much memory as that state (and at most half of the memory free on the
policy's device), so the peak stays about twice the state instead of growing with the batch:
measured on SmolLM2-135M, fp32, CPU (docs/TRAINER.md, "Beside TRL"), the fixed 8192 peaked at
10.3 GiB and ``auto`` (1024 there) at 4.0 GiB, for a 1.10× longer iteration.

The result is a power of two in ``[MIN_TOKENS, MAX_TOKENS]``; an integer in the config is used as
it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

AUTO: Literal["auto"] = "auto"
MicroTokens = int | Literal["auto"]
MIN_TOKENS = 256
MAX_TOKENS = 16384
# Activation vectors autograd keeps per token and layer, in units of the hidden size and of the
# MLP width: fitted to the measured growth of peak RSS with micro_tokens on SmolLM2-135M
# (docs/TRAINER.md), which the shapes of a Llama layer account for.
HIDDEN_VECTORS = 8
MLP_VECTORS = 4
STATE_COPIES = 4  # weights, gradients, AdamW's exp_avg and exp_avg_sq
# The budget is never below this: a small model's state says nothing about what a microbatch may
# use (the test models would otherwise run 256-token microbatches for nothing).
MIN_BUDGET_BYTES = 1 << 30


@dataclass(frozen=True)
class ModelShape:
    """What the rule reads of a model: sizes and the bytes of one parameter."""

    layers: int
    hidden: int
    mlp: int  # the MLP's inner width (intermediate_size; 4 × hidden when the config has none)
    params: int
    dtype_bytes: int

    @property
    def activation_bytes_per_token(self) -> int:
        per_layer = HIDDEN_VECTORS * self.hidden + MLP_VECTORS * self.mlp
        return self.layers * per_layer * self.dtype_bytes

    @property
    def state_bytes(self) -> int:
        return STATE_COPIES * self.params * self.dtype_bytes


def shape_of(model: Any) -> ModelShape:
    """The :class:`ModelShape` of a Hugging Face causal LM (its ``config`` and parameters)."""
    cfg = model.config
    cfg = getattr(cfg, "text_config", None) or cfg  # multimodal wrappers keep the LM's config
    hidden = int(cfg.hidden_size)
    mlp = int(getattr(cfg, "intermediate_size", 0) or 4 * hidden)
    trained = [p for p in model.parameters() if p.requires_grad] or list(model.parameters())
    first = trained[0]
    return ModelShape(
        layers=int(cfg.num_hidden_layers),
        hidden=hidden,
        mlp=mlp,
        params=sum(p.numel() for p in trained),
        dtype_bytes=first.element_size(),
    )


def free_bytes(device: torch.device) -> int:
    """Memory free for the run on ``device``: CUDA's free memory, else the host's MemAvailable."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30  # no /proc (not Linux): assume a small machine


def auto_micro_tokens(shape: ModelShape, free: int) -> int:
    """The largest power of two whose activations fit ``min(max(state, 1 GiB), free / 2)``,
    clamped to ``[MIN_TOKENS, MAX_TOKENS]``."""
    budget = min(max(shape.state_bytes, MIN_BUDGET_BYTES), free // 2)
    fits = budget // max(1, shape.activation_bytes_per_token)
    if fits < MIN_TOKENS:
        return MIN_TOKENS
    return min(MAX_TOKENS, 1 << int(math.log2(fits)))


def resolve_micro_tokens(setting: MicroTokens, model: Any) -> int:
    """``setting`` when it is a number, else :func:`auto_micro_tokens` for ``model`` where it is."""
    if isinstance(setting, int):
        return setting
    first = next(model.parameters())
    return auto_micro_tokens(shape_of(model), free_bytes(first.device))
