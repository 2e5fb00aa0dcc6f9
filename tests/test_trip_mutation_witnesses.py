"""A travel day with no service is the route rule's defect alone (docs/CHECK.md, mutation).

The trip verifier used to report such a day under the route rule, every leg rule and the fare
budget at once, so no witness could fail one of those rules alone for it, and the mutation run
left eight mutants that silenced one of those reports alive.  Now the leg rules and the fare
budget judge only the services a plan names, and the route rule's own witness
(``transport_connects:no_service``, tests/test_check_conditions.py) pins the route rule.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from envgym.envs.procedural_kit.local import Episode, LocalBundle
from envgym.envs.trip_planning.build import build_bundle
from envgym.envs.trip_planning.constraints import Constraints, TransportRule, TripSpec
from envgym.envs.trip_planning.planner import Planner
from envgym.envs.trip_planning.world import World, load_world

pytestmark = pytest.mark.timeout(120)

TRANSPORT = TripSpec(
    "Hangzhou",
    "2025-10-01",
    3,
    Constraints(
        transport=TransportRule(modes=("train",), max_hours=5.0, arrive_by="18:00", budget=5000)
    ),
)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> LocalBundle:
    return LocalBundle(build_bundle(tmp_path_factory.mktemp("b") / "trip", seed=0, n_tasks=1))


@pytest.fixture(scope="module")
def world(bundle: LocalBundle) -> World:
    return load_world(bundle.root / "state" / "db.sqlite")


@pytest.fixture()
def ep(bundle: LocalBundle) -> Iterator[Episode]:
    with bundle.episode() as episode:
        yield episode


def _failed(ep: Episode, spec: TripSpec, answer: list[dict[str, Any]]) -> set[str]:
    task = {"id": "t", "verifier": "verify_trip", "metadata": spec.metadata()}
    report = ep.verify({"answer_text": json.dumps(answer)}, task)
    return {c["name"] for c in report["checks"] if not c["passed"]}


def _gold(world: World, spec: TripSpec) -> list[dict[str, Any]]:
    plan = Planner(world, spec).witness()
    assert plan is not None
    return plan.answer()


def test_a_day_that_moves_with_no_service_fails_only_the_route(ep: Episode, world: World) -> None:
    answer = _gold(world, TRANSPORT)
    assert answer[1]["city"] != answer[0]["city"] and answer[1]["transport"]
    answer[1]["transport"] = None
    assert _failed(ep, TRANSPORT, answer) == {"transport_connects"}


def test_a_day_that_stays_but_names_a_service_is_still_judged_by_the_leg_rules(
    ep: Episode, world: World
) -> None:
    answer = _gold(world, TRANSPORT)
    bus = next(s.code for group in world.connections.values() for s in group if s.mode == "bus")
    answer[1] = {**answer[0], "time": answer[1]["time"], "transport": bus}
    assert "transport_mode" in _failed(ep, TRANSPORT, answer)


def test_the_fare_budget_still_adds_every_named_service(ep: Episode, world: World) -> None:
    answer = _gold(world, TRANSPORT)
    fares = sum(
        s.price
        for group in world.connections.values()
        for s in group
        if s.code in {d["transport"] for d in answer}
    )
    c = TRANSPORT.constraints
    assert c.transport is not None
    tight = replace(
        TRANSPORT, constraints=replace(c, transport=replace(c.transport, budget=fares - 1))
    )
    assert _failed(ep, tight, answer) == {"transport_budget"}
