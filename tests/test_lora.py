"""envgym/trainer/lora.py: LoRA policies — exact at init, only adapters train, merged for the
engine, adapters-only checkpoints that resume exactly, and clear errors for bad configs.

The models are the tiny random Llama of tests/test_train_loop.py (float64 where a value is
compared); the GRPO runs use its real parity bundle env, with ``packing: true`` so the loop runs
both features together.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from test_train_loop import parity_bundle, tiny_model, train_config
from test_train_weight_sync import _Recorder, _served, server  # noqa: F401 - server: a fixture

from envgym.embedded import load_tokenizer
from envgym.trainer.config import ConfigError, config_from_dict
from envgym.trainer.loop import Trainer
from envgym.trainer.lora import (
    FINGERPRINT_KEY,
    LoRAConfig,
    LoRALinear,
    adapter_dropout,
    adapter_names,
    apply_lora,
    checkpoint_state,
    load_checkpoint_state,
    lora_layers,
    merged_copy,
    merged_state_dict,
    merged_view,
)
from envgym.trainer.weight_sync import sync_weights

IDS = torch.tensor([[5, 17, 300, 42, 9, 1000, 7, 8]])


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer()


def _lora_model(**kw: Any) -> Any:
    model = tiny_model().double()
    apply_lora(model, LoRAConfig(**{"rank": 4, "alpha": 8.0, **kw}))
    return model


def test_at_init_the_lora_forward_is_the_base_and_gradients_reach_only_adapters() -> None:
    base = tiny_model().double()
    model = copy.deepcopy(base)
    wrapped = apply_lora(model, LoRAConfig(rank=4, alpha=8.0))
    assert len(wrapped) == 2 * 7  # 2 layers × q, k, v, o, gate, up, down
    assert all(isinstance(model.get_submodule(n), LoRALinear) for n in wrapped)
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, base(IDS).logits)  # B = 0: exactly the base
    model(IDS).logits.logsumexp(-1).sum().backward()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(adapter_names(model))
    for name, p in model.named_parameters():
        if name in trainable:
            assert p.grad is not None, name
        else:
            assert p.grad is None, name  # frozen: no gradient computed at all
    # B = 0 ⇒ dL/dA = 0 at init; dL/dB ≠ 0, so the first step moves B.
    layer = model.get_submodule(wrapped[0])
    assert bool((layer.lora_A.grad == 0).all()) and bool(layer.lora_B.grad.abs().sum() > 0)


def test_merged_weights_compute_what_the_adapted_model_computes(tmp_path: Path) -> None:
    model = _lora_model()
    with torch.no_grad():
        for _, layer in lora_layers(model):
            layer.lora_B.normal_(std=0.05)  # a trained adapter
        want = model(IDS).logits
        plain = tiny_model().double()
        plain.load_state_dict(merged_state_dict(model))  # the base's own keys, nothing else
        assert torch.allclose(plain(IDS).logits, want, atol=1e-10, rtol=0)
        copied = merged_copy(model)
        assert not lora_layers(copied) and torch.allclose(copied(IDS).logits, want, atol=1e-10)
        weights = {k: v.clone() for k, v in model.state_dict().items()}
        with merged_view(model):
            assert not lora_layers(model)
            assert torch.allclose(model(IDS).logits, want, atol=1e-10)
            model.save_pretrained(tmp_path / "export")
        assert len(lora_layers(model)) == 14  # put back, the trained tensors untouched
        assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    from transformers import LlamaForCausalLM

    loaded = LlamaForCausalLM.from_pretrained(tmp_path / "export", dtype=torch.float64)
    with torch.no_grad():
        assert torch.allclose(loaded(IDS).logits, want, atol=1e-10)


def test_adapters_train_under_gradient_checkpointing() -> None:
    """With the embeddings frozen, checkpointed blocks see inputs that need no gradient; the
    input hook transformers installs when checkpointing is enabled keeps the adapters' gradients
    flowing (the reentrant variant would otherwise drop them)."""
    model = tiny_model().double()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    apply_lora(model, LoRAConfig(rank=2, target_modules=["q_proj"]))
    with torch.no_grad():
        for _, layer in lora_layers(model):
            layer.lora_B.normal_(std=0.05)
    model(IDS).logits.logsumexp(-1).sum().backward()
    for name, layer in lora_layers(model):
        assert layer.lora_A.grad is not None and bool(layer.lora_A.grad.abs().sum() > 0), name


def test_adapter_dropout_acts_only_inside_its_block() -> None:
    model = _lora_model(dropout=0.5)
    with torch.no_grad():
        for _, layer in lora_layers(model):
            layer.lora_B.normal_(std=0.05)
        plain = model(IDS).logits
        torch.manual_seed(0)
        with adapter_dropout(model):
            dropped = model(IDS).logits
        assert not torch.allclose(dropped, plain, atol=1e-6)
        assert torch.equal(model(IDS).logits, plain)  # off again


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        ({"rank": 0}, r"model\.lora: rank must be in \[1, 4096\], not 0"),
        ({"rank": -3}, r"model\.lora: rank must be"),
        ({"alpha": 0}, r"model\.lora: alpha must be > 0"),
        ({"dropout": 1.0}, r"model\.lora: dropout must be in \[0, 1\)"),
        ({"target_modules": []}, r"model\.lora: target_modules is empty"),
        ({"target_modules": ["model.layers.0.q_proj"]}, r"not a dotted path"),
        ({"target_modules": "q_proj"}, r"model\.lora\.target_modules must be a list"),
        ({"ranks": 4}, r"unknown config key 'model\.lora\.ranks'"),
    ],
)
def test_a_bad_lora_config_is_refused_naming_the_key(lora: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"envs": [{"id": "x"}], "model": {"lora": lora}})


def test_targets_the_model_cannot_take_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"\['qkv_proj'\] match no module of LlamaForCausalLM"):
        apply_lora(tiny_model(), LoRAConfig(target_modules=["q_proj", "qkv_proj"]))
    with pytest.raises(ValueError, match=r"'mlp' \(model\.layers\.0\.mlp\) is a LlamaMLP, not a"):
        apply_lora(tiny_model(), LoRAConfig(target_modules=["mlp"]))
    with pytest.raises(ValueError, match="is the LM head"):
        apply_lora(tiny_model(), LoRAConfig(target_modules=["lm_head"]))
    model = tiny_model()
    apply_lora(model, LoRAConfig())
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        apply_lora(model, LoRAConfig())
    untouched = tiny_model()
    assert apply_lora(untouched, None) == [] and all(
        p.requires_grad for p in untouched.parameters()
    )


def test_a_vllm_engine_gets_the_merged_weights(tmp_path: Path, server: Any) -> None:  # noqa: F811
    """vLLM sync of a LoRA policy: the reload folder holds the merged model (the base's keys,
    no adapter tensors) and the sync probe compares the server with the adapted forward."""
    from envgym.models.vllm_policy import VLLMPolicy

    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    config = train_config(tmp_path, tmp_path, **{"model.engine": "vllm", "model.vllm_url": url})
    model = tiny_model()
    apply_lora(model, LoRAConfig(rank=4, alpha=8.0))
    with torch.no_grad():
        for _, layer in lora_layers(model):
            layer.lora_B.normal_(std=0.05)
    _Recorder.missing = frozenset()
    _Recorder.prompt_logprobs = _served(merged_copy(model), 0.0)  # a server that took them
    engine = VLLMPolicy(url, "m", tokenizer=load_tokenizer())
    try:
        asyncio.run(sync_weights(engine, model, 1, config))
    finally:
        asyncio.run(engine.aclose())
    assert engine.version == 1
    saved = load_file(tmp_path / "ck" / "engine-weights" / "model.safetensors")
    assert not [k for k in saved if "lora" in k]
    up = model.get_submodule("model.layers.0.mlp.up_proj")
    assert torch.equal(saved["model.layers.0.mlp.up_proj.weight"], up.merged_weight())
    assert not torch.equal(up.merged_weight(), up.weight)
    assert len(lora_layers(model)) == 14  # the adapters are back after the save


def _config(tmp: Path, bundle: Path, name: str, **overrides: Any) -> Any:
    return train_config(
        tmp / name,
        bundle,
        **{
            "model.lora": {
                "rank": 4,
                "alpha": 8.0,
                "target_modules": ["q_proj", "v_proj", "up_proj"],
            },
            "optimizer.lr": 1e-2,  # adapters take a larger rate than full fine-tuning
            "packing": True,  # the loop with both: packed microbatches through the adapted model
            "metrics.plot": False,
            "metrics.tensorboard": False,
            "checkpoint.keep": 3,
            **overrides,
        },
    )


@pytest.mark.timeout(600)
def test_a_lora_grpo_run_trains_only_adapters_and_resumes_exactly(
    tmp_path: Path, tokenizer: Any
) -> None:
    bundle = parity_bundle(tmp_path / "b", tasks=4)
    straight = Trainer(
        _config(tmp_path, bundle, "straight"), model=tiny_model(), tokenizer=tokenizer
    )
    before = {k: v.clone() for k, v in straight.model.state_dict().items()}
    reports = straight.run()
    assert [r.step for r in reports] == [1, 2] and all(r.skipped is None for r in reports)
    after = straight.model.state_dict()
    adapters = set(adapter_names(straight.model))
    changed = {k for k in after if not torch.equal(before[k], after[k])}
    assert changed and changed <= adapters  # only adapters moved
    assert any(k.endswith("lora_B") for k in changed)
    engine = straight.engine.model.state_dict()  # the local engine decodes the merged model
    merged = merged_state_dict(straight.model)
    assert set(engine) == set(merged) and all(torch.equal(engine[k], merged[k]) for k in merged)

    ck = tmp_path / "straight" / "ck" / "step-000002" / "model.pt"
    saved = torch.load(ck, weights_only=True)
    assert set(saved) == adapters | {FINGERPRINT_KEY}  # adapters only: the base is model.path
    full = sum(v.numel() for v in tiny_model().state_dict().values())
    assert sum(v.numel() for v in saved.values()) < full / 100

    # One step, then a new process resumes and makes the second: the same adapters and Adam.
    first = Trainer(
        _config(tmp_path, bundle, "split", steps=1), model=tiny_model(), tokenizer=tokenizer
    )
    first.run()
    resumed = Trainer(_config(tmp_path, bundle, "split"), model=tiny_model(), tokenizer=tokenizer)
    assert [r.step for r in resumed.run()] == [2]
    b = resumed.model.state_dict()
    assert all(torch.equal(after[k], b[k]) for k in after), "weights differ after resume"
    opt_a, opt_b = straight.update.optimizer.state_dict(), resumed.update.optimizer.state_dict()
    for key, state in opt_a["state"].items():
        for name, value in state.items():
            assert torch.equal(value, opt_b["state"][key][name]), (key, name)

    # Resuming the adapters onto another base, or without model.lora, is refused.
    other = Trainer(
        _config(tmp_path, bundle, "split"), model=tiny_model(seed=1), tokenizer=tokenizer
    )
    with pytest.raises(ValueError, match="base weights differ"):
        other.maybe_resume()
    plain = Trainer(
        _config(tmp_path, bundle, "split", **{"model.lora": None}),
        model=tiny_model(),
        tokenizer=tokenizer,
    )
    with pytest.raises(ValueError, match="holds LoRA adapters but the model has none"):
        plain.maybe_resume()


def test_adapter_checkpoints_refuse_another_adapter_layout() -> None:
    def adapted(targets: list[str], rank: int = 2) -> Any:
        model = tiny_model()
        apply_lora(model, LoRAConfig(rank=rank, target_modules=targets))
        return model

    state = checkpoint_state(adapted(["q_proj"]))
    assert set(state) == {FINGERPRINT_KEY} | {
        f"model.layers.{i}.self_attn.q_proj.lora_{m}" for i in (0, 1) for m in "AB"
    }
    load_checkpoint_state(adapted(["q_proj"]), state)  # the same layout loads
    with pytest.raises(ValueError, match="another model.lora.target_modules"):
        load_checkpoint_state(adapted(["v_proj"]), state)
    with pytest.raises(ValueError, match="another model.lora.rank"):
        load_checkpoint_state(adapted(["q_proj"], rank=3), state)
    with pytest.raises(ValueError, match="holds a full model but this model has LoRA"):
        load_checkpoint_state(adapted(["q_proj"]), tiny_model().state_dict())
