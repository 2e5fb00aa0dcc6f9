"""A mutated verifier (any single check forced to pass) fails `envgym check`.

For every family, one task per bundle (the one with the most checks) is checked once per rule
with a verifier wrapped so that this one rule is always reported passed.  The rule's witness is
then accepted, so check must report the rule uncovered and fail.  The unmutated bundle must
pass, or the test would prove nothing.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from envgym.bundle import load_bundle, write_manifest
from envgym.check import check_bundle

FAST = {"corruptions_per_task": 5, "reruns": 1, "adversarial": False}
# The one-task checks run the exploits too: code-interpreter tasks declare no witnesses, and
# check derives theirs from submissions that fail one rule only (a blank answer, an unparseable
# one), which the exploit list supplies.
ONE_TASK = {**FAST, "adversarial": True}
_MUTANT = '''

def envgym_mutant(submission, task):
    """{original} with the check {rule!r} always reported passed."""
    report = {original}(submission, task)
    for check in report.get("checks", []) if isinstance(report, dict) else []:
        if isinstance(check, dict) and check.get("name") == {rule!r}:
            check["passed"] = True
    return report
'''


def _trip(out: Path) -> Path:
    from envgym.envs.trip_planning.build import build_bundle

    return build_bundle(out, seed=0, n_tasks=5, include_worked_example=False)


def _code_interpreter(out: Path) -> Path:
    from envgym.envs.code_interpreter.build import build_bundle

    return build_bundle(out, seed=0)


def _procedural(family: str) -> Callable[[Path], Path]:
    def build(out: Path) -> Path:
        module = __import__(f"envgym.envs.{family}.build", fromlist=["build_bundle"])
        return module.build_bundle(out, seed=0, n_tasks=5)

    return build


FAMILIES = {
    "trip-planning": _trip,
    "code-interpreter": _code_interpreter,
    "retail": _procedural("retail_orders"),
    "meeting": _procedural("meeting_scheduling"),
    "shipment": _procedural("shipment_logistics"),
}


def _one_task_bundle(built: Path, out: Path) -> tuple[Path, dict]:
    """A copy of ``built`` holding only the task whose gold verdict reports the most checks."""
    report = check_bundle(load_bundle(built), **FAST)
    best = max(report.tasks, key=lambda t: len(t.rules))
    shutil.copytree(built, out)
    lines = [json.loads(x) for x in (out / "tasks.jsonl").read_text().splitlines() if x.strip()]
    line = next(x for x in lines if x["id"] == best.task_id)
    _rewrite(out, line)
    return out, {"line": line, "rules": best.rules, "baseline_report": report}


def _rewrite(root: Path, line: dict) -> None:
    (root / "tasks.jsonl").write_text(json.dumps(line, ensure_ascii=False) + "\n")
    manifest = json.loads((root / "manifest.json").read_text())
    write_manifest(
        root,
        name=manifest["name"],
        category=manifest["category"],
        provenance=manifest["provenance"],
        description=manifest.get("description", ""),
    )


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_removing_any_single_check_fails_check(family: str, tmp_path: Path) -> None:
    built = FAMILIES[family](tmp_path / "built")
    root, info = _one_task_bundle(built, tmp_path / "one")
    clean = check_bundle(load_bundle(root), **ONE_TASK)
    assert clean.passed, f"{family}: the unmutated task must pass: {clean.tasks[0].problems}"
    rules = info["rules"]
    assert len(rules) >= 1
    original = info["line"]["verifier"]
    survived = []
    for rule in rules:
        mutant = tmp_path / f"mutant-{len(survived)}-{rules.index(rule)}"
        shutil.copytree(root, mutant)
        verifier = mutant / "verifier.py"
        verifier.write_text(verifier.read_text() + _MUTANT.format(original=original, rule=rule))
        _rewrite(mutant, {**info["line"], "verifier": "envgym_mutant"})
        report = check_bundle(load_bundle(mutant), **ONE_TASK)
        if report.passed:
            survived.append(rule)
        shutil.rmtree(mutant)
    assert not survived, f"{family}: check still passed with these checks disabled: {survived}"
