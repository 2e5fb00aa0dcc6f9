"""``envgym bench kernels``: memory and time of the log-prob and MoE kernels vs. naive forms.

* ``naive_peak_mib`` / ``chunked_peak_mib`` — extra resident memory of one forward+backward of
  the selected-token log-prob (``envgym.kernels.logprob``: full ``[N, V]`` logits + log_softmax vs.
  the chunked op with recompute backward), at V=49,152 (SmolLM2), H=576, N=4,096 tokens, float32,
  gradients w.r.t. hidden states and the LM head.
* ``naive_ms`` / ``chunked_ms`` — median wall time of the same forward+backward.
* ``moe_loop_ms`` / ``moe_grouped_ms`` — forward+backward of one SwiGLU MoE MLP
  (``envgym.kernels.moe``; N=4,096, D=576, F=512, E=8, top-2): per-expert Python loop vs.
  sort + grouped matmul + one scatter.

How peak memory is measured (CPU, honestly): each log-prob variant runs in a fresh Python
subprocess.  After building its inputs the child resets the kernel's high-water mark of its
resident set (``echo 5 > /proc/self/clear_refs``), reads ``VmRSS`` as the baseline, runs one
forward+backward and reads ``VmHWM``: the peak is ``VmHWM − baseline``.  It is the first call
in the process, so one-time costs (thread pools, allocator arenas) count too — for both
variants alike.  Where ``clear_refs`` is unavailable the child falls back to ``ru_maxrss``
(the delta then under-reports when setup peaked higher).  Timings come from a third child that
runs both variants after a warm-up, interleaved (naive/chunked, then chunked/naive, ...), and
reports each one's median: wall-clock on a shared machine, so noisy, but load drift hits both.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from envgym.bench import BenchResult

REPO = Path(__file__).resolve().parents[2]

FULL = {"n": 4096, "h": 576, "v": 49152, "chunk": 1024, "reps": 3}
QUICK = {"n": 512, "h": 64, "v": 8192, "chunk": 1024, "reps": 2}
MOE_FULL = {"n": 4096, "d": 576, "f": 512, "e": 8, "k": 2, "reps": 2}
MOE_QUICK = {"n": 256, "d": 32, "f": 64, "e": 4, "k": 2, "reps": 2}


def run(quick: bool = False) -> BenchResult:
    shape = QUICK if quick else FULL
    naive = _in_child("naive", shape)
    chunked = _in_child("chunked", shape)
    times = _in_child("time", shape)
    moe = _moe(MOE_QUICK if quick else MOE_FULL)
    shown = f"V={shape['v']}, H={shape['h']}, N={shape['n']}"
    return BenchResult(
        benchmark="kernels",
        metrics={
            "naive_peak_mib": naive["peak_mib"],
            "chunked_peak_mib": chunked["peak_mib"],
            "naive_ms": times["naive_ms"],
            "chunked_ms": times["chunked_ms"],
            "moe_loop_ms": moe["loop"],
            "moe_grouped_ms": moe["grouped"],
        },
        units={
            "naive_peak_mib": "MiB",
            "chunked_peak_mib": "MiB",
            "naive_ms": "ms",
            "chunked_ms": "ms",
            "moe_loop_ms": "ms",
            "moe_grouped_ms": "ms",
        },
        notes={
            "naive_peak_mib": f"baseline: full logits, fwd+bwd, {shown}",
            "chunked_peak_mib": "target <= 1/4 of naive",
            "naive_ms": "baseline",
            "chunked_ms": "target <= 1.2x naive",
            "moe_loop_ms": "baseline: per-expert Python loop, fwd+bwd",
            "moe_grouped_ms": "sort + grouped matmul + one scatter",
        },
    )


def _in_child(variant: str, shape: dict[str, int]) -> dict[str, float]:
    """Run one log-prob variant in a fresh interpreter; its last stdout line is its result."""
    code = "import sys; from envgym.benchmarks.kernels import child_main; child_main(sys.argv[1])"
    arg = json.dumps({"variant": variant, **shape})
    proc = subprocess.run(
        [sys.executable, "-c", code, arg],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"kernels bench child ({variant}) failed with {proc.returncode}:\n{proc.stderr[-2000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_main(arg: str) -> None:
    """In this (fresh) process: ``naive``/``chunked`` — the peak extra memory of one fwd+bwd;
    ``time`` — median fwd+bwd ms of both variants, interleaved (drift in machine load hits both)."""
    import torch

    from envgym.kernels.logprob import naive_selected_logprobs, selected_logprobs

    cfg: dict[str, Any] = json.loads(arg)
    fns = {"naive": naive_selected_logprobs, "chunked": selected_logprobs}
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(cfg["n"], cfg["h"], generator=gen).requires_grad_(True)
    weight = (torch.randn(cfg["v"], cfg["h"], generator=gen) * 0.02).requires_grad_(True)
    targets = torch.randint(0, cfg["v"], (cfg["n"],), generator=gen)

    def step(variant: str) -> float:
        t0 = time.perf_counter()
        logp, _ = fns[variant](hidden, weight, targets, chunk_size=cfg["chunk"])
        logp.sum().backward()
        hidden.grad, weight.grad = None, None
        return (time.perf_counter() - t0) * 1e3

    if cfg["variant"] in fns:
        reset = _reset_peak()
        base = _rss_mib() if reset else _maxrss_mib()
        step(cfg["variant"])
        peak = _status_mib("VmHWM") if reset else _maxrss_mib()
        sys.stdout.write(json.dumps({"peak_mib": peak - base}) + "\n")
        return
    for variant in fns:  # warm-up: thread pools, allocator
        step(variant)
    times: dict[str, list[float]] = {"naive": [], "chunked": []}
    for rep in range(cfg["reps"]):
        for variant in ("naive", "chunked") if rep % 2 == 0 else ("chunked", "naive"):
            times[variant].append(step(variant))
    result = {f"{variant}_ms": median(ts) for variant, ts in times.items()}
    sys.stdout.write(json.dumps(result) + "\n")


def _moe(cfg: dict[str, int]) -> dict[str, float]:
    """Median fwd+bwd ms of the loop and grouped MoE experts on the same inputs and routes."""
    import torch

    from envgym.kernels.moe import moe_forward

    gen = torch.Generator().manual_seed(0)
    n, d, f, e = cfg["n"], cfg["d"], cfg["f"], cfg["e"]
    params = [
        (torch.randn(*s, generator=gen) * scale).requires_grad_(True)
        for s, scale in (
            ((n, d), 1.0),
            ((e, d), 0.1),
            ((e, f, d), 0.05),
            ((e, f, d), 0.05),
            ((e, d, f), 0.05),
        )
    ]

    def step(impl: str) -> float:
        t0 = time.perf_counter()
        y, _, _ = moe_forward(*params, top_k=cfg["k"], impl=impl)  # type: ignore[arg-type]
        y.square().mean().backward()
        for p in params:
            p.grad = None
        return (time.perf_counter() - t0) * 1e3

    step("loop")  # warm-up: thread pools, allocator
    out: dict[str, list[float]] = {"loop": [], "grouped": []}
    for _ in range(cfg["reps"]):  # interleaved, so drift in machine load hits both alike
        for impl in ("loop", "grouped"):
            out[impl].append(step(impl))
    return {impl: median(ts) for impl, ts in out.items()}


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0  # kB
    raise RuntimeError(f"{key} not in /proc/self/status")


def _rss_mib() -> float:
    return _status_mib("VmRSS")


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kB on Linux
