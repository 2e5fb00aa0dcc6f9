"""Two evaluations of the same tasks, compared task by task (``envgym compare A.json B.json``).

Is model B better than model A on these tasks?  The two runs share their tasks, so the question is
about the per-task differences ``d_t = r_B(t) − r_A(t)`` (``r`` = the task's mean reward, pass@1
for one binary sample), not about two independent intervals: their overlap says little when the
same easy tasks pass in both.  The interval is the percentile bootstrap of ``mean(d)`` over tasks
(the same resampling unit as the eval's own intervals, envgym.evaluate.estimators); B is better
at 95 % when the whole interval lies above 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .estimators import bootstrap_interval, mean


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

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "only_a": list(self.only_a), "only_b": list(self.only_b),
                "excludes_zero": self.excludes_zero}


def paired_difference(
    a: dict[str, float], b: dict[str, float], *, resamples: int = 2000, seed: int = 0
) -> PairedDifference:
    """``b − a`` over the tasks both map, with a bootstrap 95 % interval of its mean."""
    shared = sorted(set(a) & set(b))
    if not shared:
        raise CompareError("the two evaluations share no task: nothing to compare")
    diffs = [b[t] - a[t] for t in shared]
    low, high = bootstrap_interval(diffs, resamples=resamples, seed=seed)
    return PairedDifference(
        tasks=len(shared),
        a_mean=mean([a[t] for t in shared]),
        b_mean=mean([b[t] for t in shared]),
        difference=mean(diffs),
        low=low,
        high=high,
        gained=sum(d > 0 for d in diffs),
        lost=sum(d < 0 for d in diffs),
        only_a=tuple(sorted(set(a) - set(b))),
        only_b=tuple(sorted(set(b) - set(a))),
    )


def task_rewards(path: Path) -> dict[str, float]:
    """``task_id → mean_reward`` from an ``envgym eval --json`` output file."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise CompareError(f"{path}: cannot read it ({err.strerror or err})") from None
    except json.JSONDecodeError as err:
        raise CompareError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
    rows = data.get("per_task") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise CompareError(f"{path}: no 'per_task' list (is it `envgym eval --json` output?)")
    out: dict[str, float] = {}
    for i, row in enumerate(rows):
        task = row.get("task_id") if isinstance(row, dict) else None
        reward = row.get("mean_reward") if isinstance(row, dict) else None
        numeric = isinstance(reward, (int, float)) and not isinstance(reward, bool)
        if not isinstance(task, str) or not numeric:
            raise CompareError(
                f"{path}: per_task[{i}] needs a string task_id and a numeric mean_reward"
            )
        if not math.isfinite(reward):
            raise CompareError(f"{path}: per_task[{i}] ({task}) has a non-finite mean_reward")
        if task in out:
            raise CompareError(f"{path}: task {task!r} appears twice")
        out[task] = float(reward)
    return out
