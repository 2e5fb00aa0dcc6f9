"""`envgym check`'s adversarial suite on a small hand-made bundle.

The bundle is one task, "what is 6 * 7?", with a verifier whose behaviour the tests switch
through a file in its state: strict, accepting the prompt echo, crashing on deep nesting,
checking two rules, or reporting a rule no witness isolates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.adversarial import exploits
from envgym.bundle import load_bundle, write_manifest
from envgym.check import CheckRunner, check_bundle

TOOLS = '''
def submit_answer(answer: str) -> str:
    """Submit the final answer.

    Args:
        answer: The number, as text.
    """
    return "received"
'''
SOLUTION = """
def solve(tools, task):
    tools.submit_answer(answer="42")


def lazy(tools, task):
    tools.submit_answer(answer="6 * 7")
"""
VERIFIER = """
import json
from envgym.runtime import state_dir


def verify(submission, task):
    mode = (state_dir() / "mode.txt").read_text().strip()
    answer = submission.get("answer")
    if mode == "crash" and isinstance(answer, str) and answer.startswith("[["):
        json.loads(answer)  # RecursionError on deep nesting: a verifier crash
    if not isinstance(answer, str):
        return {"checks": [{"name": "answer", "passed": False, "detail": "not text"}]}
    text = answer.strip().removeprefix("\\\\boxed{").removesuffix("}").strip()
    ok = text == "42" or (mode == "echo" and "6 * 7" in text)
    checks = [{"name": "answer", "passed": ok, "detail": "" if ok else "wrong"}]
    if mode == "two_rules":
        checks.append({"name": "short", "passed": len(answer) < 100, "detail": ""})
    if mode == "redundant":  # a second check that can never fail alone
        checks.append({"name": "answer_again", "passed": ok, "detail": ""})
    return {"checks": checks}
"""
PROMPT = "What is 6 * 7? Submit the number with submit_answer."


def _bundle(
    root: Path, mode: str, witnesses: list[dict] | None = None, baseline: str | None = None
) -> Path:
    (root / "state").mkdir(parents=True)
    (root / "state" / "mode.txt").write_text(mode)
    (root / "tools.py").write_text(TOOLS)
    (root / "solution.py").write_text(SOLUTION)
    (root / "verifier.py").write_text(VERIFIER)
    line: dict = {
        "id": "t1",
        "prompt": PROMPT,
        "solution": "solve",
        "verifier": "verify",
        "submit_tool": "submit_answer",
        "difficulty": 1,
    }
    if witnesses is not None:
        line["witnesses"] = witnesses
    if baseline is not None:
        line["baseline"] = baseline
    (root / "tasks.jsonl").write_text(json.dumps(line) + "\n")
    write_manifest(root, name="adv", category="test", provenance={"agent": "test"})
    return root


WRONG = {"rule": "answer", "submission": {"answer": "41"}, "note": "off by one"}
CHECK = {"corruptions_per_task": 5, "reruns": 1}


@pytest.mark.timeout(120)
def test_strict_verifier_passes_with_full_coverage(tmp_path: Path) -> None:
    report = check_bundle(
        load_bundle(_bundle(tmp_path / "b", "strict", [WRONG], baseline="lazy")), **CHECK
    )
    task = report.tasks[0]
    assert report.passed, task.problems
    assert task.rules == ("answer",) and task.rule_coverage == 1.0 and task.witnesses_valid == 1
    assert task.exploits_tried > 30 and not task.exploits_failed and task.verifier_errors == 0
    data = report.to_dict()
    assert data["baseline"]["by_difficulty"] == {"1": {"tasks": 1, "solved": 0, "rate": 0.0}}
    assert data["tasks"][0]["rule_coverage"] == 1.0


@pytest.mark.timeout(120)
def test_prompt_echo_accepted_fails_check(tmp_path: Path) -> None:
    report = check_bundle(load_bundle(_bundle(tmp_path / "b", "echo", [WRONG])), **CHECK)
    task = report.tasks[0]
    assert not report.passed
    assert any(name.startswith("echo_") for name in task.exploits_failed), task.exploits_failed


@pytest.mark.timeout(120)
def test_verifier_crash_is_a_failure_never_a_rejection(tmp_path: Path) -> None:
    report = check_bundle(load_bundle(_bundle(tmp_path / "b", "crash", [WRONG])), **CHECK)
    task = report.tasks[0]
    assert not report.passed and task.verifier_errors >= 1
    assert any("verifier broke" in p and "nested_text" in p for p in task.problems), task.problems


@pytest.mark.timeout(120)
def test_uncovered_rule_fails_and_is_named(tmp_path: Path) -> None:
    # Two rules, a witness for one only; derived witnesses off, as synthesis validation runs it.
    root = _bundle(tmp_path / "b", "two_rules", [WRONG])
    report = check_bundle(load_bundle(root), derive_witnesses=False, **CHECK)
    task = report.tasks[0]
    assert not report.passed and task.rules_covered == ("answer",) and task.rule_coverage == 0.5
    assert any("'short' has no witness" in p for p in task.problems)
    long = {"rule": "short", "submission": {"answer": "42" + " " * 200}, "note": "too long"}
    fixed = _bundle(tmp_path / "c", "two_rules", [WRONG, long])
    assert check_bundle(load_bundle(fixed), derive_witnesses=False, **CHECK).passed


@pytest.mark.timeout(120)
def test_bad_witnesses_are_named(tmp_path: Path) -> None:
    bad = [
        {"rule": "answer", "submission": {"answer": "42"}},  # the gold: accepted
        {"rule": "nonsense", "submission": {"answer": "41"}},
    ]
    report = check_bundle(
        load_bundle(_bundle(tmp_path / "b", "redundant", bad)), derive_witnesses=False, **CHECK
    )
    problems = " | ".join(report.tasks[0].problems)
    assert not report.passed
    assert "accepted, so the rule is not enforced" in problems
    assert "'nonsense' is not a check the gold verdict reports" in problems
    assert "'answer_again' has no witness" in problems  # fails only together with 'answer'


def test_exploits_cover_every_kind_and_never_equal_the_gold() -> None:
    gold = {"answer": "42"}
    found = exploits(PROMPT, gold)
    names = {e.name.split(":")[0] for e in found}
    assert {
        "empty",
        "whitespace",
        "echo_prompt",
        "echo_number",
        "echo_expression",
        "format_example",
        "wrapped",
        "boxed",
        "fenced",
        "as_number",
        "type_bool",
        "huge_int",
        "huge_float",
        "huge_string",
        "nested_text",
        "nested_value",
    } <= names
    assert all(e.submission != gold for e in found)
    # "42" is not in the prompt, but an echoed number equal to the gold is no exploit:
    assert not any(e.submission == {"answer": "42"} for e in exploits("Is it 42?", gold))
    gold_forms = {e.name for e in found if e.gold_form}
    assert "boxed:answer" in gold_forms and "echo_prompt:answer" not in gold_forms


def test_witnesses_and_baseline_round_trip_and_stay_host_side(tmp_path: Path) -> None:
    bundle = load_bundle(_bundle(tmp_path / "b", "strict", [WRONG], baseline="lazy"))
    task = bundle.tasks[0]
    assert task.baseline == "lazy" and task.witnesses[0].rule == "answer"
    assert (
        "witnesses" not in task.to_dict() and "baseline" not in task.to_dict()
    )  # never sent inside
    assert task.to_line()["witnesses"] == [WRONG]
    assert CheckRunner.__name__ == "CheckRunner"


def test_baseline_must_name_a_solution_function(tmp_path: Path) -> None:
    from envgym.bundle import BundleError

    with pytest.raises(BundleError, match="solution.py defines no function 'nope'"):
        load_bundle(_bundle(tmp_path / "b", "strict", [WRONG], baseline="nope"))
