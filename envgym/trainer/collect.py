"""What one GRPO step collected: shared by the synchronous loop and the asynchronous one.

envgym/trainer/loop.py (``Trainer``) and envgym/trainer/stream.py (``async.enabled``) both gather a
batch of groups for a step, counting what they rolled out and dropped in a :class:`Tally`, and hand
the batch to the trainer as a :class:`Collected`.  :class:`StepHost` is everything of the trainer
that stream.py uses, so the two modules import this one and not each other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from envgym.rollout import EpisodeResult, RolloutEngine
from envgym.rollout.errored import ErroredShare
from envgym.trainer.batch import Group, mask_nonfinite, mask_overlong, split_informative
from envgym.trainer.checkpoint import TaskOrder
from envgym.trainer.config import TrainConfig


def derive_seed(*parts: int) -> int:
    """A 31-bit seed that depends only on ``parts`` (run seed, step, round…)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class StepReport:
    step: int
    metrics: dict[str, float]
    skipped: str | None = None  # why the update was skipped (NaN rewards, empty batch…)


@dataclass
class Tally:
    """One step's rollout counts: what was rolled out, left out, filtered and found stale."""

    episodes: int = 0  # valid episodes of the groups rolled out (refills included)
    passed: int = 0
    reward_sum: float = 0.0
    errored: int = 0  # episodes left out of groups (errored, or alone in their group)
    all_correct: int = 0  # groups dropped by dynamic sampling: every sample solved it
    all_wrong: int = 0  # ... every sample got the same lower reward
    refills: int = 0
    stale_dropped: int = 0
    staleness_max: int | None = None  # async mode: the most stale group trained on
    # Episodes masked for a NaN/±inf reward ("task#sample = value"); not in ``episodes``.
    nonfinite: list[str] = field(default_factory=list)
    overlong_masked: int = 0  # episodes masked whole for a turn cut by the token limit
    # Every episode finished for this step, errored or not: checked before training on them.
    share: ErroredShare = field(default_factory=ErroredShare)

    def record(self, result: EpisodeResult) -> None:
        self.share = self.share.add(result)

    def admit(self, groups: Sequence[Group], *, overlong_sample: bool) -> list[Group]:
        """``groups`` with whole episodes masked (LongCat §3.2.2), each counted: NaN/±inf
        rewards first (left out of every rollout statistic: their reward is no number), then
        the rest counted (:meth:`count`), then, with ``overlong_sample``, the episodes with a
        turn cut by the token limit (their reward still counts in ``reward_mean``).  A group
        left with fewer than two episodes goes too; its survivor counts in ``errored``, as
        group_results counts the lone survivor of errored episodes."""
        finite = mask_nonfinite(groups)
        self.nonfinite.extend(f"{r.task_id}#{r.sample} = {r.reward}" for r in finite.masked)
        self.count(finite.groups)
        self.errored += finite.lone
        if not overlong_sample:
            return finite.groups
        whole = mask_overlong(finite.groups)
        self.overlong_masked += len(whole.masked)
        self.errored += whole.lone
        return whole.groups

    def skip_reason(self) -> str:
        """Why a step that kept no group is skipped."""
        why = "empty batch: every group was filtered out"
        if self.nonfinite:
            shown = ", ".join(self.nonfinite[:5])
            why += f" (non-finite rewards masked: {shown})"
        return why

    def count(self, groups: Sequence[Group]) -> None:
        """Count the episodes of ``groups`` (rewards and passes)."""
        for g in groups:
            for r in g.results:
                self.episodes += 1
                self.passed += r.passed
                self.reward_sum += r.reward

    def informative(self, groups: Sequence[Group], *, dynamic_sampling: bool) -> list[Group]:
        """``groups`` less those dynamic sampling drops (counted), or all when it is off."""
        if not dynamic_sampling:
            return list(groups)
        kept, correct, wrong = split_informative(groups)
        self.all_correct += correct
        self.all_wrong += wrong
        return kept

    def metrics(self, groups: Sequence[Group]) -> dict[str, float]:
        """The step's rollout metrics; ``groups`` are the ones kept for training."""
        episodes = max(self.episodes, 1)
        lengths = [r.sampled_tokens for g in groups for r in g.results]
        out = {
            "reward_mean": self.reward_sum / episodes,
            "pass_rate": self.passed / episodes,
            "episodes": float(self.episodes),
            "errored": float(self.errored),
            "groups_kept": float(len(groups)),
            "groups_all_correct": float(self.all_correct),
            "groups_all_wrong": float(self.all_wrong),
            "refills": float(self.refills),
            "stale_dropped": float(self.stale_dropped),
            "nonfinite_rewards": float(len(self.nonfinite)),
            "overlong_masked": float(self.overlong_masked),
            "response_len_mean": float(np.mean(lengths)) if lengths else 0.0,
        }
        if self.staleness_max is not None:
            out["staleness_max"] = float(self.staleness_max)
        return out


@dataclass(frozen=True)
class Collected:
    """A step's batch: the groups to train on, or why the update is skipped."""

    groups: list[Group]
    skipped: str | None
    tally: Tally
    started: float  # time.monotonic() when the step began collecting


class StepHost(Protocol):
    """What envgym/trainer/stream.py needs of the trainer (``envgym.trainer.loop.Trainer`` is
    one)."""

    config: TrainConfig
    order: TaskOrder  # the seeded data order prompts are taken from
    rollout_engines: list[RolloutEngine]  # one per ``config.envs`` entry, while the run lasts
    step: int  # steps finished
    version: int  # the policy version the engine serves
    on_phase: Callable[[str], None]

    async def finish_step(self, collected: Collected) -> StepReport: ...
