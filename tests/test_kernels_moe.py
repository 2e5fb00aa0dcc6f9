"""envgym.kernels.moe: router with replayed routes, per-expert loop vs. sorted grouped dispatch.

Hand values use D = F = 1 and x = 1, so each expert is a scalar function:
``E_e(1) = w2_e · silu(w1_e) · w3_e`` with ``silu(u) = u / (1 + e^{−u})``, and router weights
``[0, ln 3]`` give router probabilities 1/4, 3/4.
"""

from __future__ import annotations

import math

import pytest
import torch

from envgym.kernels.moe import moe_experts, moe_experts_concat, moe_forward, route
from envgym.kernels.moe_grouped import grouped_mm

F64 = torch.float64


def _silu(u: float) -> float:
    return u / (1.0 + math.exp(-u))


def _hand_params() -> list[torch.Tensor]:
    x = torch.tensor([[1.0]], dtype=F64)
    router = torch.tensor([[0.0], [math.log(3.0)]], dtype=F64)
    w1 = torch.tensor([1.0, 2.0], dtype=F64).view(2, 1, 1)
    w3 = torch.tensor([1.0, 1.0], dtype=F64).view(2, 1, 1)
    w2 = torch.tensor([1.0, 1.0], dtype=F64).view(2, 1, 1)
    return [x, router, w1, w3, w2]


E0, E1 = _silu(1.0), _silu(2.0)  # the two experts' outputs at x = 1


@pytest.mark.parametrize("impl", ["loop", "grouped"])
@pytest.mark.parametrize(
    ("top_k", "routes", "normalize", "expected"),
    [
        (1, None, True, E1),  # the router picks expert 1 (p = 3/4), gate renormalized to 1
        (1, None, False, 0.75 * E1),
        (2, None, True, 0.25 * E0 + 0.75 * E1),
        (1, [[0]], True, E0),  # keep routing: the replayed expert, gate renormalized to 1
        (1, [[0]], False, 0.25 * E0),  # the current router's probability of the replayed expert
        (1, [[-1]], True, E1),  # not recorded: the router's own choice
    ],
)
def test_by_hand(
    impl: str, top_k: int, routes: list[list[int]] | None, normalize: bool, expected: float
) -> None:
    r = None if routes is None else torch.tensor(routes)
    y, experts, logits = moe_forward(
        *_hand_params(), top_k=top_k, routes=r, normalize=normalize, impl=impl
    )  # type: ignore[arg-type]
    assert y.item() == pytest.approx(expected, abs=1e-12)
    assert logits.squeeze(0).tolist() == pytest.approx([0.0, math.log(3.0)], abs=1e-12)
    if routes is not None and routes[0][0] >= 0:
        assert experts.tolist() == routes


def test_route_gates_by_hand() -> None:
    logits = torch.tensor(
        [[0.0, math.log(2.0), math.log(5.0)]], dtype=F64
    )  # probabilities 1/8, 2/8, 5/8
    experts, gates = route(logits, 2)
    assert experts.tolist() == [[2, 1]]
    assert gates.squeeze(0).tolist() == pytest.approx([5 / 7, 2 / 7], abs=1e-12)
    experts, gates = route(logits, 2, routes=torch.tensor([[0, 2]]))
    assert experts.tolist() == [[0, 2]]
    assert gates.squeeze(0).tolist() == pytest.approx([1 / 6, 5 / 6], abs=1e-12)
    _, gates = route(logits, 2, routes=torch.tensor([[0, 2]]), normalize=False)
    assert gates.squeeze(0).tolist() == pytest.approx([1 / 8, 5 / 8], abs=1e-12)


def test_replaying_the_routers_own_choice_is_identical() -> None:
    params = _random_params(3, n=20, d=5, f=4, e=6)
    y, experts, _ = moe_forward(*params, top_k=2, impl="grouped")
    y_replayed, experts_replayed, _ = moe_forward(
        *params, top_k=2, routes=experts.clone(), impl="grouped"
    )
    assert torch.equal(experts, experts_replayed)
    assert torch.equal(y, y_replayed)


def _random_params(seed: int, *, n: int, d: int, f: int, e: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = ((n, d), (e, d), (e, f, d), (e, f, d), (e, d, f))
    return [torch.randn(*s, generator=g, dtype=F64) for s in shapes]


@pytest.mark.parametrize(
    ("seed", "n", "d", "f", "e", "k", "replay"),
    [
        (0, 17, 6, 5, 4, 2, False),
        (1, 1, 3, 2, 3, 1, False),  # one token: most experts get nothing
        (2, 12, 4, 3, 5, 5, False),  # every expert for every token
        (3, 25, 5, 4, 8, 2, True),  # replayed routes, some rows not recorded
        (4, 9, 2, 7, 2, 1, True),
    ],
)
def test_grouped_matches_loop_values_and_gradients(
    seed: int, n: int, d: int, f: int, e: int, k: int, replay: bool
) -> None:
    g = torch.Generator().manual_seed(seed + 50)
    routes = None
    if replay:
        routes = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(n)])
        routes[torch.rand(n, generator=g) < 0.3] = -1
    upstream = torch.randn(n, d, generator=g, dtype=F64)
    results = []
    for impl in ("loop", "grouped"):
        params = [p.requires_grad_(True) for p in _random_params(seed, n=n, d=d, f=f, e=e)]
        y, experts, _ = moe_forward(
            *params,
            top_k=k,
            routes=routes,
            impl=impl,  # type: ignore[arg-type]
        )
        (y * upstream).sum().backward()
        results.append([y.detach(), experts, *(p.grad for p in params)])
    if routes is not None:
        recorded = (routes >= 0).all(dim=1)
        assert torch.equal(results[0][1][recorded], routes[recorded])
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_router_gets_gradients_under_replay() -> None:
    params = [p.requires_grad_(True) for p in _random_params(5, n=6, d=3, f=2, e=4)]
    routes = torch.tensor([[0, 1], [2, 3], [1, 3], [0, 2], [3, 0], [2, 1]])
    y, _, _ = moe_forward(*params, top_k=2, routes=routes, impl="grouped")
    y.sum().backward()
    assert params[1].grad is not None and float(params[1].grad.abs().sum()) > 0


def test_gradcheck_grouped() -> None:
    params = [p.requires_grad_(True) for p in _random_params(6, n=5, d=3, f=2, e=3)]
    experts = torch.tensor([[0, 2], [2, 1], [0, 1], [2, 0], [1, 2]])
    gates = torch.rand(5, 2, dtype=F64, generator=torch.Generator().manual_seed(7)).requires_grad_(
        True
    )

    def fn(
        x: torch.Tensor, gt: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor
    ) -> torch.Tensor:
        return moe_experts(x, experts, gt, w1, w3, w2, impl="grouped")

    assert torch.autograd.gradcheck(fn, (params[0], gates, params[2], params[3], params[4]))


def test_grouped_mm_by_hand_with_an_empty_group() -> None:
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=F64)
    w = torch.stack(
        [
            torch.eye(2, dtype=F64),
            2 * torch.eye(2, dtype=F64),
            torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=F64),
        ]
    )
    out = grouped_mm(
        a, w, torch.tensor([1, 0, 2])
    )  # row 0: identity; rows 1-2: swap (group 1 empty)
    assert out.tolist() == [[1.0, 2.0], [4.0, 3.0], [6.0, 5.0]]


def test_no_tokens() -> None:
    params = _random_params(8, n=0, d=3, f=2, e=3)
    for impl in ("loop", "grouped"):
        y, experts, _ = moe_forward(*params, top_k=2, impl=impl)  # type: ignore[arg-type]
        assert y.shape == (0, 3) and experts.shape == (0, 2)


def test_float32_grouped_close_to_loop() -> None:
    params = [p.float() for p in _random_params(9, n=40, d=8, f=6, e=4)]
    a, _, _ = moe_forward(*params, top_k=2, impl="loop")
    b, _, _ = moe_forward(*params, top_k=2, impl="grouped")
    assert b.dtype == torch.float32
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- bad input


def test_route_bad_input() -> None:
    logits = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="router_logits"):
        route(torch.zeros(3), 2)
    with pytest.raises(ValueError, match="router_logits"):
        route(torch.zeros(3, 4, dtype=torch.int64), 2)
    for k in (0, 5, True, 1.0):
        with pytest.raises(ValueError, match="top_k"):
            route(logits, k)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="routes"):
        route(logits, 2, routes=torch.zeros(3, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="routes"):
        route(logits, 2, routes=torch.zeros(3, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="routes must lie"):
        route(logits, 2, routes=torch.tensor([[0, 4], [0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="routes must lie"):
        route(logits, 2, routes=torch.tensor([[0, -2], [0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="same expert twice"):
        route(logits, 2, routes=torch.tensor([[0, 1], [3, 3], [1, 2]]))


def test_experts_bad_input() -> None:
    x, _, w1, w3, w2 = _random_params(10, n=4, d=3, f=2, e=3)
    experts = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 2]])
    gates = torch.full((4, 2), 0.5, dtype=F64)
    cases = [
        ({"x": x[0]}, "x must be"),
        ({"w1": w1[:, :, :2]}, "w1 and w3"),
        ({"w3": w3[:2]}, "w1 and w3"),
        ({"w2": w2.transpose(1, 2)}, "w2 must be"),
        ({"experts": experts.int()}, "experts must be an int64"),
        ({"experts": experts[:3]}, "experts must be an int64"),
        ({"experts": experts + 1}, "experts must lie"),
        ({"gates": gates[:, :1]}, "gates must have the shape"),
        ({"impl": "cuda"}, "impl"),
    ]
    base = {"x": x, "experts": experts, "gates": gates, "w1": w1, "w3": w3, "w2": w2}
    for change, needle in cases:
        args = {**base, **change}
        impl = args.pop("impl", "grouped")
        with pytest.raises(ValueError, match=needle):
            moe_experts(**args, impl=impl)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="router_weight"):
        moe_forward(x, torch.zeros(3, 2, dtype=F64), w1, w3, w2, top_k=2)


def test_grouped_mm_bad_input() -> None:
    a, w = torch.zeros(3, 2), torch.zeros(2, 4, 2)
    with pytest.raises(ValueError, match="counts"):
        grouped_mm(a, w, torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="counts"):
        grouped_mm(a, w, torch.tensor([3]))
    with pytest.raises(ValueError, match="grouped_mm needs"):
        grouped_mm(a, torch.zeros(2, 4, 3), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="backend"):
        grouped_mm(a, w, torch.tensor([1, 2]), backend="cuda")


def test_concatenated_layout_matches_transformers_mixtral_experts() -> None:
    # transformers' own eager experts module (gate_up_proj [E, 2F, D], down_proj [E, D, F])
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    cfg = MixtralConfig(
        hidden_size=6, intermediate_size=4, num_local_experts=3, num_experts_per_tok=2
    )
    cfg._experts_implementation = "eager"
    module = MixtralExperts(cfg).double()
    g = torch.Generator().manual_seed(20)
    with torch.no_grad():
        module.gate_up_proj.copy_(torch.randn(3, 8, 6, generator=g, dtype=F64))
        module.down_proj.copy_(torch.randn(3, 6, 4, generator=g, dtype=F64))
    x = torch.randn(7, 6, generator=g, dtype=F64)
    experts, gates = route(torch.randn(7, 3, generator=g, dtype=F64), 2)
    want = module(x, experts, gates)
    want.sum().backward()
    gate_up = module.gate_up_proj.detach().clone().requires_grad_(True)
    got = moe_experts_concat(x, experts, gates, gate_up, module.down_proj.detach(), impl="grouped")
    got.sum().backward()
    torch.testing.assert_close(got, want.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gate_up.grad, module.gate_up_proj.grad, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="gate_up"):
        moe_experts_concat(x, experts, gates, gate_up[:, :7], module.down_proj.detach())
