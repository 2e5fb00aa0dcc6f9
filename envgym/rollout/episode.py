"""What one rollout episode is asked to be (:class:`EpisodeSpec`, :class:`RolloutBudget`) and
what it became (:class:`EpisodeResult`)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

from envgym.record import EpisodeRecord

#: Error kinds an episode can end with.  An errored episode is infrastructure failing, not the
#: policy failing the task: evaluation lists it and leaves it out of the estimators.
ERROR_KINDS = ("policy", "record", "env", "env_timeout")


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to roll out: sample ``sample`` of task ``task_id``."""

    task_id: str
    sample: int = 0
    seed: int | None = None  # base sampling seed; per-turn seeds derive from it

    @property
    def session(self) -> str:
        """The policy session id.  Stable, so a resumed run asks for the same episode."""
        return f"{self.task_id}#{self.sample}"

    def turn_seed(self, turn: int) -> int | None:
        if self.seed is None:
            return None
        digest = hashlib.sha256(
            f"{self.seed}/{self.task_id}/{self.sample}/{turn}".encode()
        ).digest()
        return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def parse_session(session: str) -> tuple[str, int]:
    """Inverse of :attr:`EpisodeSpec.session`: ``(task_id, sample)``."""
    task_id, _, sample = session.rpartition("#")
    if not task_id or not sample.isdigit():
        raise ValueError(f"session {session!r} is not of the form 'task_id#sample'")
    return task_id, int(sample)


@dataclass(frozen=True)
class RolloutBudget:
    """Per-episode limits the engine enforces on top of the env's own budgets.

    ``max_tokens`` counts tokens the policy sampled over the whole episode (each turn asks for
    at most what is left); ``max_seconds`` is a wall-clock deadline for the episode.  Hitting
    any of them truncates the episode (reward 0), which is a result, not an error.
    """

    max_turns: int = 128  # the env default; gold trip plans of difficulty 5 take ~100 calls
    max_tokens: int = 8192
    max_seconds: float = 600.0

    def __post_init__(self) -> None:
        if self.max_turns <= 0 or self.max_tokens <= 0 or self.max_seconds <= 0:
            raise ValueError(f"budget values must be positive: {self}")


#: Deprecated old name of :class:`RolloutBudget` (not to be confused with the env's own
#: :class:`envgym.step.EnvBudgets`); kept for code written against earlier docs/EVAL.md.
Budget = RolloutBudget


@dataclass(frozen=True)
class EpisodeResult:
    """A finished episode: outcome, counts, the full trajectory and the per-token record."""

    task_id: str
    sample: int
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    truncated_by: str | None = None
    error: str | None = None  # one of ERROR_KINDS, or None
    error_message: str = ""
    turns: int = 0  # assistant turns
    tool_calls: int = 0
    sampled_tokens: int = 0
    prompt_tokens: int = 0  # summed over turns (what the engine was asked to read)
    cached_prompt_tokens: int = 0
    duration_s: float = 0.0
    agent_errors: dict[str, int] = field(default_factory=dict)  # the env's mistake counts
    messages: list[dict[str, Any]] = field(default_factory=list)  # the full history
    context_dropped: list[dict[str, Any]] = field(default_factory=list)  # Dropped dicts + "turn"
    context_compactions: list[dict[str, Any]] = field(default_factory=list)
    report: dict[str, Any] | None = None  # the verifier's report
    record: EpisodeRecord = field(default_factory=EpisodeRecord)

    @property
    def passed(self) -> bool:
        return self.error is None and self.reward >= 1.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["record"] = self.record.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeResult:
        """Raises ValueError/KeyError/TypeError on a malformed dict (callers name the source)."""
        fields = dict(data)
        fields["record"] = EpisodeRecord.from_dict(fields.get("record") or {})
        fields.pop("passed", None)
        return cls(**fields)
