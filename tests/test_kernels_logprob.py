"""envgym.kernels.logprob: the chunked selected-token log-prob/entropy op vs. hand values and the
naive op.

Hand values use a one-dimensional hidden state so the logits are exactly the head's entries:
``hidden = [[1]]``, ``weight = [[0], [ln 2], [ln 3]]`` gives ``e^z = 1, 2, 3`` (probabilities
1/6, 2/6, 3/6).  Everything else compares with :func:`naive_selected_logprobs` in float64
(values and gradients) and runs ``torch.autograd.gradcheck`` on tiny shapes.
"""

from __future__ import annotations

import math

import pytest
import torch

from envgym.kernels.logprob import naive_selected_logprobs, selected_logprobs

F64 = torch.float64


def _hand_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    hidden = torch.tensor([[1.0]], dtype=F64)
    weight = torch.tensor([[0.0], [math.log(2.0)], [math.log(3.0)]], dtype=F64)
    return hidden, weight


def _random_case(
    seed: int, n: int, h: int, v: int, k: int | None = None, frac_kept: float = 0.6
) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g, dtype=F64)
    weight = torch.randn(v, h, generator=g, dtype=F64)
    targets = torch.randint(0, v, (n,), generator=g)
    case = {"hidden": hidden, "weight": weight, "targets": targets}
    if k is not None:
        kept = torch.randint(0, v, (n, k), generator=g)
        kept[:, 0] = targets  # the sampler drew the target from its kept set
        pad = torch.rand(n, k, generator=g) < 0.3
        pad[:, 0] = False
        kept[pad] = -1  # ragged sets: -1 padding
        case["kept_ids"] = kept
        case["kept_rows"] = torch.rand(n, generator=g) < frac_kept
    return case


# ---------------------------------------------------------------- hand-computed values


def test_full_vocabulary_by_hand() -> None:
    hidden, weight = _hand_inputs()
    logp, ent = selected_logprobs(
        hidden, weight, torch.tensor([2]), with_entropy=True, chunk_size=2
    )
    assert logp.item() == pytest.approx(math.log(1 / 2), abs=1e-12)
    expected_h = -(1 / 6 * math.log(1 / 6) + 2 / 6 * math.log(2 / 6) + 3 / 6 * math.log(3 / 6))
    assert ent is not None and ent.item() == pytest.approx(expected_h, abs=1e-12)


def test_temperature_by_hand() -> None:
    # T = 0.5 squares e^z: 1, 4, 9 -> probabilities 1/14, 4/14, 9/14
    hidden, weight = _hand_inputs()
    logp, ent = selected_logprobs(
        hidden, weight, torch.tensor([1]), temperature=0.5, with_entropy=True, chunk_size=1
    )
    assert logp.item() == pytest.approx(math.log(4 / 14), abs=1e-12)
    ps = [1 / 14, 4 / 14, 9 / 14]
    assert ent is not None and ent.item() == pytest.approx(
        -sum(p * math.log(p) for p in ps), abs=1e-12
    )


def test_keep_mask_renormalizes_by_hand() -> None:
    # kept {1, 2}: probabilities 2/5, 3/5 (token 0 is outside the sampler's set)
    hidden, weight = _hand_inputs()
    kept = torch.tensor([[2, -1, 1]])
    logp, ent = selected_logprobs(
        hidden, weight, torch.tensor([2]), kept_ids=kept, with_entropy=True, chunk_size=1
    )
    assert logp.item() == pytest.approx(math.log(3 / 5), abs=1e-12)
    assert ent is not None
    assert ent.item() == pytest.approx(-(0.4 * math.log(0.4) + 0.6 * math.log(0.6)), abs=1e-12)


def test_gradient_by_hand() -> None:
    # d log p_2 / d z = onehot(2) - p = (-1/6, -1/3, 1/2); z_v = hidden * w_v, so
    # d/d hidden = sum_v (onehot - p)_v w_v and d/d w_v = (onehot - p)_v * hidden (= 1)
    hidden, weight = _hand_inputs()
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    logp, _ = selected_logprobs(hidden, weight, torch.tensor([2]), chunk_size=2)
    logp.sum().backward()
    g = [-1 / 6, -1 / 3, 1 / 2]
    assert hidden.grad is not None and weight.grad is not None
    expected_dh = g[1] * math.log(2.0) + g[2] * math.log(3.0)
    assert hidden.grad.item() == pytest.approx(expected_dh, abs=1e-12)
    assert weight.grad.squeeze(1).tolist() == pytest.approx(g, abs=1e-12)


# ---------------------------------------------------------------- agreement with the naive op


@pytest.mark.parametrize(
    ("seed", "n", "h", "v", "k", "chunk", "token_chunk", "temperature"),
    [
        (0, 9, 5, 37, None, 8, None, 1.0),  # vocabulary not divisible by the chunk
        (1, 1, 3, 11, None, 4, None, 0.7),  # one token
        (2, 16, 4, 50, 6, 7, 3, 1.3),  # kept sets, several row blocks
        (3, 12, 6, 29, 3, 64, None, 1.0),  # chunk larger than the vocabulary
        (4, 10, 2, 13, 5, 1, 4, 0.9),  # chunk of one column
        (5, 8, 7, 40, 40, 9, 2, 1.0),  # kept sets as large as the vocabulary
    ],
)
def test_matches_naive_values_and_gradients(
    seed: int,
    n: int,
    h: int,
    v: int,
    k: int | None,
    chunk: int,
    token_chunk: int | None,
    temperature: float,
) -> None:
    case = _random_case(seed, n, h, v, k)
    weights = torch.randn(n, dtype=F64, generator=torch.Generator().manual_seed(seed + 100))
    outs = []
    for fn, extra in (
        (selected_logprobs, {"token_chunk": token_chunk}),
        (naive_selected_logprobs, {}),
    ):
        hid = case["hidden"].clone().requires_grad_(True)
        w = case["weight"].clone().requires_grad_(True)
        kw = {key: val for key, val in case.items() if key not in ("hidden", "weight", "targets")}
        logp, ent = fn(
            hid,
            w,
            case["targets"],
            temperature=temperature,
            chunk_size=chunk,
            with_entropy=True,
            **kw,
            **extra,
        )
        assert ent is not None
        # a loss touching both outputs with distinct per-row weights
        (weights * logp + 0.37 * weights.flip(0) * ent).sum().backward()
        outs.append((logp.detach(), ent.detach(), hid.grad, w.grad))
    for got, want in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("seed", range(4))
def test_random_shapes_match_naive(seed: int) -> None:
    g = torch.Generator().manual_seed(1000 + seed)
    n, h, v = (
        int(x)
        for x in (
            torch.randint(1, 20, (1,), generator=g),
            torch.randint(1, 9, (1,), generator=g),
            torch.randint(2, 80, (1,), generator=g),
        )
    )
    chunk = int(torch.randint(1, v + 5, (1,), generator=g))
    k = int(torch.randint(1, 8, (1,), generator=g))
    case = _random_case(seed, n, h, v, k, frac_kept=0.5)
    kw = {key: val for key, val in case.items() if key not in ("hidden", "weight", "targets")}
    got = selected_logprobs(
        case["hidden"], case["weight"], case["targets"], chunk_size=chunk, with_entropy=True, **kw
    )
    want = naive_selected_logprobs(
        case["hidden"], case["weight"], case["targets"], with_entropy=True, **kw
    )
    torch.testing.assert_close(got[0], want[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got[1], want[1], rtol=1e-10, atol=1e-10)


def test_gradcheck_full_and_kept() -> None:
    case = _random_case(7, 4, 3, 9, 3)

    def fn(hid: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logp, ent = selected_logprobs(
            hid,
            w,
            case["targets"],
            kept_ids=case["kept_ids"],
            kept_rows=case["kept_rows"],
            chunk_size=4,
            token_chunk=2,
            with_entropy=True,
            temperature=0.8,
        )
        assert ent is not None
        return logp, ent

    hid = case["hidden"].clone().requires_grad_(True)
    w = case["weight"].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(fn, (hid, w))


def test_gradient_of_entropy_alone_and_of_logp_alone() -> None:
    case = _random_case(8, 5, 4, 17, 4)
    kw = {
        "kept_ids": case["kept_ids"],
        "kept_rows": case["kept_rows"],
        "chunk_size": 5,
        "with_entropy": True,
    }
    for pick in (0, 1):
        grads = []
        for fn in (selected_logprobs, naive_selected_logprobs):
            hid = case["hidden"].clone().requires_grad_(True)
            out = fn(hid, case["weight"], case["targets"], **kw)[pick]
            assert out is not None
            out.sum().backward()
            grads.append(hid.grad)
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-10)


def test_only_requested_gradients() -> None:
    case = _random_case(9, 3, 2, 7)
    hid = case["hidden"].clone().requires_grad_(True)
    w = case["weight"].clone()
    logp, ent = selected_logprobs(hid, w, case["targets"], chunk_size=3)
    assert ent is None
    logp.sum().backward()
    assert hid.grad is not None and w.grad is None


# ---------------------------------------------------------------- keep sampling mask edge cases


def test_kept_set_of_size_one_is_certain() -> None:
    case = _random_case(10, 4, 3, 12)
    kept = case["targets"].unsqueeze(1)
    hid = case["hidden"].clone().requires_grad_(True)
    logp, ent = selected_logprobs(
        hid, case["weight"], case["targets"], kept_ids=kept, with_entropy=True, chunk_size=5
    )
    assert ent is not None
    torch.testing.assert_close(logp, torch.zeros(4, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(ent, torch.zeros(4, dtype=F64), rtol=0, atol=1e-12)
    (logp + ent).sum().backward()
    assert hid.grad is not None
    torch.testing.assert_close(hid.grad, torch.zeros_like(hid), rtol=0, atol=1e-12)


def test_all_rows_full_vocabulary_equals_no_kept_sets() -> None:
    case = _random_case(11, 6, 4, 21, 3)
    off = torch.zeros(6, dtype=torch.bool)
    with_sets = selected_logprobs(
        case["hidden"],
        case["weight"],
        case["targets"],
        kept_ids=case["kept_ids"],
        kept_rows=off,
        with_entropy=True,
        chunk_size=4,
    )
    plain = selected_logprobs(
        case["hidden"], case["weight"], case["targets"], with_entropy=True, chunk_size=4
    )
    torch.testing.assert_close(with_sets[0], plain[0], rtol=0, atol=0)
    torch.testing.assert_close(with_sets[1], plain[1], rtol=0, atol=0)


def test_kept_set_covering_the_vocabulary_equals_full() -> None:
    case = _random_case(12, 5, 3, 10)
    everything = torch.arange(10).repeat(5, 1)
    kept = selected_logprobs(
        case["hidden"], case["weight"], case["targets"], kept_ids=everything, with_entropy=True
    )
    full = selected_logprobs(case["hidden"], case["weight"], case["targets"], with_entropy=True)
    torch.testing.assert_close(kept[0], full[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kept[1], full[1], rtol=1e-12, atol=1e-12)


def test_repeated_and_padded_kept_ids_count_once() -> None:
    case = _random_case(13, 3, 3, 8)
    t = case["targets"]
    other = (t + 1) % 8
    clean = torch.stack([t, other], dim=1)
    messy = torch.stack([other, t, -torch.ones_like(t), t, other, -torch.ones_like(t)], dim=1)
    a = selected_logprobs(case["hidden"], case["weight"], t, kept_ids=clean, with_entropy=True)
    b = selected_logprobs(case["hidden"], case["weight"], t, kept_ids=messy, with_entropy=True)
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=1e-14)
    torch.testing.assert_close(a[1], b[1], rtol=0, atol=1e-14)


def test_padding_rows_do_not_change_other_rows() -> None:
    # appending rows (e.g. padded positions of a batch) leaves the other rows' values and
    # gradients alone when the loss does not use the extra rows
    case = _random_case(14, 6, 4, 15, 4)
    kw = {
        "kept_ids": case["kept_ids"],
        "kept_rows": case["kept_rows"],
        "chunk_size": 4,
        "with_entropy": True,
    }
    hid = case["hidden"].clone().requires_grad_(True)
    w = case["weight"].clone().requires_grad_(True)
    logp, ent = selected_logprobs(
        hid[:4],
        w,
        case["targets"][:4],
        **{**kw, "kept_ids": case["kept_ids"][:4], "kept_rows": case["kept_rows"][:4]},
    )
    assert ent is not None
    (logp + ent).sum().backward()
    g_small = (hid.grad.clone(), w.grad.clone())  # type: ignore[union-attr]
    hid.grad, w.grad = None, None
    mask = torch.tensor([1, 1, 1, 1, 0, 0], dtype=F64)
    logp, ent = selected_logprobs(hid, w, case["targets"], token_chunk=4, **kw)
    assert ent is not None
    ((logp + ent) * mask).sum().backward()
    torch.testing.assert_close(hid.grad, g_small[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w.grad, g_small[1], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- dtypes and memory


def test_half_precision_inputs_compute_in_float32() -> None:
    case = _random_case(15, 6, 8, 30)
    hid = case["hidden"].to(torch.bfloat16).requires_grad_(True)
    w = case["weight"].to(torch.bfloat16).requires_grad_(True)
    logp, ent = selected_logprobs(hid, w, case["targets"], with_entropy=True, chunk_size=7)
    assert logp.dtype == torch.float32 and ent is not None and ent.dtype == torch.float32
    want = naive_selected_logprobs(
        hid.detach().double(), w.detach().double(), case["targets"], with_entropy=True
    )
    torch.testing.assert_close(logp.double(), want[0], rtol=1e-5, atol=1e-5)
    (logp.sum() + ent.sum()).backward()
    assert hid.grad is not None and hid.grad.dtype == torch.bfloat16
    assert w.grad is not None and w.grad.dtype == torch.bfloat16


def test_never_allocates_full_logits() -> None:
    # every single allocation of the chunked forward+backward stays far below one [N, V] copy
    n, h, v, chunk = 64, 8, 2048, 128
    case = _random_case(16, n, h, v)
    hid = case["hidden"].float().requires_grad_(True)
    w = case["weight"].float().requires_grad_(True)
    full_bytes = n * v * 4

    def biggest_allocation(fn: object) -> int:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            logp, ent = fn(  # type: ignore[operator]
                hid, w, case["targets"], chunk_size=chunk, with_entropy=True
            )
            (logp.sum() + ent.sum()).backward()
        return max(max(e.self_cpu_memory_usage, 0) for e in prof.events())

    assert biggest_allocation(naive_selected_logprobs) >= full_bytes  # the probe sees [N, V]
    assert biggest_allocation(selected_logprobs) <= full_bytes // 4


def test_saves_no_logit_sized_tensor_for_backward() -> None:
    n, h, v = 32, 4, 512
    case = _random_case(17, n, h, v)
    hid = case["hidden"].requires_grad_(True)
    sizes: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        selected_logprobs(hid, case["weight"], case["targets"], chunk_size=64, with_entropy=True)
    assert sizes and max(sizes) <= v * h  # the head itself, never n × v


# ---------------------------------------------------------------- bad input


def _ok() -> dict[str, object]:
    return {
        "hidden": torch.randn(3, 2),
        "weight": torch.randn(5, 2),
        "targets": torch.tensor([0, 4, 2]),
    }


@pytest.mark.parametrize(
    ("change", "error", "needle"),
    [
        ({"hidden": [[1.0, 2.0]]}, TypeError, "hidden"),
        ({"hidden": torch.ones(3, 2, dtype=torch.int64)}, TypeError, "hidden"),
        ({"hidden": torch.randn(3, 2, 1)}, ValueError, "hidden"),
        ({"weight": torch.randn(5, 3)}, ValueError, "weight"),
        ({"weight": torch.randn(0, 2)}, ValueError, "vocabulary"),
        ({"targets": torch.tensor([0, 4, 2], dtype=torch.int32)}, TypeError, "targets"),
        ({"targets": torch.tensor([0, 4])}, ValueError, "targets"),
        ({"targets": torch.tensor([0, 5, 2])}, ValueError, "targets"),
        ({"targets": torch.tensor([0, -1, 2])}, ValueError, "targets"),
        ({"temperature": 0.0}, ValueError, "temperature"),
        ({"temperature": float("nan")}, ValueError, "temperature"),
        ({"temperature": "1"}, TypeError, "temperature"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
        ({"chunk_size": 2.5}, TypeError, "chunk_size"),
        ({"with_entropy": 1}, TypeError, "with_entropy"),
        ({"kept_rows": torch.ones(3, dtype=torch.bool)}, ValueError, "kept_rows"),
        ({"kept_ids": torch.tensor([[0], [4], [2]], dtype=torch.int32)}, TypeError, "kept_ids"),
        ({"kept_ids": torch.tensor([0, 4, 2])}, ValueError, "kept_ids"),
        ({"kept_ids": torch.tensor([[0], [4], [5]])}, ValueError, "kept_ids"),
        ({"kept_ids": torch.tensor([[0], [4], [-2]])}, ValueError, "kept_ids"),
        ({"kept_ids": torch.tensor([[0], [3], [2]])}, ValueError, "targets[1]"),
        ({"kept_ids": torch.tensor([[0], [-1], [2]])}, ValueError, "empty kept set"),
        (
            {"kept_ids": torch.tensor([[0], [4], [2]]), "kept_rows": torch.ones(3)},
            ValueError,
            "kept_rows",
        ),
        (
            {
                "kept_ids": torch.tensor([[0], [4], [2]]),
                "kept_rows": torch.ones(2, dtype=torch.bool),
            },
            ValueError,
            "kept_rows",
        ),
        ({"token_chunk": 0}, ValueError, "token_chunk"),
        ({"backend": "cuda"}, ValueError, "backend"),
    ],
)
def test_bad_input_names_the_argument(
    change: dict[str, object], error: type[Exception], needle: str
) -> None:
    args = {**_ok(), **change}
    with pytest.raises(error, match=needle.replace("[", r"\[").replace("]", r"\]")):
        hidden, weight, targets = args.pop("hidden"), args.pop("weight"), args.pop("targets")
        selected_logprobs(hidden, weight, targets, **args)  # type: ignore[arg-type]


def test_naive_checks_the_same_inputs() -> None:
    with pytest.raises(ValueError, match="targets"):
        naive_selected_logprobs(torch.randn(2, 2), torch.randn(3, 2), torch.tensor([0, 3]))


def test_a_kept_row_whose_target_is_outside_is_fine_when_the_row_is_off() -> None:
    args = _ok()
    kept = torch.tensor([[0], [3], [2]])  # row 1's set misses its target, but row 1 is full-vocab
    rows = torch.tensor([True, False, True])
    logp, _ = selected_logprobs(
        args["hidden"], args["weight"], args["targets"], kept_ids=kept, kept_rows=rows
    )  # type: ignore[arg-type]
    assert torch.isfinite(logp).all()


@pytest.mark.parametrize("k", [None, 4])
def test_logp_only_gradient_with_signed_and_zero_upstream(k: int | None) -> None:
    # without entropy the backward folds sign(a) and log|a| into the tile: negative, zero
    # and positive upstream gradients must all come out right
    case = _random_case(18, 9, 4, 23, k)
    upstream = torch.tensor([1.5, -2.0, 0.0, 0.3, -0.7, 0.0, 2.5, -1.0, 1.0], dtype=F64)
    kw = {key: val for key, val in case.items() if key not in ("hidden", "weight", "targets")}
    grads = []
    for fn in (selected_logprobs, naive_selected_logprobs):
        hid = case["hidden"].clone().requires_grad_(True)
        w = case["weight"].clone().requires_grad_(True)
        logp, _ = fn(hid, w, case["targets"], chunk_size=6, temperature=0.8, **kw)
        (upstream * logp).sum().backward()
        grads.append((hid.grad, w.grad))
    for got, want in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_no_tokens() -> None:
    hid = torch.zeros(0, 4, dtype=F64, requires_grad=True)
    w = torch.randn(7, 4, dtype=F64, requires_grad=True)
    logp, ent = selected_logprobs(hid, w, torch.zeros(0, dtype=torch.int64), with_entropy=True)
    assert ent is not None and logp.shape == ent.shape == (0,)
    (logp.sum() + ent.sum()).backward()
    assert w.grad is not None and not bool(w.grad.any())
