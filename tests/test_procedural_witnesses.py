"""Per-rule witnesses, mutated verifiers and greedy baselines of the three procedural families
(every reported rule is enforced, and levels need search).

Every check each verifier can report is named below and must have, in a built bundle, a witness
that fails exactly it; forcing any one check to pass must make ``envgym check`` fail.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from envgym.bundle import load_bundle
from envgym.check import check_bundle
from envgym.envs.meeting_scheduling.build import RECIPE as MEETINGS
from envgym.envs.procedural_kit.build import (
    Recipe,
    UnsolvableTask,
    baseline_solves,
    build_procedural_bundle,
)
from envgym.envs.procedural_kit.local import LocalBundle
from envgym.envs.retail_orders.build import RECIPE as RETAIL
from envgym.envs.shipment_logistics.build import RECIPE as SHIPMENTS

pytestmark = pytest.mark.timeout(300)

# Every check name each verifier can report; the bundles built below report all of them.
RULES: dict[str, set[str]] = {
    "retail": {
        "valid_json",
        "customer",
        "sku_exists",
        "category_order",
        "in_stock",
        "min_rating",
        "distinct_brands",
        "max_weight",
        "not_purchased_before",
        "total_correct",
        "budget",
        "line_exists",
        "no_duplicates",
        "delivered",
        "return_window",
        "not_final_sale",
        "excluded_category",
        "one_per_order",
        "refund_total_correct",
        "refund_range",
    },
    "meetings": {
        "valid_json",
        "meetings_in_order",
        "start_format",
        "no_overlap",
        "working_hours",
        "no_conflicts",
        "lunch_hour",
        "representative",
        "room_fits",
        "room_free",
        "smallest_room",
    },
    "shipments": {
        "valid_json",
        "shipments_in_order",
        "lanes_exist",
        "route_connects",
        "max_hops",
        "no_repeated_hub",
        "allowed_modes",
        "hazmat",
        "deadline",
        "capacity",
        "total_cost_correct",
        "budget",
    },
}
RECIPES: dict[str, tuple[Recipe, int]] = {
    "retail": (RETAIL, 3),
    "meetings": (MEETINGS, 2),
    "shipments": (SHIPMENTS, 3),
}


def failed(report: dict) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["passed"]}


@pytest.fixture(scope="module", params=sorted(RECIPES))
def family(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path]:
    recipe, seed = RECIPES[request.param]
    root = build_procedural_bundle(
        recipe, tmp_path_factory.mktemp(request.param) / "b", seed=seed, n_tasks=10
    )
    return request.param, root


def test_every_reported_rule_has_a_witness_that_fails_only_it(family: tuple[str, Path]) -> None:
    name, root = family
    tasks = [
        t.to_dict() | {"witnesses": [w.to_dict() for w in t.witnesses]}
        for t in load_bundle(root).tasks
    ]
    seen: set[str] = set()
    with LocalBundle(root).episode() as ep:
        for task in tasks:
            gold = ep.solve(task).submission
            rules = [c["name"] for c in ep.verify(gold, task)["checks"]]
            assert failed(ep.verify(gold, task)) == set()
            # one witness per rule in rule order, then per-condition witnesses (rules repeat)
            assert list(dict.fromkeys(w["rule"] for w in task["witnesses"])) == rules, task["id"]
            for w in task["witnesses"]:
                assert failed(ep.verify(w["submission"], task)) == {w["rule"]}, (task["id"], w)
            seen |= set(rules)
    assert seen == RULES[name], (
        f"{name}: never reported {RULES[name] - seen}, unknown {seen - RULES[name]}"
    )


def _mutate(root: Path, out: Path, function: str, rule: str) -> Path:
    """A copy of the bundle whose verifier reports ``rule`` as passed, whatever it found."""
    shutil.copytree(root, out)
    with open(out / "verifier.py", "a", encoding="utf-8") as fh:
        fh.write(
            f"\n\n_unmutated = {function}\n\n\ndef {function}(submission, task):\n"
            f"    report = _unmutated(submission, task)\n"
            f"    for check in report['checks']:\n"
            f"        if check['name'] == {rule!r}:\n"
            f"            check['passed'] = True\n"
            f"    return report\n"
        )
    return out


def test_a_verifier_with_any_single_check_disabled_fails_check(
    family: tuple[str, Path], tmp_path: Path
) -> None:
    name, root = family
    bundle = load_bundle(root)
    clean = check_bundle(
        bundle, sandbox="inprocess", reruns=1, corruptions_per_task=5, adversarial=False
    )
    assert clean.passed, clean.to_dict()
    function = bundle.tasks[0].verifier
    for rule in sorted(RULES[name] & {r for t in clean.tasks for r in t.rules}):
        mutated = load_bundle(_mutate(root, tmp_path / rule, function, rule), verify_hash=False)
        report = check_bundle(
            mutated, sandbox="inprocess", reruns=1, corruptions_per_task=5, adversarial=False
        )
        assert not report.passed, f"{name}: disabling {rule} went unnoticed"
        assert any(rule in p for t in report.tasks for p in t.problems), rule


def test_greedy_baseline_is_written_and_solves_exactly_the_tasks_drawn_for_it(
    family: tuple[str, Path],
) -> None:
    name, root = family
    recipe = RECIPES[name][0]
    tasks = load_bundle(root).tasks
    assert {t.baseline for t in tasks} == {recipe.baseline}
    with LocalBundle(root).episode() as ep:
        solved = {t.id: baseline_solves(ep, t.to_dict() | {"baseline": t.baseline}) for t in tasks}
    assert all(solved[t.id] for t in tasks if t.difficulty == 1)  # level 1: no search needed
    assert not all(solved[t.id] for t in tasks if t.difficulty == 5)  # top level: greedy is a trap


def _no_candidates(*_: object) -> list:
    return []


@pytest.mark.parametrize(
    "change",
    [
        lambda r: dataclasses.replace(r, witness_candidates=_no_candidates),
        lambda r: dataclasses.replace(r, greedy_share={1: 0.0}),  # level 1 greedy always solves
    ],
)
def test_kit_drops_tasks_it_cannot_prove(
    tmp_path: Path, change: Callable[[Recipe], Recipe]
) -> None:
    recipe = dataclasses.replace(change(RETAIL), max_draws=20)
    with pytest.raises(UnsolvableTask, match="no witness for|greedy baseline solves"):
        build_procedural_bundle(recipe, tmp_path / "b", seed=3, n_tasks=1, difficulties=(1,))


def test_a_task_meant_for_greedy_falls_back_to_a_strict_harder_draw(tmp_path: Path) -> None:
    """No draw the baseline solves (a helper that never submits): the bundle is still built, from strict draws
    the baseline fails, instead of raising (shipment level 5 lost 2 of 50 seeds this way)."""
    recipe = dataclasses.replace(
        RETAIL, baseline="_customer_context", greedy_share={1: 1.0}, max_draws=5
    )
    root = build_procedural_bundle(recipe, tmp_path / "b", seed=3, n_tasks=2, difficulties=(1,))
    tasks = load_bundle(root).tasks
    assert len(tasks) == 2
    with LocalBundle(root).episode() as ep:
        assert not any(baseline_solves(ep, t.to_dict() | {"baseline": t.baseline}) for t in tasks)
