"""Intervals that stay honest at small n: the clustered Wilson interval of envgym eval and the
paired interval of envgym compare, against values computed by hand (docs/EVAL.md)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.evaluate import summarize
from envgym.evaluate.estimators import clustered_wilson, effective_n, wilson_rate
from envgym.evaluate.paired import paired_difference
from envgym.rollout import EpisodeResult

pytestmark = pytest.mark.timeout(120)

Z = 1.959963984540054
Z2 = Z * Z


def wilson(p: float, n: float) -> tuple[float, float]:
    """The Wilson score interval written out (Wilson 1927), independently of the code."""
    centre = (p + Z2 / (2 * n)) / (1 + Z2 / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z2 / (4 * n * n)) / (1 + Z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def episodes(rates: dict[str, tuple[int, int]]) -> list[EpisodeResult]:
    """``task → (passed, samples)`` as binary episodes."""
    return [
        EpisodeResult(task_id=t, sample=s, reward=float(s < c))
        for t, (c, n) in rates.items()
        for s in range(n)
    ]


def one_per_task(passed: int, tasks: int) -> list[EpisodeResult]:
    return episodes({f"t{i:02d}": (int(i < passed), 1) for i in range(tasks)})


def approx(pair: tuple[float, float]) -> tuple[object, object]:
    return pytest.approx(pair[0], abs=1e-12), pytest.approx(pair[1], abs=1e-12)


def test_zero_and_all_of_66_are_intervals_not_points() -> None:
    none = summarize(one_per_task(0, 66), k=1)
    iv = none.pass_at_k[1]
    # 0/66: [0, z²/(66 + z²)] = [0, 0.0550]; the bootstrap over tasks printed [0.000, 0.000].
    assert (iv.value, iv.n_eff, iv.method) == (0.0, 66.0, "wilson-clustered")
    assert (iv.low, iv.high) == approx((0.0, Z2 / (66 + Z2)))
    assert iv.high == pytest.approx(0.0550025570, abs=1e-9)
    assert (none.mean_reward.low, none.mean_reward.high) == approx((0.0, Z2 / (66 + Z2)))
    every = summarize(one_per_task(66, 66), k=1).pass_at_k[1]
    assert (every.low, every.high) == approx((66 / (66 + Z2), 1.0))


def test_22_of_66_is_the_wilson_interval_of_a_third() -> None:
    iv = summarize(one_per_task(22, 66), k=1).pass_at_k[1]
    # one episode per task: s² = (66/65)·(2/9), n_eff = (2/9)·66/s² = 65 → at least T = 66
    assert iv.n_eff == 66.0 and iv.value == pytest.approx(1 / 3)
    assert (iv.low, iv.high) == approx(wilson(1 / 3, 66))
    assert (round(iv.low, 4), round(iv.high, 4)) == (0.2316, 0.4534)


def test_one_task_limit_1_is_an_interval() -> None:
    # `--limit 1 -k 1`: one episode; the bootstrap could only ever give a point.
    failed = summarize(one_per_task(0, 1), k=1).pass_at_k[1]
    assert (failed.low, failed.high) == approx((0.0, Z2 / (1 + Z2)))
    assert failed.high == pytest.approx(0.7934506856, abs=1e-9)
    passed = summarize(one_per_task(1, 1), k=1).pass_at_k[1]
    assert (passed.low, passed.high) == approx((1 / (1 + Z2), 1.0))
    # One task, 8 samples, 3 passed: one task says nothing of the spread between tasks: n_eff 1.
    eight = summarize(episodes({"t": (3, 8)}), k=1).pass_at_k[1]
    assert eight.n_eff == 1.0 and (eight.low, eight.high) == approx(wilson(3 / 8, 1))


def test_episodes_of_one_task_count_once_when_tasks_are_all_or_nothing() -> None:
    # 6 tasks × 8 samples; 2 tasks pass every sample, 4 never: 16/48 episodes, but 2/6 tasks.
    s = summarize(episodes({f"t{i}": (8 if i < 2 else 0, 8) for i in range(6)}), k=1)
    iv = s.pass_at_k[1]
    # s² = (2·(2/3)² + 4·(1/3)²)/5 = 4/15, n_eff = (2/9)·6/(4/15) = 5 → at least T = 6
    assert iv.n_eff == 6.0 and (iv.low, iv.high) == approx(wilson(1 / 3, 6))
    # 0 of 6 × 8: nothing measures the clustering, so it is assumed whole: n_eff = 6 tasks.
    zero = summarize(episodes({f"t{i}": (0, 8) for i in range(6)}), k=1).pass_at_k[1]
    assert zero.n_eff == 6.0 and (zero.low, zero.high) == approx((0.0, Z2 / (6 + Z2)))


def test_the_effective_n_between_the_bounds() -> None:
    # per-task rates 8/8, 6/8, 2/8, 0/8, 4/8, 4/8: p = 1/2, s² = 0.625/5 = 1/8, n_eff = 12
    rates = {"a": (8, 8), "b": (6, 8), "c": (2, 8), "d": (0, 8), "e": (4, 8), "f": (4, 8)}
    iv = summarize(episodes(rates), k=1).pass_at_k[1]
    assert iv.n_eff == pytest.approx(12.0) and (iv.low, iv.high) == approx(wilson(0.5, 12))
    # every task 4/8: no spread between tasks, the 48 episodes count in full
    assert effective_n([0.5] * 6, [8] * 6) == 48.0
    # pass@2 rests on ⌊n/k⌋ disjoint pairs per task: the upper bound is 6 × 4
    assert effective_n([0.5] * 6, [4] * 6) == 24.0
    # two tasks at 1/4 and 3/4 of 3 trials each: s² = 1/8, n_eff = (1/4)·2·8 = 4, within [2, 6]
    low, high, n_eff = clustered_wilson([0.25, 0.75], [3, 3])
    assert n_eff == 4.0 and (low, high) == approx(wilson(0.5, 4))
    with pytest.raises(ValueError, match="values in"):
        clustered_wilson([1.5], [1])
    with pytest.raises(ValueError, match="positive trial count"):
        effective_n([0.5], [0])
    with pytest.raises(ValueError, match="n > 0"):
        wilson_rate(0.5, 0)


def test_pass_at_k_intervals_are_clustered_too() -> None:
    # 3 tasks × 4 samples, k = 2, every sample failed: pass@2 = 0 over 3 tasks, n_eff = 3.
    s = summarize(episodes({f"t{i}": (0, 4) for i in range(3)}), k=2)
    assert (s.pass_at_k[2].low, s.pass_at_k[2].high) == approx((0.0, Z2 / (3 + Z2)))
    assert (s.pass_hat_k[2].low, s.pass_hat_k[2].high) == approx((0.0, Z2 / (3 + Z2)))


def test_rewards_outside_0_1_fall_back_to_the_bootstrap() -> None:
    eps = [EpisodeResult(task_id=f"t{i}", sample=0, reward=2.0 * i) for i in range(4)]
    mr = summarize(eps, k=1).mean_reward
    assert mr.method == "bootstrap" and mr.n_eff is None and mr.low < mr.value < mr.high


def test_paired_0_of_66_against_0_of_66_keeps_its_width() -> None:
    a = {f"t{i:02d}": 0.0 for i in range(66)}
    d = paired_difference(a, dict(a))
    assert (d.low, d.high) == approx((-Z2 / (66 + Z2), Z2 / (66 + Z2)))
    # 22/66 vs 0/66, uncorrelated (A is constant): Newcombe's L = d − √((p−l_B)² + u_A²)
    b = {t: float(i < 22) for i, t in enumerate(a)}
    lb, ub = wilson(1 / 3, 66)
    ua = Z2 / (66 + Z2)
    up = paired_difference(a, b)
    expected = (1 / 3 - math.hypot(1 / 3 - lb, ua), 1 / 3 + (ub - 1 / 3))
    assert up.correlation == 0.0 and (up.low, up.high) == approx(expected)


def test_paired_uses_each_files_sample_counts(tmp_path: Path) -> None:
    # 6 tasks × 8 samples: A passes 4/8 of each, B 8/8 of three and 0/8 of three.
    def write(name: str, rates: list[float]) -> Path:
        rows = [{"task_id": f"t{i}", "n": 8, "mean_reward": r} for i, r in enumerate(rates)]
        (tmp_path / name).write_text(json.dumps({"k": 1, "per_task": rows}))
        return tmp_path / name

    a = write("a.json", [0.5] * 6)
    b = write("b.json", [1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    out = subprocess.run(
        [sys.executable, "-m", "envgym.cli", "compare", str(a), str(b), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(out.stdout)
    la, ua = wilson(0.5, 48)  # no spread between A's tasks: all 48 episodes count
    lb, ub = wilson(0.5, 6)  # B's tasks are all or nothing: 6 tasks
    expected = (-math.hypot(0.5 - lb, ua - 0.5), math.hypot(ub - 0.5, 0.5 - la))
    assert data["method"] == "newcombe-wilson-clustered" and data["correlation"] == 0.0
    assert (data["low"], data["high"]) == approx(expected)
    text = subprocess.run(
        [sys.executable, "-m", "envgym.cli", "compare", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert f"[{expected[0]:+.3f}, {expected[1]:+.3f}]" in text and "Newcombe" in text


def test_cli_limit_1_prints_an_interval(tmp_path: Path) -> None:
    # `envgym eval --limit 1` always printed a point; one passed episode is [1/(1 + z²), 1].
    base = [
        sys.executable,
        "-m",
        "envgym.cli",
        "eval",
        "trip-planning-v0",
        "--model",
        "gold",
        "-k",
        "1",
        "--limit",
        "1",
        "--db",
        f"sqlite:///{tmp_path / 'e.db'}",
    ]
    done = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-2000:]
    at1 = json.loads(done.stdout)["pass_at_k"]["1"]
    assert (at1["value"], at1["n_eff"]) == (1.0, 1.0)
    assert (at1["low"], at1["high"]) == approx((1 / (1 + Z2), 1.0))
    table = subprocess.run(base, capture_output=True, text=True, timeout=110).stdout
    assert "[0.207, 1.000]" in table and "n_eff 1" in table
