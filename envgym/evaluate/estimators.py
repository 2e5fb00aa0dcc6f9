"""Estimators for sampled evaluations (docs/EVAL.md gives the formulas and their sources).

* pass@k, unbiased (Chen et al. 2021, "Evaluating Large Language Models Trained on Code",
  eq. 1): with n samples of a task of which c passed, 1 − C(n−c, k) / C(n, k) — the
  probability that at least one of k samples drawn without replacement passes.
* pass^k (Yao et al. 2024, "τ-bench", §3): C(c, k) / C(n, k) — the probability that all k
  drawn samples pass; it measures consistency where pass@k measures coverage.
* Wilson score interval (Wilson 1927) for a binomial proportion (per-task pass rates).
* The clustered Wilson interval for the means across tasks: the Wilson interval at an effective
  number of episodes n_eff = N / deff, with the design effect deff (Kish 1965) measured from the
  spread of the per-task values (the cluster-robust variance of a mean over tasks, as Miller 2024
  "Adding Error Bars to Evals" recommends for questions that come in clusters).  Unlike the
  percentile bootstrap over tasks it never collapses to a point (0/n, n/n, one task).
* Percentile bootstrap over tasks (Efron & Tibshirani 1993): only for values outside [0, 1].
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 ≤ c ≤ n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 ≤ k ≤ n, got n={n}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """τ-bench pass^k: every one of k samples passes."""
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion; (0, 1) when n == 0."""
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 ≤ successes ≤ n, got {successes}/{n}")
    if n == 0:
        return 0.0, 1.0
    return wilson_rate(successes / n, n, z)


def wilson_rate(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` observed over ``n`` trials; ``n`` may be an
    effective (non-integer) number of trials."""
    if not 0.0 <= p <= 1.0 or not n > 0:
        raise ValueError(f"need 0 ≤ p ≤ 1 and n > 0, got p={p}, n={n}")
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def effective_n(values: Sequence[float], trials: Sequence[int]) -> float:
    """Independent trials worth of information in the mean of per-task values (docs/EVAL.md).

    ``values[t]`` is task t's estimate in [0, 1] (its pass rate, pass@k or mean reward) and
    ``trials[t]`` how many independent trials it rests on (⌊n_t / k⌋ for pass@k).  With T tasks,
    p the mean and s² the sample variance of the values, the variance of p is s² / T (tasks are
    the independent unit) where n independent trials would give p(1 − p) / n; equating them,
    ``n_eff = p(1 − p) · T / s²``, kept within [T, Σ trials]: no more than the trials run, no
    less than one per task (every trial of a task the same).  When s² says nothing — one task,
    or every value 0 (or every value 1) — n_eff = T: clustering not measured is assumed whole.
    """
    tasks = len(values)
    if tasks == 0 or len(trials) != tasks or min(trials) < 1:
        raise ValueError(f"need one positive trial count per value, got {list(trials)}")
    upper = float(sum(trials))
    p = mean(values)
    if tasks < 2 or p <= 0.0 or p >= 1.0:
        return float(tasks)
    s2 = sum((v - p) ** 2 for v in values) / (tasks - 1)
    if s2 == 0.0:
        return upper  # every task the same fraction strictly inside (0, 1): no clustering
    return min(upper, max(float(tasks), p * (1 - p) * tasks / s2))


def clustered_wilson(
    values: Sequence[float], trials: Sequence[int], z: float = Z95
) -> tuple[float, float, float]:
    """``(low, high, n_eff)``: the Wilson interval of ``mean(values)`` at :func:`effective_n`."""
    if any(not 0.0 <= v <= 1.0 for v in values):
        raise ValueError("the clustered Wilson interval needs values in [0, 1]")
    n_eff = effective_n(values, trials)
    low, high = wilson_rate(mean(values), n_eff, z)
    return low, high, n_eff


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def bootstrap_interval(
    values: Sequence[float],
    *,
    statistic: Callable[[Sequence[float]], float] = mean,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``values`` (seeded: reproducible)."""
    if not values:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(
        statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples)
    )
    lo_index = int(math.floor((1 - level) / 2 * resamples))
    hi_index = min(resamples - 1, int(math.ceil((1 + level) / 2 * resamples)) - 1)
    return stats[lo_index], stats[hi_index]


def report_ks(k: int) -> list[int]:
    """The k values a report shows: 1, 2, 4, … up to k, and k itself."""
    ks = {k}
    j = 1
    while j < k:
        ks.add(j)
        j *= 2
    return sorted(ks)
