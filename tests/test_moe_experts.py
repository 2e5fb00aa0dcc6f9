"""HF MoE models with their experts on envgym.kernels.moe: same logits and gradients, keep routing intact."""

from __future__ import annotations

import copy

import pytest
import torch
from test_routing import ARCHS, batch, build, perturb_routers, token_logprobs
from transformers import LlamaConfig, LlamaForCausalLM

from envgym.trainer.moe_experts import NAME, kernel_layout_problem, use_kernel_experts
from envgym.trainer.routing import capture_routes, replay_routes

pytestmark = pytest.mark.timeout(120)


def _pair(arch: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(transformers' eager experts, the kernel's), same float64 weights."""
    eager = build(arch).double()
    eager.set_experts_implementation("eager")
    kernel = copy.deepcopy(eager)
    assert use_kernel_experts(kernel) is None
    assert kernel.config._experts_implementation == NAME
    return eager, kernel


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_kernel_experts_match_eager_values_and_gradients(arch: str) -> None:
    eager, kernel = _pair(arch)
    ids = batch()
    lp_e, lp_k = token_logprobs(eager, ids), token_logprobs(kernel, ids)
    assert torch.allclose(lp_e, lp_k, atol=1e-12, rtol=0)
    lp_e.sum().backward()
    lp_k.sum().backward()
    for (name, a), (_, b) in zip(eager.named_parameters(), kernel.named_parameters(), strict=True):
        assert a.grad is not None and b.grad is not None, name
        assert torch.allclose(a.grad, b.grad, atol=1e-10, rtol=1e-8), name


def test_keep_routing_replays_through_kernel_experts() -> None:
    """Routes recorded by an engine whose routers differ (a stale policy) replayed on the trainer:
    kernel experts give exactly what eager experts give under the same replay, and replay changes
    the result (the routes are really used)."""
    eager, kernel = _pair("mixtral")
    engine = copy.deepcopy(eager)
    perturb_routers(engine, 0.5)
    ids = batch(rows=3, seq=16)
    routes = capture_routes(engine, ids)
    assert not torch.equal(routes, capture_routes(eager, ids))  # some choices flipped
    with torch.no_grad():
        with replay_routes(eager, routes):
            want = token_logprobs(eager, ids)
        with replay_routes(kernel, routes):
            got = token_logprobs(kernel, ids)
        live = token_logprobs(kernel, ids)
    assert torch.allclose(got, want, atol=1e-12, rtol=0)
    assert not torch.allclose(live, want, atol=1e-6)


def test_dense_models_and_other_layouts_are_left_alone() -> None:
    dense = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=32,
            hidden_size=8,
            intermediate_size=8,
            num_hidden_layers=1,
            num_attention_heads=2,
        )
    )
    assert use_kernel_experts(dense) == "no MoE experts module (a dense model)"
    model = build("mixtral")
    for m in model.modules():
        if hasattr(m, "gate_up_proj"):
            m.act_fn = torch.nn.GELU()
    problem = kernel_layout_problem(model)
    assert problem is not None and "GELU" in problem
    assert use_kernel_experts(model) == problem
    assert model.config._experts_implementation != NAME


def test_the_trainer_loads_moe_models_with_kernel_experts(tmp_path) -> None:
    """envgym.trainer.weight_sync.load_model (what `envgym train` uses) switches an MoE folder's experts."""
    from transformers import AutoTokenizer

    from envgym import embedded
    from envgym.trainer.config import config_from_dict
    from envgym.trainer.weight_sync import load_model

    build("mixtral").save_pretrained(tmp_path / "moe")
    AutoTokenizer.from_pretrained(str(embedded.hf_dir())).save_pretrained(tmp_path / "moe")
    config = config_from_dict(
        {"envs": [{"id": "code-interpreter-math-v0"}], "model": {"path": str(tmp_path / "moe")}}
    )
    model, _ = load_model(config)
    assert model.config._experts_implementation == NAME
