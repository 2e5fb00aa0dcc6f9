"""Two evaluations of the same tasks, compared task by task (``envgym compare A.json B.json``).

Is model B better than model A on these tasks?  The two runs share their tasks, so the question is
about the per-task differences ``d_t = r_B(t) − r_A(t)`` (``r`` = the task's mean reward, pass@1
for one binary sample), not about two independent intervals: their overlap says little when the
same easy tasks pass in both.  B is better at 95 % when the whole interval lies above 0.

The interval of ``mean(d)`` is Newcombe's hybrid score interval for a difference of paired
proportions (Newcombe 1998, *Stat. Med.* 17:2635–2650, method 10; the MOVER form of Zou & Donner
2008, *Stat. Med.* 27:1693–1702): each run's own interval is the clustered Wilson interval of the
eval (estimators.clustered_wilson, over the shared tasks), and the two are combined with the
correlation of the per-task rewards.  It keeps its width when every task has the same
difference (0/66 vs 0/66 is ±0.055, not [0, 0]), where a bootstrap over tasks collapses to a
point.  Rewards outside [0, 1] fall back to the percentile bootstrap of ``mean(d)`` over tasks.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .estimators import bootstrap_interval, clustered_wilson, mean


class CompareError(ValueError):
    """An eval file that cannot be compared; the message names the file and what was wrong."""


@dataclass(frozen=True)
class PairedDifference:
    tasks: int  # shared by both runs (the others are listed, never compared)
    a_mean: float
    b_mean: float
    difference: float  # mean over tasks of r_B − r_A
    low: float
    high: float
    gained: int  # tasks where B's reward is higher
    lost: int  # tasks where B's reward is lower
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    method: str = "newcombe-wilson-clustered"  # or "bootstrap" (rewards outside [0, 1])
    correlation: float = 0.0  # of the per-task rewards of A and B (0 when undefined)

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "excludes_zero": self.excludes_zero,
        }


@dataclass(frozen=True)
class EvalScores:
    """One ``envgym eval --json`` file's per-task mean rewards and valid sample counts."""

    rewards: dict[str, float]
    samples: dict[str, int]


def paired_difference(
    a: dict[str, float],
    b: dict[str, float],
    *,
    a_samples: dict[str, int] | None = None,
    b_samples: dict[str, int] | None = None,
    resamples: int = 2000,
    seed: int = 0,
) -> PairedDifference:
    """``b − a`` over the tasks both map, with a 95 % interval of its mean.

    ``*_samples`` give each task's number of valid episodes (1 where not given): the effective
    number of trials of each side's clustered Wilson interval.
    """
    shared = sorted(set(a) & set(b))
    if not shared:
        raise CompareError("the two evaluations share no task: nothing to compare")
    ra, rb = [a[t] for t in shared], [b[t] for t in shared]
    diffs = [y - x for x, y in zip(ra, rb, strict=True)]
    pa, pb = mean(ra), mean(rb)
    rho = correlation(ra, rb)
    if all(0.0 <= v <= 1.0 for v in ra + rb):
        na = [(a_samples or {}).get(t, 1) for t in shared]
        nb = [(b_samples or {}).get(t, 1) for t in shared]
        la, ua, _ = clustered_wilson(ra, na)
        lb, ub, _ = clustered_wilson(rb, nb)
        low, high = newcombe_difference(pa, la, ua, pb, lb, ub, rho)
        method = "newcombe-wilson-clustered"
    else:
        low, high = bootstrap_interval(diffs, resamples=resamples, seed=seed)
        method = "bootstrap"
    return PairedDifference(
        tasks=len(shared),
        a_mean=pa,
        b_mean=pb,
        difference=mean(diffs),
        low=low,
        high=high,
        gained=sum(d > 0 for d in diffs),
        lost=sum(d < 0 for d in diffs),
        only_a=tuple(sorted(set(a) - set(b))),
        only_b=tuple(sorted(set(b) - set(a))),
        method=method,
        correlation=rho,
    )


def newcombe_difference(
    pa: float, la: float, ua: float, pb: float, lb: float, ub: float, rho: float
) -> tuple[float, float]:
    """95 % interval of ``pb − pa`` from each proportion's interval and their correlation
    (Newcombe 1998 method 10 / MOVER): ``L = d − √((pb−lb)² − 2ρ(pb−lb)(ua−pa) + (ua−pa)²)``,
    ``U = d + √((ub−pb)² − 2ρ(ub−pb)(pa−la) + (pa−la)²)``."""
    d = pb - pa
    below = (pb - lb) ** 2 - 2 * rho * (pb - lb) * (ua - pa) + (ua - pa) ** 2
    above = (ub - pb) ** 2 - 2 * rho * (ub - pb) * (pa - la) + (pa - la) ** 2
    return max(-1.0, d - math.sqrt(max(0.0, below))), min(1.0, d + math.sqrt(max(0.0, above)))


def correlation(x: list[float], y: list[float]) -> float:
    """Pearson correlation; 0 when it is undefined (fewer than 2 tasks or a constant side),
    as Newcombe sets it for an empty margin."""
    if len(x) < 2:
        return 0.0
    mx, my = mean(x), mean(y)
    sxy = sum((u - mx) * (v - my) for u, v in zip(x, y, strict=True))
    sxx = sum((u - mx) ** 2 for u in x)
    syy = sum((v - my) ** 2 for v in y)
    if sxx == 0.0 or syy == 0.0:
        return 0.0
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def task_rewards(path: Path) -> dict[str, float]:
    """``task_id → mean_reward`` from an ``envgym eval --json`` output file."""
    return load_scores(path).rewards


def load_scores(path: Path) -> EvalScores:
    """Per-task mean rewards and valid sample counts (``n``; 1 when a row has none)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise CompareError(f"{path}: cannot read it ({err.strerror or err})") from None
    except json.JSONDecodeError as err:
        raise CompareError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
    rows = data.get("per_task") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise CompareError(f"{path}: no 'per_task' list (is it `envgym eval --json` output?)")
    rewards: dict[str, float] = {}
    samples: dict[str, int] = {}
    for i, row in enumerate(rows):
        task = row.get("task_id") if isinstance(row, dict) else None
        reward = row.get("mean_reward") if isinstance(row, dict) else None
        numeric = isinstance(reward, (int, float)) and not isinstance(reward, bool)
        if not isinstance(task, str) or not numeric or reward is None:
            raise CompareError(
                f"{path}: per_task[{i}] needs a string task_id and a numeric mean_reward"
            )
        if not math.isfinite(reward):
            raise CompareError(f"{path}: per_task[{i}] ({task}) has a non-finite mean_reward")
        if task in rewards:
            raise CompareError(f"{path}: task {task!r} appears twice")
        n = row.get("n", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CompareError(
                f"{path}: per_task[{i}] ({task}) needs a positive integer n (valid samples)"
            )
        rewards[task] = float(reward)
        samples[task] = n
    return EvalScores(rewards, samples)
