"""The one GRPO iteration ``envgym bench train-trl`` runs on both sides: prompts, reward, settings.

Standard library only: TRL's child (:mod:`benchmarks.trl_grpo_child`, run by ``.venv-trl``'s
python, where envgym is not installed) loads this file by path, so envgym and TRL read the same
prompts, answers, reward and hyper-parameters from one place.

The reward is a deterministic string match (1.0 when the answer's digits appear in the
completion as a whole number, else 0.0): both frameworks compute it from the completion text
alone, and the benchmark measures the machinery, not learning.
"""

from __future__ import annotations

import re
from typing import Any

# (prompt, answer): short arithmetic a 135M model sometimes gets right, so groups have mixed
# rewards and the update has a gradient.
TASKS: tuple[tuple[str, str], ...] = (
    ("What is 7 + 5? Answer with the number only.", "12"),
    ("What is 9 - 4? Answer with the number only.", "5"),
    ("What is 3 * 6? Answer with the number only.", "18"),
    ("What is 20 / 4? Answer with the number only.", "5"),
    ("What is 11 + 8? Answer with the number only.", "19"),
    ("What is 15 - 7? Answer with the number only.", "8"),
    ("What is 4 * 4? Answer with the number only.", "16"),
    ("What is 2 + 2? Answer with the number only.", "4"),
)
GROUP_SIZE = 8  # completions per prompt: 8 × 8 = 64 per iteration
MAX_NEW_TOKENS = 64
TEMPERATURE = 1.0  # top-p 1, top-k off on both sides
LR = 1e-6
BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
WEIGHT_DECAY = 0.0
MAX_GRAD_NORM = 1.0
KL_BETA = 0.0  # no reference model on either side


def reward(completion: str, answer: str) -> float:
    """1.0 when ``answer`` appears in ``completion`` as a whole number, else 0.0."""
    return 1.0 if re.search(rf"(?<!\d){re.escape(answer)}(?!\d)", completion) else 0.0


def spec() -> dict[str, Any]:
    """The settings both children must use (written into the benchmark's result for the record)."""
    return {
        "prompts": len(TASKS),
        "group_size": GROUP_SIZE,
        "max_new_tokens": MAX_NEW_TOKENS,
        "temperature": TEMPERATURE,
        "lr": LR,
        "betas": list(BETAS),
        "adam_eps": ADAM_EPS,
        "weight_decay": WEIGHT_DECAY,
        "max_grad_norm": MAX_GRAD_NORM,
        "kl_beta": KL_BETA,
    }
