"""LoRA policies: low-rank adapters on a frozen base model (``model.lora`` in the config).

Each targeted ``nn.Linear`` becomes a :class:`LoRALinear` computing ``W x + b + s · B A x``
(``s = alpha / rank``): the base ``W``/``b`` are the very parameters the model had, frozen; only
``A [r, in]`` and ``B [out, r]`` train.  ``B`` starts at zero, so at step 0 the policy *is* the
base model (the first ratio is 1, the reference policy equals it).

Everything outside the update sees a plain model:

* :func:`merged_state_dict` — the base's key names with ``W + s · B A`` in place of ``W``: what
  the local engine loads after every step (envgym/trainer/weight_sync.py), so it decodes at the cost
  of the base model;
* :func:`merged_view` — inside the block the LoRA layers are swapped for plain ``nn.Linear`` s
  holding the merged weights (the trained tensors are not touched), so ``save_pretrained`` writes
  an ordinary HF folder: the vLLM engine's reload and the exported policy;
* :func:`checkpoint_state` / :func:`load_checkpoint_state` — a checkpoint holds the adapters
  only (the base comes from ``model.path`` again) plus a fingerprint of the frozen weights, so
  resuming on another base is refused instead of silently training a different policy.

Adapters live in float32 (float64 for a float64 model) whatever the base dtype: AdamW updates of
bf16 adapters lose most of their bits.  Dropout (``model.lora.dropout``) acts on the adapter's
input in the gradient pass only (:func:`adapter_dropout`), never in the no-grad π_old and
reference passes nor in the engine.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.nn import functional as F

# Llama-family names of the attention and MLP projections.  Adapters on every linear layer,
# MLP included, are what makes low-rank RL match full fine-tuning at a higher learning rate.
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FINGERPRINT_KEY = "__lora_base_fingerprint__"
_MAX_RANK = 4096  # beyond this an adapter is no longer low-rank on any model this trains


@dataclass(frozen=True)
class LoRAConfig:
    """``model.lora``: the adapters (null = train every weight)."""

    rank: int = 16
    alpha: float = 32.0  # the update is scaled by alpha / rank
    dropout: float = 0.0  # on the adapter's input, gradient pass only
    # module names (the last part of the dotted name) whose nn.Linear gets an adapter
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))

    def __post_init__(self) -> None:
        if not 1 <= self.rank <= _MAX_RANK:
            raise ValueError(f"rank must be in [1, {_MAX_RANK}], not {self.rank}")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise ValueError(f"alpha must be > 0, not {self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), not {self.dropout}")
        if not self.target_modules:
            raise ValueError("target_modules is empty: name at least one linear layer (q_proj, …)")
        for name in self.target_modules:
            if not name or "." in name or name != name.strip():
                raise ValueError(
                    f"target_modules holds {name!r}: give a module's own name (q_proj), "
                    "not a dotted path or an empty string"
                )

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update (see the module docstring).

    ``weight`` and ``bias`` are the base layer's own parameters, registered under the same names,
    so the state-dict keys of the base model are unchanged and only ``lora_A``/``lora_B`` are new.
    """

    def __init__(self, base: nn.Linear, config: LoRAConfig) -> None:
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        dtype = torch.promote_types(base.weight.dtype, torch.float32)
        device = base.weight.device
        self.lora_A = nn.Parameter(
            torch.empty(config.rank, self.in_features, dtype=dtype, device=device)
        )
        self.lora_B = nn.Parameter(
            torch.zeros(self.out_features, config.rank, dtype=dtype, device=device)
        )
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as nn.Linear initializes
        self.scale = config.scale
        self.dropout = config.dropout
        self.dropout_on = False  # set by adapter_dropout for the gradient pass

    def forward(self, x: Tensor) -> Tensor:
        out = F.linear(x, self.weight, self.bias)
        h = x
        if self.dropout_on and self.dropout > 0:
            h = F.dropout(h, self.dropout, training=True)
        delta = F.linear(F.linear(h.to(self.lora_A.dtype), self.lora_A), self.lora_B)
        return out + (delta * self.scale).to(out.dtype)

    def merged_weight(self) -> Tensor:
        """``W + s · B A`` in the base dtype (computed in the adapters' dtype), detached."""
        with torch.no_grad():
            w = self.weight.to(self.lora_A.dtype) + self.scale * (self.lora_B @ self.lora_A)
            return w.to(self.weight.dtype)

    def plain(self) -> nn.Linear:
        """An ``nn.Linear`` computing what this layer computes (merged weight, same bias)."""
        w = self.merged_weight()
        out = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.bias is not None,
            device=w.device,
            dtype=w.dtype,
        )
        with torch.no_grad():
            out.weight.copy_(w)
            if self.bias is not None:
                out.bias.copy_(self.bias)
        return out.requires_grad_(False)

    def extra_repr(self) -> str:
        rank = self.lora_A.shape[0]
        return f"in={self.in_features}, out={self.out_features}, rank={rank}, scale={self.scale:g}"


def apply_lora(model: nn.Module, config: LoRAConfig | None) -> list[str]:
    """Freeze every parameter of ``model`` and put an adapter on each targeted linear layer, in
    place; returns the dotted names wrapped (none, model untouched, when ``config`` is None).  A ValueError names a target that matches no module,
    one that is not a linear layer, the LM head (the log-prob path reads its weight directly,
    envgym/trainer/policy.py) and a model that already has adapters."""
    if config is None:
        return []
    if lora_layers(model):
        raise ValueError(f"{type(model).__name__} already has LoRA adapters")
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    wanted = set(config.target_modules)
    found: dict[str, list[tuple[str, nn.Module]]] = {t: [] for t in wanted}
    linear_names: set[str] = set()
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(module, nn.Linear):
            linear_names.add(leaf)
        if leaf in wanted:
            found[leaf].append((name, module))
    unknown = sorted(t for t, hits in found.items() if not hits)
    if unknown:
        raise ValueError(
            f"model.lora.target_modules: {unknown} match no module of {type(model).__name__} "
            f"(its linear layers: {sorted(linear_names)})"
        )
    for target, hits in sorted(found.items()):
        for name, module in hits:
            if module is head:
                raise ValueError(
                    f"model.lora.target_modules: {target!r} is the LM head ({name}); the log-prob "
                    "path reads its weight directly, so it cannot take an adapter"
                )
            if not isinstance(module, nn.Linear):
                raise ValueError(
                    f"model.lora.target_modules: {target!r} ({name}) is a "
                    f"{type(module).__name__}, not a linear layer (its linear layers: "
                    f"{sorted(linear_names)})"
                )
    model.requires_grad_(False)
    wrapped = sorted(name for hits in found.values() for name, _ in hits)
    for name in wrapped:
        parent, leaf = _parent(model, name)
        setattr(parent, leaf, LoRALinear(getattr(parent, leaf), config))
    return wrapped


def lora_layers(model: nn.Module) -> list[tuple[str, LoRALinear]]:
    """``(dotted name, layer)`` of every adapter in ``model``, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, LoRALinear)]


def adapter_names(model: nn.Module) -> list[str]:
    """State-dict keys of the adapters (``….lora_A``, ``….lora_B``)."""
    return [f"{n}.{p}" for n, _ in lora_layers(model) for p in ("lora_A", "lora_B")]


@contextlib.contextmanager
def adapter_dropout(model: nn.Module) -> Iterator[None]:
    """Adapter dropout on inside the block (the gradient pass), off again on exit."""
    layers = [m for _, m in lora_layers(model)]
    for m in layers:
        m.dropout_on = True
    try:
        yield
    finally:
        for m in layers:
            m.dropout_on = False


def merged_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """``model.state_dict()`` as the base model's keys with the adapters merged into the weights
    (the model's own state dict when it has no adapters)."""
    state = model.state_dict()
    for name, layer in lora_layers(model):
        state[f"{name}.weight"] = layer.merged_weight()
        del state[f"{name}.lora_A"], state[f"{name}.lora_B"]
    return state


@contextlib.contextmanager
def merged_view(model: nn.Module) -> Iterator[nn.Module]:
    """Inside the block ``model`` is a plain model with merged weights: every LoRA layer is
    swapped for :meth:`LoRALinear.plain` and put back on exit (exceptions included).  The
    trained tensors are never modified, so nothing drifts however often it is entered."""
    swapped = []
    try:
        for name, layer in lora_layers(model):
            parent, leaf = _parent(model, name)
            setattr(parent, leaf, layer.plain())
            swapped.append((parent, leaf, layer))
        yield model
    finally:
        for parent, leaf, layer in reversed(swapped):
            setattr(parent, leaf, layer)


def merged_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` as a plain model (adapters merged; a plain copy without any)."""
    with merged_view(model):
        return copy.deepcopy(model)


def base_fingerprint(model: nn.Module) -> Tensor:
    """``[count, Σ w, Σ w²]`` (float64, CPU) over the frozen parameters: cheap, and enough to tell
    another base model (or a changed ``model.path`` folder) from the one adapters were trained on."""
    total = torch.zeros(3, dtype=torch.float64)
    for p in model.parameters():
        if p.requires_grad:
            continue
        w = p.detach().to(torch.float64)
        total += torch.stack(
            [
                torch.tensor(float(w.numel()), dtype=torch.float64),
                w.sum().cpu(),
                (w * w).sum().cpu(),
            ]
        )
    return total


def checkpoint_state(model: nn.Module) -> dict[str, Tensor]:
    """What a checkpoint stores of ``model``: its adapters and :func:`base_fingerprint` when it
    has adapters, else its whole state dict."""
    if not lora_layers(model):
        return model.state_dict()
    keep = set(adapter_names(model))
    state = {k: v for k, v in model.state_dict().items() if k in keep}
    state[FINGERPRINT_KEY] = base_fingerprint(model)
    return state


def load_checkpoint_state(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Load :func:`checkpoint_state`'s ``state`` into ``model``; a ValueError when a LoRA
    checkpoint meets a model without adapters (or the reverse), other adapters, or another base."""
    saved_fp = state.get(FINGERPRINT_KEY)
    if not lora_layers(model):
        if saved_fp is not None:
            raise ValueError(
                "the checkpoint holds LoRA adapters but the model has none (model.lora unset?)"
            )
        model.load_state_dict(state)
        return
    if saved_fp is None:
        raise ValueError(
            "the checkpoint holds a full model but this model has LoRA adapters (model.lora set?)"
        )
    now = base_fingerprint(model)
    if not torch.allclose(saved_fp.to(torch.float64), now, rtol=1e-9, atol=0.0):
        raise ValueError(
            "the base weights differ from those the checkpoint's LoRA adapters were trained on "
            f"(fingerprint {saved_fp.tolist()} vs {now.tolist()}): another model.path?"
        )
    adapters = {k: v for k, v in state.items() if k != FINGERPRINT_KEY}
    expected = set(adapter_names(model))
    if set(adapters) != expected:
        missing, extra = sorted(expected - set(adapters)), sorted(set(adapters) - expected)
        raise ValueError(
            f"the checkpoint's adapters do not match the model's (missing {missing[:4]}, "
            f"unexpected {extra[:4]}): another model.lora.target_modules?"
        )
    try:
        model.load_state_dict(adapters, strict=False)
    except RuntimeError as err:  # a shape mismatch: adapters of another rank
        raise ValueError(
            f"the checkpoint's adapters do not fit the model's (another model.lora.rank?): {err}"
        ) from None


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    parent_name, _, leaf = name.rpartition(".")
    return (model.get_submodule(parent_name) if parent_name else model), leaf
