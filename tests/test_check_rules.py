"""A verifier that stops checking a rule fails ``envgym check``.

The rules a task must enforce are declared independently of its verifier (the recipe writes
``metadata["declared_rules"]``; witnesses name their rules).  Switching a rule's stage off in the
verifier removes the rule from the gold verdict: check used to measure coverage over the reported
rules only and passed (coverage 1.0), while the mutant paid every answer breaking the rule.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envgym.bundle import load_bundle, write_manifest
from envgym.check import check_bundle
from envgym.check_rules import declared_rules
from envgym.envs.meeting_scheduling.build import RECIPE as MEETINGS
from envgym.envs.procedural_kit.build import Recipe, build_procedural_bundle
from envgym.envs.procedural_kit.local import LocalBundle
from envgym.envs.retail_orders.build import RECIPE as RETAIL

pytestmark = pytest.mark.timeout(300)
FAST = {
    "corruptions_per_task": 5,
    "reruns": 1,
    "adversarial": False,
    "sandbox": "inprocess",
}  # our own code

# (recipe, difficulty whose tasks have the rule, rule, verifier text, the same with the rule off)
MUTANTS = {
    "retail-min_rating": (
        RETAIL,
        3,
        "min_rating",
        '("min_rating", meta.get("min_rating") is not None)',
        '("min_rating", False)',
    ),
    "meeting-lunch_hour": (
        MEETINGS,
        3,
        "lunch_hour",
        '(["lunch_hour"] if meta.get("protect_lunch") else [])',
        "[]",
    ),
}


def _rewrite(
    root: Path, mutate_verifier: tuple[str, str] | None = None, *, keep_witnesses: bool = True
) -> None:
    if mutate_verifier is not None:
        verifier = root / "verifier.py"
        text = verifier.read_text()
        assert text.count(mutate_verifier[0]) == 1, "the mutant no longer matches the verifier"
        verifier.write_text(text.replace(*mutate_verifier))
    if not keep_witnesses:
        lines = [
            json.loads(x) for x in (root / "tasks.jsonl").read_text().splitlines() if x.strip()
        ]
        (root / "tasks.jsonl").write_text(
            "".join(
                json.dumps({k: v for k, v in line.items() if k != "witnesses"}) + "\n"
                for line in lines
            )
        )
    manifest = json.loads((root / "manifest.json").read_text())
    write_manifest(
        root,
        name=manifest["name"],
        category=manifest["category"],
        provenance=manifest["provenance"],
        description=manifest.get("description", ""),
    )


@pytest.fixture(scope="module", params=sorted(MUTANTS))
def built(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path]:
    recipe: Recipe = MUTANTS[request.param][0]
    root = build_procedural_bundle(
        recipe,
        tmp_path_factory.mktemp(request.param) / "b",
        seed=0,
        n_tasks=1,
        difficulties=(MUTANTS[request.param][1],),
    )
    return request.param, root


def test_the_original_passes_and_declares_the_rule(built: tuple[str, Path]) -> None:
    name, root = built
    rule = MUTANTS[name][2]
    task = load_bundle(root).tasks[0]
    assert rule in task.metadata["declared_rules"]
    report = check_bundle(load_bundle(root), **FAST)
    assert report.passed, report.tasks[0].problems
    assert rule in report.tasks[0].rules_covered


@pytest.mark.parametrize("keep_witnesses", [True, False], ids=["witnesses", "declared-only"])
def test_a_verifier_that_stops_checking_a_rule_fails(
    built: tuple[str, Path], tmp_path: Path, keep_witnesses: bool
) -> None:
    name, root = built
    _, _, rule, before, after = MUTANTS[name]
    mutant = tmp_path / "mutant"
    shutil.copytree(root, mutant)
    _rewrite(mutant, (before, after), keep_witnesses=keep_witnesses)
    bundle = load_bundle(mutant)
    task = bundle.tasks[0]
    # The mutant no longer judges the rule: the answer the original rejected for it alone is
    # not rejected for it (whether a later stage catches it is luck).
    witness = next(w for w in load_bundle(root).tasks[0].witnesses if w.rule == rule)
    with LocalBundle(mutant).episode() as ep:
        report = ep.verify(dict(witness.submission), task.to_dict())
    assert rule not in {c["name"] for c in report["checks"]}

    check = check_bundle(bundle, **FAST).tasks[0]
    assert not check.passed
    assert check.rule_coverage < 1.0
    assert rule in check.required_rules and rule not in check.rules
    assert any(f"rule {rule!r} is declared by the task" in p for p in check.problems), (
        check.problems
    )


def test_any_problem_fails_the_task(built: tuple[str, Path], tmp_path: Path) -> None:
    """A witness naming a rule the verdict never reports was a note; now it fails the task."""
    _, root = built
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    lines = [json.loads(x) for x in (copy / "tasks.jsonl").read_text().splitlines() if x.strip()]
    lines[0]["witnesses"].append(
        {"rule": "made_up_rule", "submission": {"answer_text": "{}"}, "note": ""}
    )
    (copy / "tasks.jsonl").write_text(json.dumps(lines[0]) + "\n")
    _rewrite(copy)
    check = check_bundle(load_bundle(copy), **FAST).tasks[0]
    assert not check.passed and any("made_up_rule" in p for p in check.problems)


@pytest.mark.parametrize(
    "raw",
    [
        "min_rating",
        ["x"] * 201,
        [""],
        [1],
        ["a" * 101],
        {"rule": "x"},
    ],
)
def test_a_malformed_declared_rules_field_is_named(raw: object) -> None:
    rules, problem = declared_rules({"declared_rules": raw}, ("w",))
    assert rules == ("w",) and problem is not None and "declared_rules" in problem


def test_declared_rules_merge_metadata_and_witnesses_in_order() -> None:
    rules, problem = declared_rules({"declared_rules": ["a", "b"]}, ("b", "c"))
    assert problem is None and rules == ("a", "b", "c")
    assert declared_rules({}, ()) == ((), None)
