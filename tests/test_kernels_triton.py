"""Triton kernels (envgym.kernels.logprob_triton, envgym.kernels.moe_triton) on CPU under
TRITON_INTERPRET=1.

``triton.jit`` decides at decoration time whether a kernel is interpreted, so the modules are
(re)imported with the variable set; an autouse fixture keeps it set while each test runs (the
dispatch in ``selected_logprobs`` reads it) and leaves the environment as it was afterwards.
Shapes are tiny and the tiles 16 wide, so every mask edge (rows, vocabulary, hidden, kept ids,
expert segments) is crossed while the interpreter stays fast.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator

import pytest
import torch

_previous = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "1"
try:
    from envgym.kernels import logprob_triton, logprob_triton_kernels, moe_triton

    # interpreted even if an earlier test imported them without the variable
    importlib.reload(logprob_triton_kernels)
    logprob_triton = importlib.reload(logprob_triton)
    moe_triton = importlib.reload(moe_triton)
finally:
    if _previous is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = _previous

from envgym.kernels.logprob import naive_selected_logprobs, selected_logprobs  # noqa: E402
from envgym.kernels.logprob_inputs import check_inputs  # noqa: E402
from envgym.kernels.moe import moe_forward  # noqa: E402
from envgym.kernels.moe_grouped import grouped_mm  # noqa: E402

F64 = torch.float64
SMALL = logprob_triton.Blocks(tokens=16, vocab=16, hidden=16, kept=16)


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(moe_triton, "BM", 16)
    monkeypatch.setattr(moe_triton, "BN", 16)
    monkeypatch.setattr(moe_triton, "BK", 16)
    yield


def _case(seed: int, n: int, h: int, v: int, k: int | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    case = {
        "hidden": torch.randn(n, h, generator=g, dtype=F64),
        "weight": torch.randn(v, h, generator=g, dtype=F64),
        "targets": torch.randint(0, v, (n,), generator=g),
    }
    if k is not None:
        kept = torch.randint(0, v, (n, k), generator=g)
        kept[:, 0] = case["targets"]
        kept[torch.rand(n, k, generator=g) < 0.4] = -1
        kept[:, 0] = case["targets"]
        case["kept_ids"] = kept
        case["kept_rows"] = torch.rand(n, generator=g) < 0.6
    return case


def _triton(
    case: dict[str, torch.Tensor], **kw: object
) -> tuple[torch.Tensor, torch.Tensor | None]:
    extra = {key: case[key] for key in ("kept_ids", "kept_rows") if key in case}
    inp = check_inputs(
        case["hidden"],
        case["weight"],
        case["targets"],
        chunk_size=1024,
        **{
            "temperature": 1.0,
            "with_entropy": False,
            "kept_ids": None,
            "kept_rows": None,
            **extra,
            **kw,
        },
    )  # type: ignore[arg-type]
    return logprob_triton.triton_selected_logprobs(inp, SMALL)


@pytest.mark.parametrize(
    ("seed", "n", "h", "v", "k", "temperature"),
    [
        (0, 7, 20, 37, None, 0.7),  # nothing divisible by the 16-wide tiles
        (1, 1, 5, 16, None, 1.0),  # one token
        (2, 19, 17, 33, 20, 1.3),  # kept sets over two kept blocks, mixed with full rows
    ],
)
def test_logprob_matches_naive(
    seed: int, n: int, h: int, v: int, k: int | None, temperature: float
) -> None:
    case = _case(seed, n, h, v, k)
    weights = torch.randn(n, dtype=F64, generator=torch.Generator().manual_seed(seed + 9))
    outs = []
    for fn in (_triton, None):
        hid = case["hidden"].clone().requires_grad_(True)
        w = case["weight"].clone().requires_grad_(True)
        c = {**case, "hidden": hid, "weight": w}
        if fn is None:
            extra = {key: case[key] for key in ("kept_ids", "kept_rows") if key in case}
            logp, ent = naive_selected_logprobs(
                hid, w, case["targets"], temperature=temperature, with_entropy=True, **extra
            )
        else:
            logp, ent = fn(c, temperature=temperature, with_entropy=True)
        assert ent is not None
        (weights * logp + 0.5 * weights.flip(0) * ent).sum().backward()
        outs.append((logp.detach(), ent.detach(), hid.grad, w.grad))
    for got, want in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_logprob_gradcheck() -> None:
    case = _case(3, 3, 4, 18, 3)

    def fn(hid: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logp, ent = _triton(
            {**case, "hidden": hid, "weight": w}, temperature=0.9, with_entropy=True
        )
        assert ent is not None
        return logp, ent

    args = (
        case["hidden"].clone().requires_grad_(True),
        case["weight"].clone().requires_grad_(True),
    )
    assert torch.autograd.gradcheck(
        fn, args, fast_mode=True
    )  # random projections: few interpreted runs


def test_logprob_float32_and_partial_gradients() -> None:
    case = _case(4, 9, 24, 40, 5)
    hid = case["hidden"].float().requires_grad_(True)
    w = case["weight"].float()  # no gradient for the head: the NEED_W=False path
    logp, ent = _triton({**case, "hidden": hid, "weight": w})
    assert ent is None and logp.dtype == torch.float32
    want = naive_selected_logprobs(
        case["hidden"],
        case["weight"],
        case["targets"],
        kept_ids=case["kept_ids"],
        kept_rows=case["kept_rows"],
    )[0]
    torch.testing.assert_close(logp.double(), want, rtol=1e-5, atol=1e-5)
    logp.sum().backward()
    ref = case["hidden"].clone().requires_grad_(True)
    naive_selected_logprobs(
        ref, case["weight"], case["targets"], kept_ids=case["kept_ids"], kept_rows=case["kept_rows"]
    )[0].sum().backward()
    assert hid.grad is not None and w.grad is None
    torch.testing.assert_close(hid.grad.double(), ref.grad, rtol=1e-4, atol=1e-5)


def test_logprob_kept_set_of_size_one() -> None:
    case = _case(5, 4, 6, 20)
    case["kept_ids"] = case["targets"].unsqueeze(1)
    logp, ent = _triton(case, with_entropy=True)
    assert ent is not None
    torch.testing.assert_close(logp, torch.zeros(4, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(ent, torch.zeros(4, dtype=F64), rtol=0, atol=1e-12)


def test_dispatch() -> None:
    case = _case(6, 5, 4, 21)
    args = (case["hidden"], case["weight"], case["targets"])
    forced = selected_logprobs(*args, backend="triton", with_entropy=True)  # default tiles
    torch_ = selected_logprobs(*args, backend="torch", with_entropy=True)
    torch.testing.assert_close(forced[0], torch_[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(forced[1], torch_[1], rtol=1e-12, atol=1e-12)


def test_auto_uses_torch_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the Triton path ran for CPU tensors")

    monkeypatch.setattr(logprob_triton, "triton_selected_logprobs", refuse)
    case = _case(7, 3, 4, 9)
    logp, _ = selected_logprobs(case["hidden"], case["weight"], case["targets"])
    assert logp.shape == (3,)


def test_triton_on_cpu_without_the_interpreter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET")
    case = _case(8, 3, 4, 9)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        selected_logprobs(case["hidden"], case["weight"], case["targets"], backend="triton")
    params = _moe_params(0, n=3, d=2, f=2, e=2)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        moe_forward(*params, top_k=1, impl="triton")


def test_bad_blocks() -> None:
    case = _case(9, 2, 3, 5)
    inp = check_inputs(
        case["hidden"],
        case["weight"],
        case["targets"],
        temperature=1.0,
        kept_ids=None,
        kept_rows=None,
        chunk_size=4,
        with_entropy=False,
    )
    for bad in (logprob_triton.Blocks(tokens=8), logprob_triton.Blocks(vocab=48)):
        with pytest.raises(ValueError, match="Blocks"):
            logprob_triton.triton_selected_logprobs(inp, bad)


# ---------------------------------------------------------------- MoE grouped matmul


def _moe_params(seed: int, *, n: int, d: int, f: int, e: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(*s, generator=g, dtype=F64)
        for s in ((n, d), (e, d), (e, f, d), (e, f, d), (e, d, f))
    ]


def test_grouped_mm_matches_torch_with_empty_and_long_segments() -> None:
    g = torch.Generator().manual_seed(10)
    counts = torch.tensor([5, 0, 35, 1])  # an empty expert, one spanning three 16-row tiles
    a = torch.randn(41, 18, generator=g, dtype=F64)
    w = torch.randn(4, 20, 18, generator=g, dtype=F64)
    up = torch.randn(41, 20, generator=g, dtype=F64)
    outs = []
    for backend in ("torch", "triton"):
        aa, ww = a.clone().requires_grad_(True), w.clone().requires_grad_(True)
        y = grouped_mm(aa, ww, counts, backend=backend)
        (y * up).sum().backward()
        outs.append((y.detach(), aa.grad, ww.grad))
    for got, want in zip(outs[1], outs[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_moe_triton_matches_loop_with_replayed_routes() -> None:
    n, d, f, e, k = 21, 17, 9, 4, 2
    g = torch.Generator().manual_seed(11)
    routes = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(n)])
    routes[3] = -1
    up = torch.randn(n, d, generator=g, dtype=F64)
    results = []
    for impl in ("loop", "triton"):
        params = [p.requires_grad_(True) for p in _moe_params(12, n=n, d=d, f=f, e=e)]
        y, _, _ = moe_forward(*params, top_k=k, routes=routes, impl=impl)  # type: ignore[arg-type]
        (y * up).sum().backward()
        results.append([y.detach(), *(p.grad for p in params)])
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_moe_triton_no_tokens() -> None:
    y, experts, _ = moe_forward(*_moe_params(13, n=0, d=3, f=2, e=3), top_k=2, impl="triton")
    assert y.shape == (0, 3) and experts.shape == (0, 2)
