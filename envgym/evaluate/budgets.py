"""Per-task episode budgets for an evaluation, from each task's gold solution.

By default ``envgym eval`` gives each task the budget the synthesis filter gives it
(:class:`envgym.rollout.gold_budget.GoldBudgetRule` over the length of its gold solution), not
one fixed budget for all: 128 turns × 8192 tokens let a small model ramble for ten minutes on a
three-call task.  ``--max-turns`` / ``--episode-tokens`` pin a dimension; an env that cannot
replay its gold (no ``gold_calls()``, e.g. τ²) gets the fixed :class:`RolloutBudget` defaults.

The evaluation key holds the rule and the pins (:meth:`DerivedBudget.key`), not the per-task
numbers: those follow from the bundle's content, which the key already holds, so ``--limit``
or a resume never changes the key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from envgym.core import Env
from envgym.rollout import EpisodeResult, EpisodeSpec, RolloutBudget, RolloutEngine
from envgym.rollout.gold_budget import GoldBudgetRule

#: the fixed budget of a task whose gold length is unknown (the engine's own defaults)
FALLBACK = RolloutBudget()
MAX_WHY_CHARS = 400  # of a failing gold's error in the message


class GoldLengthError(RuntimeError):
    """A task's gold solution could not be run to measure its length."""


@dataclass(frozen=True)
class DerivedBudget:
    """Budgets derived per task; ``max_turns`` / ``max_tokens`` pin a dimension when set.

    ``min_tokens`` is the floor of sampled tokens (the CLI passes ``--max-tokens``: one full
    turn always fits); ``max_seconds`` is a hang guard, not a task budget (wall time depends on
    the machine, not the task)."""

    rule: GoldBudgetRule = field(default_factory=GoldBudgetRule)
    max_turns: int | None = None
    max_tokens: int | None = None
    max_seconds: float = 600.0
    min_tokens: int = 512

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tokens", "min_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be ≥ 1, not {value}")
        if self.max_seconds <= 0:
            raise ValueError(f"max_seconds must be > 0, not {self.max_seconds}")

    @property
    def needs_gold(self) -> bool:
        return self.max_turns is None or self.max_tokens is None

    def for_task(self, gold_calls: int | None) -> RolloutBudget:
        """The budget of a task whose gold makes ``gold_calls`` calls (None: unknown)."""
        if gold_calls is None:
            base = RolloutBudget(FALLBACK.max_turns, FALLBACK.max_tokens, self.max_seconds)
        else:
            floor = RolloutBudget(
                max_turns=1, max_tokens=self.min_tokens, max_seconds=self.max_seconds
            )
            base = self.rule.budget(gold_calls, floor)
        return RolloutBudget(
            max_turns=self.max_turns or base.max_turns,
            max_tokens=self.max_tokens or base.max_tokens,
            max_seconds=self.max_seconds,
        )

    def key(self) -> dict[str, object]:
        """What the evaluation key holds: the rule and the pins."""
        return {"derived_from": "gold_calls", **asdict(self)}

    def describe(self) -> str:
        turns = f"{self.max_turns} turns" if self.max_turns else None
        tokens = f"{self.max_tokens} sampled tokens" if self.max_tokens else None
        pinned = ", ".join(p for p in (turns, tokens) if p)
        if not self.needs_gold:
            return f"{pinned}, {self.max_seconds:g} s per episode"
        derived = f"per task from its gold solution: {self.rule.describe()} (≥ {self.min_tokens})"
        return derived + (f"; pinned {pinned}" if pinned else "") + f"; {self.max_seconds:g} s"


def gold_lengths(factory: Callable[[], Env], task_ids: Iterable[str]) -> dict[str, int | None]:
    """Task id → tool calls of its gold solution, run in one env the evaluation's factory builds
    (so a family's own tools replay); every id → None when the env cannot replay its gold."""
    wanted = list(dict.fromkeys(task_ids))
    if not wanted:
        return {}
    env: Any = factory()
    try:
        if not callable(getattr(env, "gold_calls", None)):
            return dict.fromkeys(wanted)
        out: dict[str, int | None] = {}
        for task_id in wanted:
            try:
                env.reset(options={"task": task_id})
                out[task_id] = len(env.gold_calls())
            except Exception as exc:  # noqa: BLE001 - any failure: name the task and the way out
                why = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line
                if len(why) > MAX_WHY_CHARS:
                    why = "…" + why[-MAX_WHY_CHARS:]  # a traceback's last words say the most
                raise GoldLengthError(
                    f"cannot run the gold solution of task {task_id!r} to size its budget "
                    f"({why}); pin the budget with --max-turns N --episode-tokens N"
                ) from None
        return out
    finally:
        env.close()


def task_budgets(
    factory: Callable[[], Env], budget: RolloutBudget | DerivedBudget, task_ids: Iterable[str]
) -> dict[str, RolloutBudget]:
    """Each task's budget: ``budget`` when fixed, else derived from its gold solution's length
    (raises :class:`GoldLengthError` when a gold solution cannot be run)."""
    wanted = list(dict.fromkeys(task_ids))
    if not isinstance(budget, DerivedBudget):
        return dict.fromkeys(wanted, budget)
    if not budget.needs_gold:
        return dict.fromkeys(wanted, budget.for_task(None))
    lengths = gold_lengths(factory, wanted)
    return {task_id: budget.for_task(lengths[task_id]) for task_id in wanted}


class PerTaskBudgetEngine(RolloutEngine):
    """A :class:`RolloutEngine` whose episodes each run under their task's budget.

    The engine reads one ``budget``; this one hands each episode to a sibling engine over the
    same env pool and policy that holds that task's budget (siblings never start workers, so
    closing this engine closes the pool once)."""

    def __init__(self, base: RolloutEngine, budgets: Mapping[str, RolloutBudget]) -> None:
        super().__init__(
            base.policy,
            base.envs,
            params=base.params,
            budget=base.budget,
            concurrency=base.concurrency,
        )
        self._budgets = dict(budgets)
        self._siblings: dict[RolloutBudget, RolloutEngine] = {}

    async def episode(self, spec: EpisodeSpec) -> EpisodeResult:
        budget = self._budgets.get(spec.task_id, self.budget)
        sibling = self._siblings.get(budget)
        if sibling is None:
            sibling = RolloutEngine(
                self.policy,
                self.envs,
                params=self.params,
                budget=budget,
                concurrency=self.concurrency,
            )
            self._siblings[budget] = sibling
        return await sibling.episode(spec)
