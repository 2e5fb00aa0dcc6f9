"""An evaluation's numbers from its episodes: per task and across tasks.

Errored episodes (``EpisodeResult.error``: the backend or the env failed, not the policy) are
counted and listed but left out of n: scoring them 0 would silently mix infrastructure failures
into the model's score.  A task with fewer than k valid samples has no pass@k and is left out of
that mean (``excluded`` says how many).

Across tasks every interval is the clustered Wilson interval (estimators.clustered_wilson): the
Wilson interval at an effective number of episodes that accounts for the episodes of one task
being alike; it stays honest at 0/n, n/n and one task, where a bootstrap over tasks collapses
to a point.  A mean reward outside [0, 1] falls back to the percentile bootstrap over tasks.

Tasks a do-nothing agent passes (task metadata ``noop_solvable``, e.g. τ²'s known ones) measure no
skill: ``exclude`` leaves them out of every across-task number (they stay in ``per_task``) and
``excluded_tasks`` says which and why.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from envgym.rollout.episode import EpisodeResult

from .estimators import (
    bootstrap_interval,
    clustered_wilson,
    mean,
    pass_at_k,
    pass_hat_k,
    report_ks,
    wilson_interval,
)

WILSON = "wilson-clustered"
BOOTSTRAP = "bootstrap"
# task metadata: a do-nothing agent scores 1.0 on this task (and why), so it is not scored
NOOP_FLAG = "noop_solvable"
NOOP_REASON = "noop_reason"


def noop_solvable(tasks: Iterable[Any]) -> dict[str, str]:
    """Task id → reason, for the tasks (bundle ``Task``s) whose metadata flags them."""
    out: dict[str, str] = {}
    for task in tasks:
        meta = getattr(task, "metadata", None) or {}
        if meta.get(NOOP_FLAG) is True:
            out[str(task.id)] = str(meta.get(NOOP_REASON) or "a do-nothing agent passes it")
    return out


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float
    n_eff: float | None = None  # the effective number of trials behind a clustered Wilson
    method: str = WILSON  # or BOOTSTRAP (values outside [0, 1])


def across_tasks(values: list[float], trials: list[int], *, seed: int = 0) -> Interval:
    """The mean of per-task values with its 95 % interval (clustered Wilson when it applies)."""
    if all(0.0 <= v <= 1.0 for v in values):
        low, high, n_eff = clustered_wilson(values, trials)
        return Interval(mean(values), low, high, n_eff, WILSON)
    low, high = bootstrap_interval(values, seed=seed)
    return Interval(mean(values), low, high, None, BOOTSTRAP)


@dataclass(frozen=True)
class TaskSummary:
    task_id: str
    n: int  # valid (non-errored) samples
    c: int  # passed
    errors: int
    mean_reward: float
    pass_rate_ci: tuple[float, float]  # Wilson, of c / n
    pass_at_k: dict[int, float | None]
    pass_hat_k: dict[int, float | None]


@dataclass(frozen=True)
class EvalSummary:
    k: int
    tasks: int
    episodes: int
    errored: int
    pass_at_k: dict[int, Interval]
    pass_hat_k: dict[int, Interval]
    excluded: dict[int, int]  # k → tasks without k valid samples
    mean_reward: Interval
    tokens_per_episode: float
    turns_per_episode: float
    tool_calls_per_episode: float
    errors_by_kind: dict[str, int]
    truncations: dict[str, int]
    per_task: list[TaskSummary] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # key, bundle, model, config
    # task id → why it is left out of every across-task number (a do-nothing agent passes it)
    excluded_tasks: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    episodes: Iterable[EpisodeResult],
    *,
    k: int,
    meta: dict[str, Any] | None = None,
    seed: int = 0,
    exclude: Mapping[str, str] | None = None,
) -> EvalSummary:
    """The numbers of ``episodes``; tasks in ``exclude`` (id → reason) are listed, not scored."""
    eps = list(episodes)
    by_task: dict[str, list[EpisodeResult]] = defaultdict(list)
    for e in eps:
        by_task[e.task_id].append(e)
    ks = report_ks(k)
    all_tasks = [_task(task_id, results, ks) for task_id, results in by_task.items()]
    skip = exclude or {}
    left_out = {t.task_id: str(skip[t.task_id]) for t in all_tasks if t.task_id in skip}
    per_task = [t for t in all_tasks if t.task_id not in left_out]  # the scored tasks

    def across(name: str) -> tuple[dict[int, Interval], dict[int, int]]:
        out: dict[int, Interval] = {}
        excluded: dict[int, int] = {}
        for j in ks:
            scored = [(v, t.n // j) for t in per_task if (v := getattr(t, name)[j]) is not None]
            excluded[j] = len(per_task) - len(scored)
            if scored:
                out[j] = across_tasks([v for v, _ in scored], [m for _, m in scored], seed=seed)
        return out, excluded

    at_k, excluded = across("pass_at_k")
    hat_k, _ = across("pass_hat_k")
    scored = [t for t in per_task if t.n > 0]
    nan = float("nan")
    reward = (
        across_tasks([t.mean_reward for t in scored], [t.n for t in scored], seed=seed)
        if scored
        else Interval(nan, nan, nan)
    )
    n_eps = max(len(eps), 1)
    return EvalSummary(
        k=k,
        tasks=len(per_task),
        episodes=len(eps),
        errored=sum(e.error is not None for e in eps),
        pass_at_k=at_k,
        pass_hat_k=hat_k,
        excluded=excluded,
        mean_reward=reward,
        tokens_per_episode=sum(e.sampled_tokens for e in eps) / n_eps,
        turns_per_episode=sum(e.turns for e in eps) / n_eps,
        tool_calls_per_episode=sum(e.tool_calls for e in eps) / n_eps,
        errors_by_kind=dict(Counter(e.error for e in eps if e.error is not None)),
        truncations=dict(
            Counter(e.truncated_by for e in eps if e.truncated_by and e.error is None)
        ),
        per_task=sorted(all_tasks, key=lambda t: t.task_id),
        meta=dict(meta or {}),
        excluded_tasks=dict(sorted(left_out.items())),
    )


def _task(task_id: str, results: list[EpisodeResult], ks: list[int]) -> TaskSummary:
    valid = [r for r in results if r.error is None]
    n, c = len(valid), sum(r.passed for r in valid)
    return TaskSummary(
        task_id=task_id,
        n=n,
        c=c,
        errors=len(results) - n,
        mean_reward=mean([r.reward for r in valid]) if valid else float("nan"),
        pass_rate_ci=wilson_interval(c, n),
        pass_at_k={j: pass_at_k(n, c, j) if n >= j else None for j in ks},
        pass_hat_k={j: pass_hat_k(n, c, j) if n >= j else None for j in ks},
    )


@dataclass(frozen=True)
class Pooled:
    """Several bundles' evaluations read as one task set (a suite's split): per-task figures
    under ``BUNDLE::TASK`` ids, and pass@k and mean reward with intervals over all the tasks —
    a task-weighted mean of per-bundle intervals would have no interval of its own."""

    tasks: int
    pass_at_k: Interval | None  # None when no task has k valid samples
    mean_reward: Interval | None
    rewards: dict[str, float]  # BUNDLE::TASK → mean reward (scored tasks with a valid sample)
    samples: dict[str, int]  # BUNDLE::TASK → valid samples


def pool(named: Iterable[tuple[str, EvalSummary]], k: int, *, seed: int = 0) -> Pooled:
    """Pool ``(bundle name, summary)`` pairs; tasks a summary leaves out stay out."""
    at_k: list[tuple[float, int]] = []
    rewards: dict[str, float] = {}
    samples: dict[str, int] = {}
    for name, summary in named:
        for t in summary.per_task:
            if t.task_id in summary.excluded_tasks or t.n == 0:
                continue
            key = f"{name}::{t.task_id}"
            if key in rewards:
                raise ValueError(
                    f"task {key!r} is pooled twice: two bundles share the name {name!r}"
                )
            rewards[key], samples[key] = t.mean_reward, t.n
            if (v := t.pass_at_k.get(k)) is not None:
                at_k.append((v, t.n // k))
    return Pooled(
        tasks=len(rewards),
        pass_at_k=(
            across_tasks([v for v, _ in at_k], [m for _, m in at_k], seed=seed) if at_k else None
        ),
        mean_reward=(
            across_tasks(list(rewards.values()), list(samples.values()), seed=seed)
            if rewards
            else None
        ),
        rewards=rewards,
        samples=samples,
    )
