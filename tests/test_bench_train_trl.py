"""``envgym bench train-trl`` without TRL: the shared task spec, the children's result parsing and
the ratios, on canned child output (the benchmark itself is the measurement, docs/TRAINER.md)."""

from __future__ import annotations

import json

import pytest

from envgym.benchmarks import grpo_task, train_trl, trl_grpo_child

pytestmark = pytest.mark.timeout(30)

CANNED = {
    "rollout_s": 60.0,
    "update_s": 40.0,
    "total_s": 100.0,
    "peak_rss_gib": 4.0,
    "loss": 0.01,
}


def test_the_task_is_8_distinct_prompts_with_a_deterministic_reward() -> None:
    prompts = [p for p, _ in grpo_task.TASKS]
    assert len(prompts) == 8 and len(set(prompts)) == 8
    assert grpo_task.GROUP_SIZE * len(prompts) == 64 and grpo_task.MAX_NEW_TOKENS == 64
    assert grpo_task.reward("The answer is 12.", "12") == 1.0
    assert grpo_task.reward("12", "12") == 1.0
    # a whole number only: 112 and 125 do not contain the answer 12
    assert grpo_task.reward("It is 112 or 125", "12") == 0.0
    assert grpo_task.reward("twelve", "12") == 0.0
    assert grpo_task.spec()["kl_beta"] == 0.0 and grpo_task.spec()["prompts"] == 8


def test_trl_child_loads_the_same_task_file_by_path() -> None:
    loaded = trl_grpo_child._load_task(str(train_trl.TASK_FILE))
    assert loaded.TASKS == grpo_task.TASKS
    assert loaded.spec() == grpo_task.spec()
    assert loaded.reward("so 18", "18") == grpo_task.reward("so 18", "18") == 1.0


def test_parse_child_reads_the_last_line_after_library_noise() -> None:
    stdout = "Loading weights: 100%\n{'loss': 0.3}\n" + json.dumps(CANNED) + "\n\n"
    assert train_trl.parse_child(stdout) == CANNED


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("", "printed nothing"),
        ("not json\n", "not JSON"),
        ("[1, 2]\n", "not a JSON object"),
        (json.dumps({"rollout_s": 1.0, "total_s": 2.0}), "lacks update_s, peak_rss_gib"),
    ],
)
def test_parse_child_refuses_bad_output(stdout: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        train_trl.parse_child(stdout)


def test_ratios_are_envgym_over_trl() -> None:
    envgym = {"rollout_s": 30.0, "update_s": 40.0, "total_s": 70.0, "peak_rss_gib": 6.0}
    r = train_trl.ratios(envgym, CANNED)
    assert r == {
        "ratio_rollout_s": 0.5,
        "ratio_update_s": 1.0,
        "ratio_total_s": 0.7,
        "ratio_peak_rss_gib": 1.5,
    }


def test_run_reports_each_micro_tokens_value_against_one_trl_run(monkeypatch) -> None:
    calls: list[object] = []

    def fake_trl() -> dict[str, float]:
        calls.append("trl")
        return dict(CANNED)

    def fake_envgym(mt: int) -> dict[str, float]:
        calls.append(mt)
        return {
            "rollout_s": 30.0,
            "update_s": mt / 100,
            "total_s": 30 + mt / 100,
            "peak_rss_gib": 2.0,
        }

    monkeypatch.setattr(train_trl, "trl_side", fake_trl)
    monkeypatch.setattr(train_trl, "envgym_side", fake_envgym)
    monkeypatch.setenv("ENVGYM_BENCH_MICRO_TOKENS", "1000, 4000")
    m = train_trl.run().metrics
    assert calls == ["trl", 1000, 4000]  # one after the other, TRL once
    assert m["trl_total_s"] == 100.0
    assert m["envgym_mt1000_ratio_update_s"] == pytest.approx(0.25)
    assert m["envgym_mt4000_ratio_total_s"] == pytest.approx(0.7)
    assert m["envgym_mt4000_ratio_peak_rss_gib"] == pytest.approx(0.5)
    monkeypatch.setenv("ENVGYM_BENCH_MICRO_TOKENS", "2048")
    assert "envgym_ratio_total_s" in train_trl.run().metrics  # one value: no mt suffix
    with pytest.raises(ValueError, match="no --quick"):
        train_trl.run(quick=True)
