"""SmolMoE: sparse upcycling of a dense Llama-architecture model into a standard HF Mixtral.

Sparse upcycling (Komatsuzaki et al., 2022, "Sparse Upcycling: Training Mixture-of-Experts from
Dense Checkpoints"): every decoder layer's MLP is copied into ``E`` experts and a router picks the
top-``k`` of them per token.  Everything else (embeddings, attention, norms, head) is copied as is.
The result is saved as a plain ``MixtralForCausalLM`` folder (``save_pretrained`` + tokenizer +
chat template), so ``AutoModelForCausalLM.from_pretrained`` loads it unchanged and engines that
serve Mixtral (vLLM) serve it.  It is the MoE policy the trainer uses to exercise keep routing
(DeepSeek-V3.2 §3.1 "Keep Routing", envgym/trainer/routing.py) on a CPU.

Why the upcycle starts out equal to the dense model.  A Mixtral block computes
``y = Σ_{j∈topk} g_j · E_j(x)`` with ``g = softmax(router logits over the top-k)`` (Mixtral always
renormalizes the top-k gates, so ``Σ g_j = 1``).  With identical experts ``E_j = MLP`` this is
``MLP(x) · Σ g_j = MLP(x)`` *whatever the router says*.  So the router can be initialized
randomly (``router_std``, default HF's ``initializer_range`` 0.02) — it spreads tokens over all
experts from the first step, which is what lets the experts diverge under training — and the
step-0 model still equals the dense one up to float rounding of ``Σ g_j`` (measured in
docs/MOE.md).  A zero router would give exact ties, send every token to experts 0 and 1 and
receive no gradient while the experts are identical, so it is not the default.  ``noise > 0``
perturbs each expert copy (``W + noise · std(W) · ε``, ε ~ N(0, 1), seeded) so experts differ from
the first step; then the upcycle only approximates the dense model.

Embeddings are saved untied (an explicit ``lm_head.weight`` copy, ``tie_word_embeddings=False``):
the dense model's tied head is copied exactly, and loaders that do not honour ties for Mixtral
still get a head.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

# Files besides the weights that make the folder usable on its own (chat template, generation).
_SIDE_FILES = ("generation_config.json",)


def upcycle(
    src: str | Path,
    out: Path,
    *,
    n_experts: int = 4,
    top_k: int = 2,
    noise: float = 0.0,
    seed: int = 0,
    router_std: float | None = None,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Upcycle the dense HF Llama-architecture model at ``src`` into a Mixtral saved at ``out``.

    ``n_experts`` copies of each layer's MLP, a router choosing ``top_k`` of them per token,
    router weights ~ N(0, ``router_std``²) (default: the source config's ``initializer_range``),
    experts perturbed by relative Gaussian ``noise`` (0 = exact copies), all drawn from ``seed``.
    Returns ``out``, which then holds config, weights, tokenizer and chat template.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _check_args(n_experts, top_k, noise, seed, router_std)
    src = Path(src)
    out = Path(out)
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"src={str(src)!r} has no config.json: not an HF model folder")
    dense = AutoModelForCausalLM.from_pretrained(str(src), dtype=dtype)
    moe = upcycle_model(
        dense, n_experts=n_experts, top_k=top_k, noise=noise, seed=seed, router_std=router_std
    )
    out.mkdir(parents=True, exist_ok=True)
    moe.save_pretrained(str(out))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(src))
    except (OSError, ValueError) as err:
        raise ValueError(f"no tokenizer could be read from src={str(src)!r}: {err}") from err
    tokenizer.save_pretrained(str(out))  # writes tokenizer files and chat_template.jinja
    for name in _SIDE_FILES:
        if (src / name).is_file() and not (out / name).exists():
            shutil.copyfile(src / name, out / name)
    return out


def upcycle_model(
    dense: Any,
    *,
    n_experts: int = 4,
    top_k: int = 2,
    noise: float = 0.0,
    seed: int = 0,
    router_std: float | None = None,
) -> Any:
    """The in-memory upcycle: a ``MixtralForCausalLM`` built from a ``LlamaForCausalLM``.

    Same dtype as ``dense``; ``dense`` itself is left unchanged.
    """
    from transformers import MixtralForCausalLM

    _check_args(n_experts, top_k, noise, seed, router_std)
    dtype = next(dense.parameters()).dtype
    # transformers' default grouped_mm experts kernel has no float64 version; eager has.
    kernel = "eager" if dtype == torch.float64 else None
    config = mixtral_config(
        dense.config, n_experts=n_experts, top_k=top_k, experts_implementation=kernel
    )
    std = float(dense.config.initializer_range if router_std is None else router_std)
    with torch.device("meta"):
        moe = MixtralForCausalLM(config)
    moe = moe.to_empty(device="cpu").to(dtype)
    state = _upcycled_state(dense, moe, noise=noise, seed=seed, router_std=std)
    missing, unexpected = moe.load_state_dict(state, strict=False, assign=True)
    # Rotary inverse frequencies are buffers computed from the config, not weights: rebuild them.
    moe.model.rotary_emb = type(moe.model.rotary_emb)(config)
    if unexpected or [m for m in missing if "rotary_emb" not in m]:
        raise RuntimeError(f"upcycle left weights unset: {missing=}, {unexpected=}")
    moe.eval()
    return moe


def mixtral_config(
    dense_config: Any, *, n_experts: int, top_k: int, experts_implementation: str | None = None
) -> Any:
    """The Mixtral config that reproduces ``dense_config`` (a Llama config) with MoE MLPs.

    ``experts_implementation`` picks transformers' expert kernel (None = its default); it is a
    run-time choice that ``save_pretrained`` does not write.
    """
    from transformers import MixtralConfig

    if getattr(dense_config, "model_type", None) not in ("llama",):
        raise ValueError(
            f"upcycle needs a Llama-architecture model, got model_type="
            f"{getattr(dense_config, 'model_type', None)!r}"
        )
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(dense_config, flag, False):
            raise ValueError(f"Mixtral has no biases; the source has {flag}=True")
    if getattr(dense_config, "hidden_act", "silu") != "silu":
        raise ValueError(
            f"Mixtral experts use silu; the source has hidden_act={dense_config.hidden_act!r}"
        )
    # experts_implementation is taken by PreTrainedConfig's **kwargs, which the typed
    # MixtralConfig signature does not declare.
    return MixtralConfig(  # type: ignore[call-arg]  # transformers' stubs: see above
        vocab_size=dense_config.vocab_size,
        hidden_size=dense_config.hidden_size,
        intermediate_size=dense_config.intermediate_size,
        num_hidden_layers=dense_config.num_hidden_layers,
        num_attention_heads=dense_config.num_attention_heads,
        num_key_value_heads=dense_config.num_key_value_heads,
        head_dim=getattr(dense_config, "head_dim", None)
        or dense_config.hidden_size // dense_config.num_attention_heads,
        hidden_act="silu",
        max_position_embeddings=dense_config.max_position_embeddings,
        initializer_range=dense_config.initializer_range,
        rms_norm_eps=dense_config.rms_norm_eps,
        rope_parameters=dict(dense_config.rope_parameters),
        bos_token_id=dense_config.bos_token_id,
        eos_token_id=dense_config.eos_token_id,
        pad_token_id=dense_config.pad_token_id,
        tie_word_embeddings=False,
        sliding_window=None,
        attention_dropout=getattr(dense_config, "attention_dropout", 0.0),
        num_local_experts=n_experts,
        num_experts_per_tok=top_k,
        output_router_logits=False,
        router_jitter_noise=0.0,
        experts_implementation=experts_implementation,
    )


def _upcycled_state(
    dense: Any, moe: Any, *, noise: float, seed: int, router_std: float
) -> dict[str, torch.Tensor]:
    """Mixtral state dict (in-memory names) from the dense weights."""
    gen = torch.Generator().manual_seed(seed)
    dense_state = dense.state_dict()
    state: dict[str, torch.Tensor] = {}
    for name, tensor in dense_state.items():
        if ".mlp." in name or "rotary_emb" in name:
            continue
        state[name] = tensor.detach().clone()
    # An explicit head: the dense model may tie it to the embeddings (SmolLM2 does).
    state["lm_head.weight"] = dense.get_output_embeddings().weight.detach().clone()
    n_experts = moe.config.num_local_experts
    for i, layer in enumerate(dense.model.layers):
        mlp = layer.mlp
        gate, up, down = (m.weight.detach() for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        gate_up = torch.cat([gate, up], dim=0)  # [2I, H]: Mixtral's fused layout (gate first)
        prefix = f"model.layers.{i}.mlp."
        state[prefix + "experts.gate_up_proj"] = _copies(gate_up, n_experts, noise, gen)
        state[prefix + "experts.down_proj"] = _copies(down, n_experts, noise, gen)  # [E, H, I]
        router = torch.randn(n_experts, gate.shape[1], generator=gen, dtype=torch.float64)
        state[prefix + "gate.weight"] = (router * router_std).to(gate.dtype)
    return state


def _copies(weight: torch.Tensor, n: int, noise: float, gen: torch.Generator) -> torch.Tensor:
    """``[n, *weight.shape]``: ``n`` copies of ``weight``, each + ``noise · std(weight) · ε``."""
    stacked = weight.unsqueeze(0).expand(n, *weight.shape).clone()
    if noise > 0:
        eps = torch.randn(stacked.shape, generator=gen, dtype=torch.float64)
        scale = noise * float(weight.double().std())
        stacked = (stacked.double() + scale * eps).to(weight.dtype)
    return stacked


def _check_args(
    n_experts: int, top_k: int, noise: float, seed: int, router_std: float | None
) -> None:
    for name, value in (("n_experts", n_experts), ("top_k", top_k), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if n_experts < 1:
        raise ValueError(f"n_experts must be >= 1, got {n_experts}")
    if not 1 <= top_k <= n_experts:
        raise ValueError(f"top_k must be in [1, n_experts={n_experts}], got {top_k}")
    for fname, fvalue in (("noise", noise), ("router_std", router_std)):
        if fvalue is None and fname == "router_std":
            continue
        if isinstance(fvalue, bool) or not isinstance(fvalue, (int, float)):
            raise TypeError(f"{fname} must be a float, got {fvalue!r}")
        if not fvalue >= 0 or fvalue == float("inf"):
            raise ValueError(f"{fname} must be a finite float >= 0, got {fvalue}")
