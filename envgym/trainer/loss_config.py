"""The loss's hyper-parameters (the ``loss:`` section of a training config), checked on construction.

Kept apart from envgym/trainer/losses.py, which computes with them: the config loader reads only
this, and every field's check (a clear error naming the field) sits beside its default and source.
docs/LOSSES.md has the table of terms and options with their seed sections.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from envgym.trainer.aggregation import AGGREGATIONS, Aggregation

__all__ = ["LOSS_KINDS", "RATIO_LEVELS", "LossConfig", "LossKind", "RatioLevel"]

# grpo: the clipped surrogate (DeepSeek-V3.2 §3.1 eq. 5); cispo: a clipped, stop-gradient IS
# weight on every token's log π_θ (MiniMax-M1 §3.1), so no token loses its gradient to the clip.
LossKind = Literal["grpo", "cispo"]
LOSS_KINDS: tuple[str, ...] = ("grpo", "cispo")
# token: one ratio per token (eq. 6); sequence: GSPO's length-normalized sequence ratio
# exp(mean_t log r_t) over a trajectory's trained tokens, clipped per sequence.
RatioLevel = Literal["token", "sequence"]
RATIO_LEVELS: tuple[str, ...] = ("token", "sequence")


def _number(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "a number or None" if optional else "a number"
        raise TypeError(f"{name} must be {kind}, not {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


@dataclass(frozen=True)
class LossConfig:
    """Loss hyper-parameters; every field checked on construction (clear error naming it)."""

    eps_low: float = 0.2  # ratio floor 1 − ε_low where Â < 0 (eq. 5)
    eps_high: float = 0.28  # clip-higher: room for low-probability tokens to rise (Seed §4.2)
    dual_clip: float | None = 3.0  # c > 1: ratio cap for Â < 0 (LongCat triple clip), None = off
    kl_beta: float = 0.0  # β of eq. 5/7; 0 = no KL (LongCat §3.2.1, AM-Thinking)
    opsm_delta: float | None = None  # δ of eq. 9, None = no off-policy sequence masking
    tis_cap: float | None = 2.0  # C of truncated IS, None = no engine/trainer correction
    aggregation: Aggregation = "token-mean"
    normalizer: float | None = None  # the constant denominator, only for "constant"
    lm_coef: float = 0.0  # μ of Seed-Thinking eq. 2 (positive-example LM loss)
    kind: LossKind = "grpo"  # the policy-gradient term: clipped surrogate or CISPO
    ratio_level: RatioLevel = "token"  # GSPO (Qwen, "Group Sequence Policy Optimization" §4)
    # GSPO's clip range of the sequence ratio: its §5.1 uses 3e-4 / 4e-4 — a length-normalized
    # ratio sits far closer to 1 than a token's, so the token ε would never clip it.
    seq_eps_low: float = 3e-4
    seq_eps_high: float = 4e-4
    entropy_coef: float = 0.0  # η: ℓ −= η·H_t, aggregated like the loss; 0 = no bonus
    # Replace the KL reference by a copy of the policy every N steps (0 = never; needs β > 0).
    ref_sync_every: int = 0

    def __post_init__(self) -> None:
        for name in ("eps_low", "eps_high", "kl_beta", "lm_coef", "seq_eps_low", "seq_eps_high"):
            _number(name, getattr(self, name))
        _number("entropy_coef", self.entropy_coef)
        for name in ("dual_clip", "opsm_delta", "tis_cap", "normalizer"):
            _number(name, getattr(self, name), optional=True)
        if not 0 <= self.eps_low < 1:
            raise ValueError(
                f"eps_low must be in [0, 1) (the ratio floor 1 − eps_low > 0), got {self.eps_low}"
            )
        if self.eps_high < 0:
            raise ValueError(f"eps_high must be ≥ 0, got {self.eps_high}")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(
                "dual_clip must be > 1 (a ratio cap for negative advantages) or None, "
                f"got {self.dual_clip}"
            )
        if self.kl_beta < 0:
            raise ValueError(f"kl_beta must be ≥ 0, got {self.kl_beta}")
        if self.opsm_delta is not None and self.opsm_delta < 0:
            raise ValueError(f"opsm_delta must be ≥ 0 or None, got {self.opsm_delta}")
        if self.tis_cap is not None and self.tis_cap < 1:
            raise ValueError(
                "tis_cap must be ≥ 1 (a cap below 1 down-weights on-policy tokens) or None, "
                f"got {self.tis_cap}"
            )
        if self.lm_coef < 0:
            raise ValueError(f"lm_coef must be ≥ 0, got {self.lm_coef}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(
                f"aggregation must be one of {list(AGGREGATIONS)}, got {self.aggregation!r}"
            )
        if self.aggregation == "constant":
            if self.normalizer is None or self.normalizer <= 0:
                raise ValueError(
                    f"aggregation 'constant' needs normalizer > 0, got {self.normalizer!r}"
                )
        elif self.normalizer is not None:
            raise ValueError(
                f"normalizer is only used by aggregation 'constant', not {self.aggregation!r}"
            )
        self._check_options()

    def _check_options(self) -> None:
        """The loss family, ratio level, entropy bonus and reference sync."""
        if self.kind not in LOSS_KINDS:
            raise ValueError(f"kind must be one of {list(LOSS_KINDS)}, got {self.kind!r}")
        if self.ratio_level not in RATIO_LEVELS:
            raise ValueError(
                f"ratio_level must be one of {list(RATIO_LEVELS)}, got {self.ratio_level!r}"
            )
        if self.kind == "cispo" and self.ratio_level == "sequence":
            # CISPO weighs each token's log π_θ by that token's own clipped ratio; a sequence
            # ratio there is neither report's method, so refuse rather than invent one.
            raise ValueError(
                "kind 'cispo' clips each token's own IS weight (MiniMax-M1 §3.1); ratio_level "
                "'sequence' is GSPO's clipped surrogate: use kind 'grpo' with it, or ratio_level "
                "'token' with cispo"
            )
        if not 0 <= self.seq_eps_low < 1:
            raise ValueError(f"seq_eps_low must be in [0, 1), got {self.seq_eps_low}")
        if self.seq_eps_high < 0:
            raise ValueError(f"seq_eps_high must be ≥ 0, got {self.seq_eps_high}")
        if self.entropy_coef < 0:
            raise ValueError(
                f"entropy_coef must be ≥ 0 (a bonus for entropy, 0 = off), got {self.entropy_coef}"
            )
        if isinstance(self.ref_sync_every, bool) or not isinstance(self.ref_sync_every, int):
            raise TypeError(
                f"ref_sync_every must be an integer, not {type(self.ref_sync_every).__name__}"
            )
        if self.ref_sync_every < 0:
            raise ValueError(f"ref_sync_every must be ≥ 0 (0 = never), got {self.ref_sync_every}")
        if self.ref_sync_every > 0 and self.kl_beta == 0:
            raise ValueError(
                f"ref_sync_every = {self.ref_sync_every} syncs the KL reference model, but "
                "kl_beta = 0 trains without one: set kl_beta > 0 or ref_sync_every: 0"
            )
