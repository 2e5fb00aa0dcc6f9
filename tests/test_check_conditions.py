"""Weakened conditions and loosened thresholds fail ``envgym check``.

One witness per rule cannot see a rule that lost one of its conditions, nor a tolerance loosened
below what the corruptions probe (they move numbers by whole units).  The procedural kit now
keeps per-condition and per-boundary witnesses
(envgym.envs.procedural_kit.witness.condition_witnesses); each mutant below is a change to the
shipped verifier that check passed before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envgym.bundle import load_bundle, write_manifest
from envgym.check import check_bundle
from envgym.envs.meeting_scheduling.build import RECIPE as MEETINGS
from envgym.envs.procedural_kit.build import Recipe, build_procedural_bundle
from envgym.envs.retail_orders.build import RECIPE as RETAIL
from envgym.envs.shipment_logistics.build import RECIPE as SHIPMENTS

pytestmark = pytest.mark.timeout(300)
FAST = {
    "corruptions_per_task": 5,
    "reruns": 1,
    "adversarial": False,
    "sandbox": "inprocess",
}  # our own code

# name -> (recipe, difficulty, text in verifier.py, its weakened form, condition tag caught)
MUTANTS: dict[str, tuple[Recipe, int, str, str, str]] = {
    "shipment-lanes-need-not-join": (
        SHIPMENTS,
        1,
        'if lane["origin"] != hub:',
        "if False:",
        "route_connects:gap",
    ),
    "shipment-total-tolerance-5-cents": (
        SHIPMENTS,
        1,
        "abs(float(claimed) - total) <= 0.005",
        "abs(float(claimed) - total) <= 0.05",
        "total_cost_correct:",
    ),
    "retail-basket-total-tolerance-5-cents": (
        RETAIL,
        3,
        "abs(total - expected) > 0.005",
        "abs(total - expected) > 0.05",
        "total_correct:",
    ),
    "retail-refund-tolerance-5-cents": (
        RETAIL,
        4,
        "abs(claimed - total) > 0.005",
        "abs(claimed - total) > 0.05",
        "refund_total_correct:",
    ),
    "meeting-buffer-ignored": (
        MEETINGS,
        3,
        "a0 < b1 + buffer and b0 < a1 + buffer",
        "a0 < b1 and b0 < a1",
        "no_overlap:inside_buffer",
    ),
    # The pair loop skips each meeting's neighbour in the list (a survivor of the mutation run).
    "meeting-next-in-list-not-compared": (
        MEETINGS,
        5,
        "for b0, b1, b in spans[i + 1 :]:",
        "for b0, b1, b in spans[i + 2 :]:",
        "no_overlap:next_in_list",
    ),
    "meeting-lunch-ends-half-an-hour-early": (
        MEETINGS,
        3,
        "13 * 60 - shift",
        "12 * 60 + 30 - shift",
        "lunch_hour:into_end",
    ),
}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    out = {}
    for recipe, difficulty, *_ in MUTANTS.values():
        key = (recipe.category, difficulty)
        if key not in out:
            root = tmp_path_factory.mktemp("b") / "b"
            out[key] = build_procedural_bundle(
                recipe, root, seed=0, n_tasks=1, difficulties=(difficulty,)
            )
    return out


def mutate(root: Path, out: Path, before: str, after: str) -> Path:
    shutil.copytree(root, out)
    verifier = out / "verifier.py"
    text = verifier.read_text()
    assert text.count(before) == 1, f"the mutant no longer matches the verifier: {before!r}"
    verifier.write_text(text.replace(before, after))
    manifest = json.loads((out / "manifest.json").read_text())
    write_manifest(
        out,
        name=manifest["name"],
        category=manifest["category"],
        provenance=manifest["provenance"],
        description=manifest.get("description", ""),
    )
    return out


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_weakened_condition_fails_check(
    name: str, bundles: dict[tuple[str, int], Path], tmp_path: Path
) -> None:
    recipe, difficulty, before, after, tag = MUTANTS[name]
    root = bundles[(recipe.category, difficulty)]
    task = load_bundle(root).tasks[0]
    probes = [w for w in task.witnesses if f"[{tag}" in w.note]
    assert probes, f"the built task keeps no {tag} witness: {[w.note for w in task.witnesses]}"
    check = check_bundle(load_bundle(mutate(root, tmp_path / "m", before, after)), **FAST).tasks[0]
    assert not check.passed
    rule = tag.split(":")[0]
    # The probe is now accepted, or (the verifier going on to later stages) fails another rule.
    assert any(p.startswith("witness ") and f"({rule})" in p for p in check.problems), (
        check.problems
    )


def test_the_unmutated_bundles_pass(bundles: dict[tuple[str, int], Path]) -> None:
    for root in bundles.values():
        report = check_bundle(load_bundle(root), **FAST)
        assert report.passed, [t.problems for t in report.tasks]


# The seed's worked example (day-2 tiers: luxury, mid-to-high, affordable), whose tier rule the
# mutation study weakened one condition at a time.  (``ticket >= cap`` -> ``> cap`` is caught only
# where some attraction costs exactly the cap; Hangzhou has none at 120 or 180, so it is not here.)
TRIP_MUTANTS = {
    "tier-both-restaurants-floor-dropped": (
        "if floor is not None and r.rating < floor:",
        "if False:",
        "luxury:all_rating",
    ),
    "tier-any-restaurant-floor-dropped": (
        "if floor is not None and max(lunch.rating, dinner.rating) < floor:",
        "if False:",
        "mid-to-high:any_rating",
    ),
    "tier-ticket-cap-dropped": ("elif sight.ticket >= cap:", "elif False:", "mid-to-high:ticket"),
    "tier-restaurant-total-at-limit-allowed": (
        'total >= tier["restaurants_total_lt"]',
        'total > tier["restaurants_total_lt"]',
        "luxury:restaurants_total",
    ),
}


@pytest.fixture(scope="module")
def trip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from envgym.envs.trip_planning.build import build_bundle

    return build_bundle(
        tmp_path_factory.mktemp("trip") / "b", seed=0, n_tasks=0, include_worked_example=True
    )


def test_the_worked_example_passes(trip: Path) -> None:
    report = check_bundle(load_bundle(trip), **FAST)
    assert report.passed, report.tasks[0].problems


@pytest.mark.parametrize("name", sorted(TRIP_MUTANTS))
def test_a_weakened_tier_condition_fails_check(name: str, trip: Path, tmp_path: Path) -> None:
    before, after, tag = TRIP_MUTANTS[name]
    task = load_bundle(trip).tasks[0]
    assert any(f"[day2_budget_tier:{tag}]" in w.note for w in task.witnesses), [
        w.note for w in task.witnesses
    ]
    check = check_bundle(load_bundle(mutate(trip, tmp_path / "m", before, after)), **FAST).tasks[0]
    assert not check.passed
    assert any(p.startswith("witness ") and "(day2_budget_tier)" in p for p in check.problems), (
        check.problems
    )


# A difficulty-5 trip (transport between cities): survivors of the full mutation run.
TRANSPORT_MUTANTS = {
    "trip-day-one-service-not-refused": (
        'if days[0].get("transport") is not None:',
        "if False:",
        "transport_connects:first_day",
    ),
    "trip-unknown-service-not-listed": (
        'if day.get("transport") is not None and day["transport"] not in self.services:',
        "if False:",
        "entities_exist:unknown_service",
    ),
    # A travel day that names no service, let through by the route rule (the leg rules and the
    # fare budget judge only the services named, so nothing else refuses it).
    "trip-moving-day-without-service-allowed": (
        "if code is None and here == prev:",
        "if code is None or here == prev:",
        "transport_connects:no_service",
    ),
    "trip-no-direct-service-not-reported": (
        'out.append(f"day {i + 1}: no direct service from {prev} to {here} named {code!r}")',
        "pass",
        "transport_connects:no_service",
    ),
}


@pytest.fixture(scope="module")
def trip5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from envgym.envs.trip_planning.build import build_bundle

    return build_bundle(
        tmp_path_factory.mktemp("trip5") / "b",
        seed=0,
        n_tasks=1,
        difficulties=(5,),
        include_worked_example=False,
    )


@pytest.mark.parametrize("name", sorted(TRANSPORT_MUTANTS))
def test_a_weakened_transport_condition_fails_check(name: str, trip5: Path, tmp_path: Path) -> None:
    before, after, tag = TRANSPORT_MUTANTS[name]
    task = load_bundle(trip5).tasks[0]
    assert any(f"[{tag}]" in w.note for w in task.witnesses), [w.note for w in task.witnesses]
    assert check_bundle(load_bundle(trip5), **FAST).passed
    check = check_bundle(load_bundle(mutate(trip5, tmp_path / "m", before, after)), **FAST).tasks[0]
    assert not check.passed
    rule = tag.split(":")[0]
    assert any(p.startswith("witness ") and f"({rule})" in p for p in check.problems), (
        check.problems
    )
