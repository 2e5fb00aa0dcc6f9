"""Episode budgets from the length of a task's gold solution: one rule for every caller.

A fixed budget is wrong both ways: 128 turns is below what a difficulty-5 trip plan needs (its
gold makes 144 calls), so a perfect policy was cut off, and far above what a three-call task
needs, so a small model rambling on a 2-core machine spent ten minutes on four episodes.  The
rule gives a policy room to make the gold's calls twice over plus a few turns of slack (the
submit turn, a nudge, recoverable mistakes), and sampled tokens for a short reasoning step and
a call per turn.  The synthesis pass@k filter (``envgym.synth_agents.passk``) and ``envgym eval``
both derive their budgets here; each passes its own floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .episode import RolloutBudget


@dataclass(frozen=True)
class GoldBudgetRule:
    """turns = ⌈headroom × gold calls⌉ + slack_turns; sampled tokens = ⌈headroom × gold calls
    × tokens_per_call⌉; each at least the caller's floor."""

    headroom: float = 2.0
    slack_turns: int = 8  # the submit turn, a nudge, a few recoverable mistakes
    tokens_per_call: int = (
        128  # sampled tokens one tool-call turn may take (call + brief reasoning)
    )

    def __post_init__(self) -> None:
        if self.headroom < 1 or self.slack_turns < 0 or self.tokens_per_call < 1:
            raise ValueError(
                "budget derivation needs headroom ≥ 1, slack_turns ≥ 0, tokens_per_call ≥ 1: "
                f"{self}"
            )

    def budget(self, gold_calls: int, floor: RolloutBudget) -> RolloutBudget:
        """The budget for a task whose gold solution makes ``gold_calls`` tool calls;
        ``floor`` gives the least turns and tokens and the seconds."""
        calls = max(0, gold_calls)
        turns = math.ceil(self.headroom * calls) + self.slack_turns
        tokens = math.ceil(self.headroom * calls * self.tokens_per_call)
        return replace(
            floor,
            max_turns=max(floor.max_turns, turns),
            max_tokens=max(floor.max_tokens, tokens),
        )

    def describe(self) -> str:
        return (
            f"{self.headroom:g} × gold calls + {self.slack_turns} turns, "
            f"{self.headroom:g} × gold calls × {self.tokens_per_call} sampled tokens"
        )
