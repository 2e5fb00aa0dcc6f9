"""envgym.evaluate.paired and ``envgym compare``: the paired per-task difference of two evals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.evaluate.paired import CompareError, paired_difference, task_rewards

pytestmark = pytest.mark.timeout(120)


def _eval_json(path: Path, rewards: dict[str, float]) -> Path:
    rows = [{"task_id": t, "n": 1, "mean_reward": r} for t, r in rewards.items()]
    path.write_text(json.dumps({"k": 1, "per_task": rows}))
    return path


def test_the_difference_is_per_task_over_the_shared_tasks() -> None:
    a = {"t1": 1.0, "t2": 0.0, "t3": 0.0, "t4": 1.0, "only-a": 1.0}
    b = {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 0.0, "only-b": 0.0}
    d = paired_difference(a, b)
    # shared t1..t4: diffs 0, +1, +1, −1 → mean 0.25; A 0.5, B 0.75 on them
    assert (d.tasks, d.a_mean, d.b_mean, d.difference) == (4, 0.5, 0.75, 0.25)
    assert (d.gained, d.lost, d.only_a, d.only_b) == (2, 1, ("only-a",), ("only-b",))
    assert -1.0 <= d.low <= d.difference <= d.high <= 1.0
    assert not d.excludes_zero  # 4 tasks, one lost: the interval reaches below 0


def test_an_interval_excludes_zero_only_when_the_evidence_does() -> None:
    a = {f"t{i}": 0.0 for i in range(30)}
    better = {t: 1.0 if i < 12 else 0.0 for i, t in enumerate(a)}  # +12 of 30, none lost
    d = paired_difference(a, better)
    assert d.difference == pytest.approx(0.4) and d.low > 0 and d.excludes_zero
    # Every task the same difference (0/30 vs 0/30): the interval keeps the width the 30
    # episodes allow, ± the Wilson upper bound of 0/30, z²/(30 + z²); a bootstrap gave [0, 0].
    same = paired_difference(a, dict(a))
    z2 = 1.959963984540054**2
    assert (same.low, same.high) == (pytest.approx(-z2 / (30 + z2)), pytest.approx(z2 / (30 + z2)))
    assert not same.excludes_zero
    worse = paired_difference(better, a)
    assert worse.difference == pytest.approx(-0.4) and worse.high < 0 and worse.excludes_zero


def test_bad_eval_files_name_the_file_and_what_is_wrong(tmp_path: Path) -> None:
    cases = {
        "missing.json": None,
        "text.json": "not json",
        "list.json": json.dumps([1, 2]),
        "row.json": json.dumps({"per_task": [{"task_id": "t", "mean_reward": "1"}]}),
        "bool.json": json.dumps({"per_task": [{"task_id": "t", "mean_reward": True}]}),
        "nan.json": '{"per_task": [{"task_id": "t", "mean_reward": NaN}]}',
        "twice.json": json.dumps(
            {"per_task": [{"task_id": "t", "mean_reward": 1}, {"task_id": "t", "mean_reward": 0}]}
        ),
    }
    messages = {
        "missing.json": "cannot read it",
        "text.json": "not JSON",
        "list.json": "no 'per_task'",
        "row.json": r"per_task\[0\] needs a string task_id and a numeric mean_reward",
        "bool.json": r"per_task\[0\] needs",
        "nan.json": r"per_task\[0\] \(t\) has a non-finite mean_reward",
        "twice.json": "task 't' appears twice",
    }
    for name, text in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(CompareError, match=f"{name}: {messages[name]}"):
            task_rewards(tmp_path / name)
    with pytest.raises(CompareError, match="share no task"):
        paired_difference({"a": 1.0}, {"b": 1.0})


def test_the_command_prints_the_difference_and_exits_2_on_bad_input(tmp_path: Path) -> None:
    a = _eval_json(tmp_path / "a.json", {f"t{i}": 0.0 for i in range(20)})
    b = _eval_json(tmp_path / "b.json", {f"t{i}": float(i < 10) for i in range(20)})
    cmd = [sys.executable, "-m", "envgym.cli", "compare"]
    out = subprocess.run(
        [*cmd, str(a), str(b), "--json"], capture_output=True, text=True, timeout=60, check=True
    )
    data = json.loads(out.stdout)
    assert data["difference"] == 0.5 and data["excludes_zero"] and data["gained"] == 10
    text = subprocess.run([*cmd, str(a), str(b)], capture_output=True, text=True, timeout=60)
    assert "B − A = +0.500" in text.stdout and "excludes 0" in text.stdout
    bad = subprocess.run(
        [*cmd, str(a), str(tmp_path / "nope.json")], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "nope.json: cannot read it" in bad.stderr
