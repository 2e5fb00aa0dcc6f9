"""Filter budgets derived from the gold solution's length: a perfect
policy's long task must not be dropped as "never solved" because the episode budget cut it off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bundle_factory import TASK
from synth_notes import make_witnessed_notes

from envgym.rollout import RolloutBudget
from envgym.synth_agents.filter_run import filter_run, model_policy_factory
from envgym.synth_agents.passk import KEEP, NEVER, FilterConfig
from envgym.synth_agents.recorder import SynthRecorder
from envgym.synth_agents.validate import validate_bundle

pytestmark = pytest.mark.timeout(300)
CALLS = 140  # above the old fixed limit of 128 turns, like a difficulty-5 gold (144 calls)

LONG_SOLUTION = f"""
def solve_secret(tools, task):
    value = ""
    for _ in range({CALLS}):  # one note read per call: {CALLS} data calls, then the submit
        value = tools.get_note(key=task["metadata"]["key"])
    tools.submit_result(answer_text=value)
"""


def test_budget_for_is_derived_from_the_gold_length() -> None:
    config = FilterConfig()
    assert config.budget_for(0) == RolloutBudget()  # the floors: 128 turns, 8192 tokens
    assert (config.budget_for(144).max_turns, config.budget_for(144).max_tokens) == (
        2 * 144 + 8,
        2 * 144 * 128,
    )
    fixed = FilterConfig(derive_budget=False, budget=RolloutBudget(max_turns=5, max_tokens=99))
    assert fixed.budget_for(144) == fixed.budget
    with pytest.raises(ValueError, match="headroom"):
        FilterConfig(headroom=0.5)


@pytest.fixture(scope="module")
def long_task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = make_witnessed_notes(tmp_path_factory.mktemp("long") / "b", tasks=[TASK])
    (root / "solution.py").write_text(LONG_SOLUTION)
    from envgym.bundle import write_manifest

    write_manifest(root, name="notes", category="test", provenance={"agent": "test", "seed": 0})
    validation = validate_bundle(root)
    assert validation.passed, validation.problems
    assert validation.tasks[0]["tool_calls"] == CALLS + 1
    record = {
        "status": "kept",
        "content_hash": validation.content_hash,
        "tasks": ["secret"],
        "bundle": str(root),
        "validation": validation.to_dict(),
    }
    return root, record


@pytest.mark.parametrize(("derive", "decision"), [(True, KEEP), (False, NEVER)])
def test_a_perfect_policy_keeps_a_long_task_only_with_a_derived_budget(
    long_task: tuple[Path, dict], tmp_path: Path, require_backend, derive: bool, decision: str
) -> None:  # noqa: ANN001
    require_backend("bwrap")
    _, record = long_task
    config = FilterConfig(
        k=1, width=1, concurrency=1, derive_budget=derive
    )  # derive=False: the old fixed 128
    summary = filter_run(
        SynthRecorder(tmp_path / "out", None),
        [record],
        model="gold",
        factory=model_policy_factory("gold", "bwrap"),
        config=config,
    )
    assert dict(summary.decisions) == {decision: 1}
    line = next(json.loads(x) for x in (tmp_path / "out" / "synth.jsonl").read_text().splitlines())
    expected_turns = 2 * (CALLS + 1) + 8 if derive else 128
    assert (line["gold_calls"], line["max_turns"]) == (CALLS + 1, expected_turns)
    assert summary.longest_gold_calls == CALLS + 1 and ("derived" in summary.budget_rule) == derive
    rate = 1.0 if derive else 0.0  # measured difficulty is 1 - pass rate, whatever the label says
    assert summary.by_declared_difficulty == {"1": {"tasks": 1, "pass_rate": rate}}
    assert (line["declared_difficulty"], line["difficulty"]) == (1, 1.0 - rate)


def test_the_table_says_how_the_budget_was_set(
    long_task: tuple[Path, dict], tmp_path: Path, require_backend
) -> None:  # noqa: ANN001
    require_backend("bwrap")
    from rich.console import Console

    from envgym.apps.synth import print_summary
    from envgym.synth_agents.pipeline import RunSummary

    summary = filter_run(
        SynthRecorder(tmp_path / "out", None),
        [long_task[1]],
        model="gold",
        factory=model_policy_factory("gold", "bwrap"),
        config=FilterConfig(k=1, width=1),
    )
    console = Console(record=True, width=400)
    print_summary(
        {
            "synthesis": RunSummary("test", "test", 1).to_dict(),
            "filter": summary.to_dict(),
            "out": "o",
            "store": "s",
        },
        console,
    )
    text = console.export_text()
    assert f"≤ {2 * (CALLS + 1) + 8} turns" in text and f"longest gold: {CALLS + 1} calls" in text
    assert "derived per bundle from its longest gold solution" in text and "1: 100% of 1" in text
