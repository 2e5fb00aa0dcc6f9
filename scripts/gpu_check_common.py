"""What every part of the GPU check shares (scripts/gpu_check.py is the entry point): the
problem sizes (the trainer's on a GPU, toy ones for ``--cpu``), the failure type and the
PASS/FAIL/SKIP report."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

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
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}
GPU = Sizes(4096, 576, 49152, 64, 4096, 576, 512, 8, SMOLLM2, 4, 8, 512, 128, 5)
TOY = Sizes(
    48,
    32,
    300,
    8,
    64,
    32,
    48,
    4,
    {
        **SMOLLM2,
        "vocab_size": 512,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
    2,
    4,
    24,
    8,
    1,
)


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


def sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
