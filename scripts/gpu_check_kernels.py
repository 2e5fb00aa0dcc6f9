"""The GPU check's kernel part (scripts/gpu_check.py runs it): the Triton selected-token
log-prob and MoE grouped-matmul kernels against float64 torch references, values and
gradients, then kernel vs torch timings in this one process (CUDA events, warm-up first,
interleaved rounds, median)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from gpu_check_common import F64, Failed, Report, Sizes, sync_device
from torch import Tensor

# Tolerances.  Values: max |Δ| in nats against a float64 reference on the same (rounded)
# inputs.  Gradients: max |Δ| / max |reference|.  float32 and bf16 inputs are computed in
# float32 (bf16 products are exact there), so both values meet 1e-3; bf16 gradients come back
# rounded to bf16 (relative step 2^-8); the MoE's bf16 path also rounds its intermediates.
TOL_VALUE = {torch.float32: 1e-3, torch.bfloat16: 1e-3, F64: 1e-9}
TOL_GRAD = {torch.float32: 1e-3, torch.bfloat16: 1e-2, F64: 1e-9}
TOL_MOE = {torch.float32: 1e-3, torch.bfloat16: 5e-2, F64: 1e-9}


def _err(got: Tensor, ref: Tensor) -> float:
    return float((got.double() - ref.double()).abs().max()) if ref.numel() else 0.0


def _rel(got: Tensor, ref: Tensor) -> float:
    scale = float(ref.double().abs().max()) if ref.numel() else 0.0
    return _err(got, ref) / (scale or 1.0)


def _time_ms(fn: Callable[[], object], device: torch.device) -> float:
    if device.type != "cuda":
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end)


def _peak_mib(fn: Callable[[], object], device: torch.device) -> float:
    """Extra device memory one call needs above what was allocated before it."""
    if device.type != "cuda":
        return math.nan
    sync_device(device)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    sync_device(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


def compare_timings(
    variants: dict[str, Callable[[], object]], device: torch.device, reps: int
) -> dict[str, tuple[float, float]]:
    """``{name: (median ms, peak MiB)}``: two warm-up calls each (the first compiles), then
    ``reps`` interleaved rounds so a clock or thermal drift hits every variant alike."""
    for fn in variants.values():
        fn()
        fn()
    sync_device(device)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(reps):
        for name, fn in variants.items():
            times[name].append(_time_ms(fn, device))
    return {
        name: (statistics.median(times[name]), _peak_mib(fn, device))
        for name, fn in variants.items()
    }


def _print_times(report: Report, what: str, res: dict[str, tuple[float, float]], base: str) -> None:
    ref = res[base][0]
    parts = [
        f"{name} {ms:.2f} ms ({ms / ref:.2f}x {base}, peak {mib:.0f} MiB)"
        for name, (ms, mib) in res.items()
    ]
    report.line("TIME", what, "; ".join(parts))


def _logprob_case(
    sizes: Sizes, dtype: torch.dtype, device: torch.device, *, seed: int = 0
) -> dict[str, Any]:
    """Hidden states and a head whose logits spread like a trained LM's (std ~3), half the rows
    under a kept set (target first, some padding and repeats), upstream gradients for both
    outputs."""
    n, h, v, k = sizes.tokens, sizes.hidden, sizes.vocab, sizes.kept
    g = torch.Generator(device="cpu").manual_seed(seed)
    hidden = torch.randn(n, h, generator=g)
    weight = torch.randn(v, h, generator=g) * (3.0 / math.sqrt(h))
    targets = torch.randint(0, v, (n,), generator=g)
    kept = torch.randint(0, v, (n, k), generator=g)
    kept[torch.rand(n, k, generator=g) < 0.25] = -1
    kept[:, 1] = kept[:, 2]  # a repeated id counts once
    kept[:, 0] = targets
    case = {
        "hidden": hidden.to(dtype),
        "weight": weight.to(dtype),
        "targets": targets,
        "kept_ids": kept,
        "kept_rows": torch.rand(n, generator=g) < 0.5,
        "a": torch.randn(n, generator=g),
        "b": torch.randn(n, generator=g),
    }
    return {key: t.to(device) for key, t in case.items()}


def _logprob_grads(
    fn: Callable[..., Any], case: dict[str, Any], dtype: torch.dtype, **kw: Any
) -> tuple[Tensor, ...]:
    hidden = case["hidden"].detach().to(dtype).requires_grad_()
    weight = case["weight"].detach().to(dtype).requires_grad_()
    logp, ent = fn(
        hidden,
        weight,
        case["targets"],
        kept_ids=case["kept_ids"],
        kept_rows=case["kept_rows"],
        temperature=0.8,
        with_entropy=True,
        **kw,
    )
    loss = (logp * case["a"].to(logp.dtype)).sum() + (ent * case["b"].to(ent.dtype)).sum()
    loss.backward()
    return logp.detach(), ent.detach(), hidden.grad, weight.grad


def check_logprob(sizes: Sizes, dtype: torch.dtype, device: torch.device) -> str:
    from envgym.kernels.logprob import naive_selected_logprobs, selected_logprobs

    case = _logprob_case(sizes, dtype, device)
    ref = _logprob_grads(naive_selected_logprobs, case, F64)
    out = []
    for backend in ("triton", "torch"):
        got = _logprob_grads(selected_logprobs, case, dtype, backend=backend)
        errs = [
            _err(got[0], ref[0]),
            _err(got[1], ref[1]),
            _rel(got[2], ref[2]),
            _rel(got[3], ref[3]),
        ]
        tol = (TOL_VALUE[dtype], TOL_VALUE[dtype], TOL_GRAD[dtype], TOL_GRAD[dtype])
        detail = (
            f"{backend}: |dlogp| {errs[0]:.1e} |dH| {errs[1]:.1e} dh {errs[2]:.1e} dW {errs[3]:.1e}"
        )
        if got[2].dtype != dtype or got[3].dtype != dtype:
            raise Failed(f"{backend}: gradients in {got[2].dtype}/{got[3].dtype}, not {dtype}")
        if not all(math.isfinite(e) and e <= t for e, t in zip(errs, tol, strict=True)):
            raise Failed(f"{detail} over the tolerances {tol}")
        out.append(detail)
    return (
        f"N={sizes.tokens} V={sizes.vocab} H={sizes.hidden}, half the rows kept "
        f"(K={sizes.kept}), T=0.8, logp+entropy; vs float64: "
        + "; ".join(out)
        + f" (tol values {TOL_VALUE[dtype]:g}, grads {TOL_GRAD[dtype]:g} of max)"
    )


def time_logprob(report: Report, sizes: Sizes, dtype: torch.dtype, device: torch.device) -> None:
    """The benchmark's op (docs/KERNELS.md): full-vocabulary rows, ``logp.sum()`` forward +
    backward with gradients for the hidden states and the head."""
    from envgym.kernels.logprob import naive_selected_logprobs, selected_logprobs

    case = _logprob_case(sizes, dtype, device, seed=1)

    def variant(fn: Callable[..., Any], **kw: Any) -> Callable[[], None]:
        def run() -> None:
            hidden = case["hidden"].detach().requires_grad_()
            weight = case["weight"].detach().requires_grad_()
            logp, _ = fn(hidden, weight, case["targets"], **kw)
            logp.sum().backward()

        return run

    res = compare_timings(
        {
            "triton": variant(selected_logprobs, backend="triton"),
            "torch-chunked": variant(selected_logprobs, backend="torch"),
            "torch-naive": variant(naive_selected_logprobs),
        },
        device,
        sizes.reps,
    )
    _print_times(
        report,
        f"logprob {str(dtype).removeprefix('torch.')} fwd+bwd "
        f"N={sizes.tokens} V={sizes.vocab} H={sizes.hidden}",
        res,
        "torch-naive",
    )


def _moe_case(
    sizes: Sizes, dtype: torch.dtype, device: torch.device, *, seed: int = 0
) -> dict[str, Tensor]:
    from envgym.kernels.moe import route

    n, d, f, e = sizes.moe_tokens, sizes.moe_dim, sizes.moe_ffn, sizes.moe_experts
    g = torch.Generator(device="cpu").manual_seed(seed)
    logits = torch.randn(n, e, generator=g)
    logits[:, -1] = -math.inf  # the last expert gets no token: an empty segment
    experts, gates = route(logits, 2)
    case = {
        "x": torch.randn(n, d, generator=g),
        "w1": torch.randn(e, f, d, generator=g) / math.sqrt(d),
        "w3": torch.randn(e, f, d, generator=g) / math.sqrt(d),
        "w2": torch.randn(e, d, f, generator=g) / math.sqrt(f),
        "gates": gates,
        "r": torch.randn(n, d, generator=g),
    }
    out = {key: t.to(dtype).to(device) for key, t in case.items()}
    out["experts"] = experts.to(device)
    return out


def _moe_grads(case: dict[str, Tensor], dtype: torch.dtype, impl: str) -> list[Tensor]:
    from envgym.kernels.moe import moe_experts

    names = ("x", "gates", "w1", "w3", "w2")
    leaves = {k: case[k].detach().to(dtype).requires_grad_() for k in names}
    y = moe_experts(
        leaves["x"],
        case["experts"],
        leaves["gates"],
        leaves["w1"],
        leaves["w3"],
        leaves["w2"],
        impl=impl,
    )  # type: ignore[arg-type]
    (y * case["r"].to(dtype)).sum().backward()
    return [y.detach()] + [leaves[k].grad for k in names]  # type: ignore[misc]


def check_moe(sizes: Sizes, dtype: torch.dtype, device: torch.device) -> str:
    case = _moe_case(sizes, dtype, device)
    ref = _moe_grads(case, F64, "loop")
    names = ("y", "dx", "dgates", "dw1", "dw3", "dw2")
    parts = []
    for impl in ("triton", "grouped"):
        got = _moe_grads(case, dtype, impl)
        errs = [_rel(a, b) for a, b in zip(got, ref, strict=True)]
        parts.append(
            f"{impl}: " + " ".join(f"{n} {e:.1e}" for n, e in zip(names, errs, strict=True))
        )
        if impl == "triton" and not all(math.isfinite(e) and e <= TOL_MOE[dtype] for e in errs):
            raise Failed(f"{parts[-1]} over the tolerance {TOL_MOE[dtype]:g}")
    return (
        f"N={sizes.moe_tokens} D={sizes.moe_dim} F={sizes.moe_ffn} E={sizes.moe_experts} "
        f"top-2, one expert empty; max|d|/max|ref| vs float64 loop: "
        + "; ".join(parts)
        + f" (tol {TOL_MOE[dtype]:g}, triton only)"
    )


def time_moe(report: Report, sizes: Sizes, dtype: torch.dtype, device: torch.device) -> None:
    case = _moe_case(sizes, dtype, device, seed=1)
    res = compare_timings(
        {
            impl: lambda impl=impl: _moe_grads(case, dtype, impl)
            for impl in ("triton", "grouped", "loop")
        },
        device,
        sizes.reps,
    )
    _print_times(
        report,
        f"moe {str(dtype).removeprefix('torch.')} fwd+bwd "
        f"N={sizes.moe_tokens} D={sizes.moe_dim} F={sizes.moe_ffn} "
        f"E={sizes.moe_experts}",
        res,
        "loop",
    )
