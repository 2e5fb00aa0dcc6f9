"""``micro_tokens: auto``: the resolution rule, and explicit values left as they are."""

from __future__ import annotations

import types

import pytest
import torch

from envgym.trainer.config import ConfigError, config_from_dict
from envgym.trainer.micro_tokens import (
    MAX_TOKENS,
    MIN_TOKENS,
    ModelShape,
    auto_micro_tokens,
    resolve_micro_tokens,
    shape_of,
)

pytestmark = pytest.mark.timeout(30)
GIB = 1 << 30
# SmolLM2-135M-Instruct in fp32: 30 layers, hidden 576, MLP 1536, 134.5 M parameters
SMOLLM2 = ModelShape(layers=30, hidden=576, mlp=1536, params=134_515_008, dtype_bytes=4)


def test_smollm2_fp32_on_a_roomy_machine_is_bounded_by_its_training_state() -> None:
    per_token = SMOLLM2.activation_bytes_per_token
    assert per_token == 30 * (8 * 576 + 4 * 1536) * 4  # 1.29 MB
    assert SMOLLM2.state_bytes == 4 * 134_515_008 * 4  # weights, grads, two AdamW moments
    mt = auto_micro_tokens(SMOLLM2, free=64 * GIB)
    assert mt == 1024  # 2.15 GB / 1.29 MB = 1667 → the power of two below
    assert mt * per_token <= SMOLLM2.state_bytes < 2 * mt * per_token


def test_little_free_memory_lowers_it_and_the_clamps_hold() -> None:
    assert auto_micro_tokens(SMOLLM2, free=2 * GIB) == 512  # half of 2 GiB / 1.29 MB = 832
    assert auto_micro_tokens(SMOLLM2, free=1 << 20) == MIN_TOKENS
    tiny = ModelShape(layers=2, hidden=16, mlp=32, params=10**6, dtype_bytes=4)
    assert auto_micro_tokens(tiny, free=64 * GIB) == MAX_TOKENS  # 1 GiB at least, not its 16 MB


def test_bf16_halves_both_sides_so_the_value_stays() -> None:
    bf16 = ModelShape(**{**SMOLLM2.__dict__, "dtype_bytes": 2})
    assert auto_micro_tokens(bf16, free=64 * GIB) == auto_micro_tokens(SMOLLM2, free=64 * GIB)


def _fake_model(hidden: int, layers: int, mlp: int | None) -> torch.nn.Module:
    model = torch.nn.Linear(hidden, hidden)
    cfg = {"hidden_size": hidden, "num_hidden_layers": layers}
    if mlp is not None:
        cfg["intermediate_size"] = mlp
    model.config = types.SimpleNamespace(**cfg)  # type: ignore[assignment]
    return model


def test_shape_of_reads_the_config_and_the_trained_parameters() -> None:
    model = _fake_model(hidden=8, layers=3, mlp=None)
    shape = shape_of(model)
    assert (shape.layers, shape.hidden, shape.mlp) == (3, 8, 32)  # no MLP width: 4 × hidden
    assert shape.params == 8 * 8 + 8 and shape.dtype_bytes == 4
    model.bias.requires_grad_(False)  # frozen parameters (LoRA bases) hold no optimizer state
    assert shape_of(model).params == 64


def test_an_explicit_value_is_kept_and_auto_resolves_on_the_model() -> None:
    model = _fake_model(hidden=8, layers=3, mlp=16)
    assert resolve_micro_tokens(8192, model) == 8192
    assert resolve_micro_tokens(333, model) == 333
    assert resolve_micro_tokens("auto", model) == MAX_TOKENS  # a tiny model on any machine


def test_config_default_is_auto_and_integers_still_load() -> None:
    base = {"envs": [{"id": "x"}]}
    assert config_from_dict(base).micro_tokens == "auto"
    assert config_from_dict({**base, "micro_tokens": 8192}).micro_tokens == 8192
    with pytest.raises(ConfigError, match="micro_tokens must be > 0 or auto"):
        config_from_dict({**base, "micro_tokens": 0})
    with pytest.raises(ConfigError, match="micro_tokens"):
        config_from_dict({**base, "micro_tokens": "big"})
