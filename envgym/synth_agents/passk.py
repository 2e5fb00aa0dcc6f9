"""The pass@k filter with early stopping (DeepSeek-V3.2 §3.2.3: keep pass@100 > 0).

For each task a policy is sampled through the rollout engine (``envgym.rollout``) until the
task's decision is made, not k times:

* keep when pass@k > 0 — decided by the first success;
* with ``drop_always_solved`` (AM-Thinking-v1, seed 002: "remove all … queries that the model
  answered correctly with 100% accuracy"; LongCat-Flash-Thinking, seed 004 §2.2.1/§3.2.2:
  drop prompts whose pass rate is too high / whose accuracy is 1) a task is kept only once it
  has been both solved and failed, and dropped when all k samples solve it;
* drop when k samples (errored episodes do not count) never solve it.

Each task samples in ``width`` lanes that share ``concurrency`` env slots; a lane reserves its
next sample only when it holds a slot, so a decided task stops launching at once (episodes
already running finish and their tokens are counted).  Each task's pass rate is the fraction
of its samples that passed (the maximum-likelihood estimate under this stopping rule) and its
estimated difficulty is ``1 - pass_rate``.  Tokens: what the filter spent (prompt + sampled
tokens of every episode it ran) against ``k`` times the task's mean episode tokens.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import envgym
from envgym.bundle import Bundle
from envgym.bundle_env import EnvBudgets
from envgym.policy import Policy, SamplingParams
from envgym.rollout import EpisodeResult, EpisodeSpec, RolloutBudget, RolloutEngine
from envgym.rollout.gold_budget import GoldBudgetRule

KEEP, NEVER, ALWAYS, ERRORED = "keep", "drop_never_solved", "drop_always_solved", "undecided_errors"


@dataclass(frozen=True)
class FilterConfig:
    k: int = 100
    drop_always_solved: bool = False
    width: int = 2  # lanes per task: more finish sooner, fewer waste less after a decision
    concurrency: int = 4
    max_errors: int = 10  # errored episodes per task before giving up on it
    params: SamplingParams = field(
        default_factory=lambda: SamplingParams(temperature=0.7, max_tokens=512)
    )
    budget: RolloutBudget = field(
        default_factory=RolloutBudget
    )  # the floor when derived, else the budget itself
    # Budgets from the gold solution's length (envgym.rollout.gold_budget, the rule envgym eval
    # uses too): a fixed 128 turns is below what a difficulty-5 gold needs (144 calls), so a
    # perfect policy was dropped as "never solved"; each at least ``budget``'s value.
    derive_budget: bool = True
    headroom: float = GoldBudgetRule.headroom
    slack_turns: int = GoldBudgetRule.slack_turns
    tokens_per_call: int = GoldBudgetRule.tokens_per_call
    sandbox: str = "bwrap"
    context: str = "thinking-retention"
    parser: str = "hermes"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.k < 1 or self.width < 1 or self.concurrency < 1 or self.max_errors < 0:
            raise ValueError(f"filter needs k, width, concurrency ≥ 1 and max_errors ≥ 0: {self}")
        if self.headroom < 1 or self.slack_turns < 0 or self.tokens_per_call < 1:
            raise ValueError(
                f"filter budget derivation needs headroom ≥ 1, slack_turns ≥ 0, tokens_per_call ≥ 1: {self}"
            )

    def budget_for(self, gold_calls: int) -> RolloutBudget:
        """The episode budget for tasks whose longest gold solution makes ``gold_calls`` tool calls."""
        if not self.derive_budget:
            return self.budget
        rule = GoldBudgetRule(self.headroom, self.slack_turns, self.tokens_per_call)
        return rule.budget(gold_calls, self.budget)


@dataclass
class Tally:
    """One task's samples so far and the stopping rule."""

    task_id: str
    k: int
    drop_always_solved: bool
    max_errors: int = 10
    n: int = 0  # finished samples that count (not errored)
    c: int = 0  # of which passed
    errors: int = 0
    launched: int = 0  # sample indices handed out (errors included)
    inflight: int = 0
    tokens: int = 0
    sampled_tokens: int = 0
    counted_tokens: int = 0  # tokens of the n counted episodes (for the full-run estimate)

    @property
    def decision(self) -> str | None:
        if self.c and (not self.drop_always_solved or self.n > self.c):
            return KEEP
        if self.n >= self.k:
            return ALWAYS if self.c == self.n else NEVER
        if self.errors > self.max_errors:
            return ERRORED
        return None

    def reserve(self) -> int | None:
        """The next sample index to run, or None when no further sample can change the decision."""
        if self.decision is not None or self.n + self.inflight >= self.k:
            return None
        self.inflight += 1
        self.launched += 1
        return self.launched - 1

    def add(self, result: EpisodeResult) -> None:
        self.inflight -= 1
        spent = result.prompt_tokens + result.sampled_tokens
        self.tokens += spent
        self.sampled_tokens += result.sampled_tokens
        if result.error is not None:
            self.errors += 1
            return
        self.n += 1
        self.c += result.passed
        self.counted_tokens += spent


@dataclass(frozen=True)
class TaskFilterResult:
    task_id: str
    k: int
    n: int
    c: int
    errors: int
    decision: str
    kept: bool
    pass_rate: float
    difficulty: float  # 1 - pass_rate
    tokens: int  # prompt + sampled tokens the filter spent on this task
    sampled_tokens: int
    full_tokens_estimate: int  # k × mean tokens per counted episode (what k full rollouts cost)
    gold_calls: int = 0  # the longest gold solution the budget was derived from (0: unknown)
    max_turns: int = 0  # the episode budget used
    max_tokens: int = 0
    declared_difficulty: int = (
        0  # the task's own label (for LLM tasks: level + 1); measured is `difficulty`
    )

    @classmethod
    def from_tally(
        cls, t: Tally, gold_calls: int = 0, budget: RolloutBudget | None = None, declared: int = 0
    ) -> TaskFilterResult:
        decision = t.decision or ERRORED
        rate = t.c / t.n if t.n else 0.0
        mean = t.counted_tokens / t.n if t.n else 0.0
        budget = budget or RolloutBudget()
        return cls(
            t.task_id,
            t.k,
            t.n,
            t.c,
            t.errors,
            decision,
            decision == KEEP,
            round(rate, 6),
            round(1.0 - rate, 6),
            t.tokens,
            t.sampled_tokens,
            round(mean * t.k),
            gold_calls,
            budget.max_turns,
            budget.max_tokens,
            declared,
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


async def filter_bundle(
    bundle: Bundle,
    policy: Policy,
    config: FilterConfig,
    *,
    task_ids: list[str] | None = None,
    on_result: Callable[[TaskFilterResult], None] | None = None,
    gold_calls: Mapping[str, int] | None = None,
) -> list[TaskFilterResult]:
    """Filter the bundle's tasks (or ``task_ids``); ``on_result`` hears each task once decided.

    ``gold_calls`` (task id → tool calls of its gold solution, from validation) sets the episode
    budget: one engine per call, so the longest gold among ``task_ids`` decides it.
    """
    wanted = [t for t in bundle.tasks if task_ids is None or t.id in task_ids]
    if not wanted:
        return []
    tallies = {
        t.id: Tally(t.id, config.k, config.drop_always_solved, config.max_errors) for t in wanted
    }
    longest = max((int((gold_calls or {}).get(t.id, 0)) for t in wanted), default=0)
    declared = {t.id: t.difficulty for t in wanted}
    budget = config.budget_for(longest)
    env_budgets = EnvBudgets(
        max_turns=budget.max_turns,
        max_tool_calls=max(EnvBudgets().max_tool_calls, 2 * budget.max_turns),
        time_budget_s=budget.max_seconds,
    )
    # Envs are built exactly as envgym.make builds them (the env's own turn and call budgets
    # raised with the engine's, or they would cut the episode first).
    factory = functools.partial(
        envgym.make,
        bundle.root,
        sandbox=config.sandbox,
        context=config.context,
        parser=config.parser,
        budgets=env_budgets,
    )
    slots = asyncio.Semaphore(config.concurrency)
    results: dict[str, TaskFilterResult] = {}
    engine = RolloutEngine.local(
        policy, factory, concurrency=config.concurrency, params=config.params, budget=budget
    )

    async def lane(tally: Tally) -> None:
        while True:
            async with slots:
                sample = tally.reserve()
                if sample is None:
                    break
                result = await engine.episode(EpisodeSpec(tally.task_id, sample, config.seed))
                tally.add(result)
        if tally.inflight == 0 and tally.task_id not in results:
            results[tally.task_id] = TaskFilterResult.from_tally(
                tally, longest, budget, declared[tally.task_id]
            )
            if on_result is not None:
                on_result(results[tally.task_id])

    async with engine:
        await asyncio.gather(*(lane(t) for t in tallies.values() for _ in range(config.width)))
    return [results[t.id] for t in wanted]
