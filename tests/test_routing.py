"""Keep routing (envgym/trainer/routing.py, DeepSeek-V3.2 §3.1): capture, replay, flip rate."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)
from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter
from transformers.models.olmoe.modeling_olmoe import OlmoeTopKRouter

from envgym.trainer.routing import (
    capture_routes,
    moe_routers,
    recording_routes,
    replay_routes,
    route_shape,
    routing_flip_rate,
)
from envgym.trainer.smolmoe import upcycle_model

VOCAB = 64
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_experts_per_tok=2,
    max_position_embeddings=64,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


def mixtral() -> nn.Module:
    return MixtralForCausalLM(MixtralConfig(num_local_experts=4, **COMMON))


def qwen2_moe() -> nn.Module:
    config = Qwen2MoeConfig(
        num_experts=4, moe_intermediate_size=16, shared_expert_intermediate_size=16, **COMMON
    )
    return Qwen2MoeForCausalLM(config)


def qwen3_moe() -> nn.Module:
    return Qwen3MoeForCausalLM(
        Qwen3MoeConfig(num_experts=4, moe_intermediate_size=16, norm_topk_prob=True, **COMMON)
    )


def olmoe() -> nn.Module:  # norm_topk_prob=False: gates are the un-renormalized softmax
    return OlmoeForCausalLM(OlmoeConfig(num_experts=4, **COMMON))


ARCHS: dict[str, Callable[[], nn.Module]] = {
    "mixtral": mixtral,
    "qwen2_moe": qwen2_moe,
    "qwen3_moe": qwen3_moe,
    "olmoe": olmoe,
}


def build(arch: str, seed: int = 0) -> nn.Module:
    """A tiny fp32 MoE whose routers and experts are large enough to matter."""
    torch.manual_seed(seed)
    model = ARCHS[arch]()
    with torch.no_grad():
        for router in moe_routers(model):
            router.weight.normal_(0.0, 1.0)  # HF's 0.02 init routes nearly at random ties
        for name, param in model.named_parameters():
            if ".experts." in name:
                param.normal_(0.0, 0.3)
    return model.eval()


def batch(seed: int = 1, rows: int = 2, seq: int = 12) -> Tensor:
    return torch.randint(3, VOCAB, (rows, seq), generator=torch.Generator().manual_seed(seed))


def token_logprobs(model: nn.Module, ids: Tensor) -> Tensor:
    """``[B, T-1]``: log π(ids[t+1] | ids[:t+1]), the quantity the trainer's ratios use."""
    logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def perturb_routers(model: nn.Module, scale: float, seed: int = 5) -> None:
    """The "trainer" after an update (or a kernel mismatch): router weights moved slightly."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for router in moe_routers(model):
            router.weight.add_(scale * torch.randn(router.weight.shape, generator=gen))


@pytest.mark.parametrize("arch", list(ARCHS))
def test_capture_is_the_routers_own_top_k(arch: str) -> None:
    model, ids = build(arch), batch()
    routes = capture_routes(model, ids)
    assert routes.shape == (2, 12, 2, 2) and routes.dtype == torch.int64
    assert route_shape(model) == (2, 2)
    # Independently: transformers' own router_logits output, top-2 of their softmax.
    with torch.no_grad():
        logits = model(input_ids=ids, output_router_logits=True).router_logits
    for layer, layer_logits in enumerate(logits):
        want = layer_logits.float().softmax(-1).topk(2, dim=-1).indices.view(2, 12, 2)
        assert torch.equal(routes[:, :, layer], want)
    assert len(set(routes.flatten().tolist())) == 4  # every expert is used somewhere


@pytest.mark.parametrize("arch", list(ARCHS))
def test_replaying_own_routes_is_bit_identical(arch: str) -> None:
    model, ids = build(arch), batch()
    routes = capture_routes(model, ids)
    with torch.no_grad():
        want = model(input_ids=ids).logits
        with replay_routes(model, routes):
            got = model(input_ids=ids).logits
    assert torch.equal(got, want)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_keep_routing_engine_vs_trainer(arch: str) -> None:
    """DeepSeek-V3.2 §3.1: the trainer's forward uses the experts the engine sampled with."""
    engine, ids = build(arch), batch()
    with torch.no_grad():
        sampling_logp = token_logprobs(engine, ids)
    routes = capture_routes(engine, ids)

    # Same weights, fp32, training mode with gradients: replay reproduces the sampling log-probs
    # exactly, and the router still gets a gradient through the recomputed gates.
    trainer = build(arch)
    trainer.train()
    with replay_routes(trainer, routes):
        train_logp = token_logprobs(trainer, ids)
    assert torch.equal(train_logp.detach(), sampling_logp)
    train_logp.sum().backward()
    for router in moe_routers(trainer):
        assert router.weight.grad is not None and float(router.weight.grad.abs().sum()) > 0

    # The trainer's routers drift: some top-k choices flip without replay, none with it.
    trainer.eval()
    perturb_routers(trainer, scale=0.3)
    free_routes = capture_routes(trainer, ids)
    assert routing_flip_rate(routes, free_routes) > 0
    with replay_routes(trainer, routes), recording_routes(trainer) as used:
        with torch.no_grad():
            replay_logp = token_logprobs(trainer, ids)
    used_routes = torch.stack([calls[0].view(2, 12, 2) for calls in used], dim=2)
    assert torch.equal(used_routes, routes)
    assert routing_flip_rate(routes, used_routes) == 0.0
    with torch.no_grad():
        free_logp = token_logprobs(trainer, ids)
    # Without replay the flipped tokens go through other experts, so the log-probs move.
    assert float((free_logp - sampling_logp).abs().max()) > 1e-3
    # Replay moves them too (the gates follow the trainer's router), but differently.
    assert not torch.equal(replay_logp, free_logp)


def test_log_probs_differ_without_replay_once_experts_diverge() -> None:
    """Upcycled at noise 0 the experts are equal, so a flipped route changes nothing (up to
    rounding); once they diverge, only replay keeps the training log-probs on the sampled ones."""
    torch.manual_seed(0)
    dense = LlamaForCausalLM(
        LlamaConfig(**{k: v for k, v in COMMON.items() if k != "num_experts_per_tok"})
    ).eval()
    with torch.no_grad():
        for layer in dense.model.layers:
            for lin in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                lin.weight.normal_(0.0, 0.3)
    ids = batch()
    gaps = {}
    for noise in (0.0, 0.5):
        engine = upcycle_model(dense, noise=noise, router_std=1.0, seed=3)
        with torch.no_grad():
            sampling_logp = token_logprobs(engine, ids)
        routes = capture_routes(engine, ids)
        trainer = upcycle_model(dense, noise=noise, router_std=1.0, seed=3)
        with torch.no_grad(), replay_routes(trainer, routes):
            assert torch.equal(token_logprobs(trainer, ids), sampling_logp)  # same weights
        perturb_routers(trainer, scale=0.5)
        assert routing_flip_rate(routes, capture_routes(trainer, ids)) > 0.05
        with torch.no_grad():
            gaps[noise] = float((token_logprobs(trainer, ids) - sampling_logp).abs().max())
    assert gaps[0.0] < 1e-5  # identical experts: flips are harmless
    assert gaps[0.5] > 1e-2  # diverged experts: flips change the log-probs


def router_with_logits(cls: type, log_weights: list[float], **flags: bool) -> nn.Module:
    """A 4-expert router whose logits for hidden e_0 are ``log_weights`` (probs ∝ weights)."""
    config = MixtralConfig(hidden_size=2, num_local_experts=4, num_experts_per_tok=2)
    if cls is OlmoeTopKRouter:
        config = OlmoeConfig(hidden_size=2, num_experts=4, num_experts_per_tok=2, **flags)
    router = cls(config)
    with torch.no_grad():
        router.weight.zero_()
        router.weight[:, 0] = torch.tensor(log_weights)
    return router


@pytest.mark.parametrize(
    ("cls", "flags", "want"),
    [
        # probs = [1, 2, 3, 4] / 10; replayed experts (0, 2)
        (MixtralTopKRouter, {}, [1 / 4, 3 / 4]),  # Mixtral: always renormalized
        (OlmoeTopKRouter, {"norm_topk_prob": False}, [0.1, 0.3]),  # raw softmax values
        (OlmoeTopKRouter, {"norm_topk_prob": True}, [1 / 4, 3 / 4]),
    ],
)
def test_replayed_gates_by_hand(cls: type, flags: dict[str, bool], want: list[float]) -> None:
    router = router_with_logits(cls, [math.log(w) for w in (1.0, 2.0, 3.0, 4.0)], **flags)
    hidden = torch.tensor([[1.0, 0.0]])  # one position
    _, _, own = router(hidden)
    assert own.tolist() == [[3, 2]]  # the router itself would take the two largest
    routes = torch.tensor([0, 2]).view(1, 1, 1, 2)
    with replay_routes(router, routes):
        _, gates, experts = router(hidden)
    assert experts.tolist() == [[0, 2]]
    torch.testing.assert_close(gates, torch.tensor([want]), rtol=0, atol=1e-6)


def test_replayed_gates_carry_the_router_gradient() -> None:
    """Gates = softmax over the replayed experts' logits, differentiable w.r.t. the router."""
    torch.manual_seed(0)
    config = MixtralConfig(hidden_size=3, num_local_experts=4, num_experts_per_tok=2)
    router = MixtralTopKRouter(config)
    with torch.no_grad():
        router.weight.normal_()
    hidden = torch.randn(5, 3)
    experts = torch.tensor([[3, 1], [0, 2], [2, 3], [1, 0], [0, 3]])
    c = torch.randn(5, 2)
    with replay_routes(router, experts.view(1, 5, 1, 2)):
        _, gates, _ = router(hidden)
    (gates * c).sum().backward()
    got = router.weight.grad.clone()
    weight = router.weight.detach().clone().requires_grad_(True)
    selected = (hidden @ weight.T).gather(-1, experts)  # [5, 2] logits of the replayed experts
    (torch.softmax(selected, dim=-1) * c).sum().backward()
    torch.testing.assert_close(got, weight.grad, rtol=1e-5, atol=1e-6)


def test_negative_route_entries_keep_the_live_choice() -> None:
    model, ids = build("mixtral"), batch()
    own = capture_routes(model, ids)
    forced = own.flip(-1).clone()  # same experts, swapped order: same output, visible in routes
    forced[0, 3] = -1  # e.g. a padding position the engine never routed
    with replay_routes(model, forced), recording_routes(model) as used:
        with torch.no_grad():
            model(input_ids=ids)
    used_routes = torch.stack([calls[0].view(2, 12, 2) for calls in used], dim=2)
    assert torch.equal(used_routes[0, 3], own[0, 3])
    keep = torch.ones(2, 12, dtype=torch.bool)
    keep[0, 3] = False
    assert torch.equal(used_routes[keep], forced[keep])


def test_hooks_are_removed_even_on_error() -> None:
    model, ids = build("qwen2_moe"), batch()
    routes = capture_routes(model, ids)
    hooks = [len(r._forward_hooks) for r in moe_routers(model)]
    with pytest.raises(RuntimeError, match="boom"):
        with replay_routes(model, routes.flip(-1)):
            raise RuntimeError("boom")
    with pytest.raises(ValueError, match="B\\*T=24"):
        with replay_routes(model, routes), torch.no_grad():
            model(input_ids=ids[:, :5])  # a forward over other positions fails loudly
    assert [len(r._forward_hooks) for r in moe_routers(model)] == hooks
    assert torch.equal(capture_routes(model, ids), routes)


def test_qwen2_moe_dense_layers_are_not_counted() -> None:
    torch.manual_seed(0)
    config = Qwen2MoeConfig(
        num_experts=4,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        mlp_only_layers=[0],
        **COMMON,
    )
    model = Qwen2MoeForCausalLM(config).eval()
    assert route_shape(model) == (1, 2)
    assert capture_routes(model, batch()).shape == (2, 12, 1, 2)


def test_routing_flip_rate_by_hand() -> None:
    # B=1, T=3, L=1, k=2: position 0 same set (order ignored), 1 one of two flipped, 2 both.
    recorded = torch.tensor([[[[0, 1]], [[2, 3]], [[0, 1]]]])
    current = torch.tensor([[[[1, 0]], [[2, 0]], [[2, 3]]]])
    assert routing_flip_rate(recorded, current) == pytest.approx((0 + 0.5 + 1) / 3)
    assert routing_flip_rate(recorded, recorded) == 0.0
    mask = torch.tensor([[False, True, True]])
    assert routing_flip_rate(recorded, current, mask) == pytest.approx(0.75)
    assert routing_flip_rate(recorded, current, torch.zeros(1, 3, dtype=torch.bool)) == 0.0


def test_bad_input() -> None:
    model, ids = build("mixtral"), batch()
    routes = capture_routes(model, ids)
    with pytest.raises(ValueError, match=r"\[B, T, L, k\]"):
        with replay_routes(model, routes[0]):
            pass
    with pytest.raises(TypeError, match="integer expert ids"):
        with replay_routes(model, routes.float()):
            pass
    with pytest.raises(ValueError, match="L=1, k=2; the model has 2 MoE layers"):
        with replay_routes(model, routes[:, :, :1]):
            pass
    with pytest.raises(ValueError, match="L=2, k=1"):
        with replay_routes(model, routes[..., :1]):
            pass
    with pytest.raises(ValueError, match="expert 4; the model has 4"):
        with replay_routes(model, torch.full_like(routes, 4)):
            pass
    with pytest.raises(ValueError, match="repeat an expert"):
        with replay_routes(model, torch.zeros_like(routes)):
            pass
    dense = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            intermediate_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
        )
    )
    with pytest.raises(ValueError, match="LlamaForCausalLM has no MoE router"):
        capture_routes(dense, ids)
    with pytest.raises(ValueError, match="no MoE router"):
        with replay_routes(dense, routes):
            pass
    with pytest.raises(TypeError, match="torch.nn.Module"):
        moe_routers("mixtral")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"input_ids must be a \[B, T\]"):
        capture_routes(model, ids[0])
    with pytest.raises(TypeError, match="int64 or int32"):
        capture_routes(model, ids.float())
    with pytest.raises(ValueError, match="differ in shape"):
        routing_flip_rate(routes, routes[:1])
    with pytest.raises(ValueError, match="current must be"):
        routing_flip_rate(routes, routes[0])
    with pytest.raises(TypeError, match="recorded must hold integer"):
        routing_flip_rate(routes.float(), routes)
    with pytest.raises(ValueError, match="mask must be"):
        routing_flip_rate(routes, routes, torch.ones(2, 5, dtype=torch.bool))
