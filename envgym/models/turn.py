"""A :class:`~envgym.policy.Turn` with everything the per-token record needs (record version 2).

``envgym.policy.Turn`` predates record version 2; the backends that know more than it can say
(the local engine, the vLLM token-in backend) return this subclass, and the rollout recorder
(envgym.rollout.recorder) reads the extra fields when present.  Everything here is optional, so
a plain ``Turn`` is still a valid turn: its ``logprobs`` count as sampled-distribution
log-probs, its sampling parameters and policy version as unknown.

Meaning of the inherited fields for these backends:

* ``logprobs`` — per sampled id, the log-prob under the distribution the token was **drawn
  from** (after temperature, top-k and top-p, renormalized over the kept set);
* ``kept`` — per sampled id, the kept set (a :class:`~envgym.models.kept.KeptSets`: ``list[int]``
  or ``None`` = not truncated), or ``None`` for the whole turn when the backend cannot report
  it (vLLM): *unknown*, which the record keeps distinct from *not truncated*;
* ``routes`` — per sampled id and MoE layer, the experts chosen at the position whose output
  sampled it (kept for callers of the engine; the record uses :attr:`RecordedTurn.position_routes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envgym.policy import SamplingParams, Turn

if TYPE_CHECKING:
    import torch

SAMPLED_AND_FULL = "sampled+full"  # logprobs and full_logprobs both hold
SAMPLED = "sampled"  # only logprobs (the distribution sampled from), e.g. vLLM processed_logprobs
LOGPROB_KINDS = (SAMPLED_AND_FULL, SAMPLED, "full")


@dataclass(frozen=True)
class RecordedTurn(Turn):
    full_logprobs: list[float] | None = None  # log_softmax(logits / T)[token]; None = unknown
    logprob_kind: str = SAMPLED  # which of the two log-prob kinds this turn holds
    params: SamplingParams | None = None  # the parameters the turn was sampled with
    policy_version: int | None = None  # the policy's version when the turn was sampled
    # MoE: per position of ``prompt_ids + token_ids[:-1]`` (every position the forward passes
    # saw; the last sampled token is never fed), per MoE layer, the router's top-k experts:
    # [P, L, k] int; None for a dense model or a backend that cannot see its router.
    position_routes: torch.Tensor | Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.logprob_kind not in LOGPROB_KINDS:
            raise ValueError(
                f"logprob_kind must be one of {LOGPROB_KINDS}, not {self.logprob_kind!r}"
            )
        if self.full_logprobs is not None and len(self.full_logprobs) != len(self.token_ids):
            raise ValueError(
                f"full_logprobs has {len(self.full_logprobs)} entries for {len(self.token_ids)} ids"
            )
