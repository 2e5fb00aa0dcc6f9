"""The trip-planning verifier names exactly the constraint a hand-made plan violates.

Each case starts from a witness plan (valid), then breaks one thing — in the plan, or in the
episode's private copy of the database (prices, ratings, weather, timetables), which is what
the verifier reads — and asserts the exact set of failed checks.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from typing import Any

import pytest

from envgym.envs.procedural_kit.local import Episode, LocalBundle
from envgym.envs.trip_planning.build import build_bundle
from envgym.envs.trip_planning.constraints import (
    HANGZHOU_3DAY,
    BudgetTiers,
    Constraints,
    TransportRule,
    TripSpec,
    WeatherRule,
)
from envgym.envs.trip_planning.planner import Plan, Planner
from envgym.envs.trip_planning.world import World, load_world

pytestmark = pytest.mark.timeout(60)

PLAIN = TripSpec("Hangzhou", "2025-10-01", 3)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> LocalBundle:
    return LocalBundle(build_bundle(tmp_path_factory.mktemp("b") / "trip", seed=0, n_tasks=1))


@pytest.fixture(scope="module")
def world(bundle: LocalBundle) -> World:
    return load_world(bundle.root / "state" / "db.sqlite")


@pytest.fixture()
def ep(bundle: LocalBundle) -> Iterator[Episode]:
    with bundle.episode() as episode:  # a fresh state copy per test: tweaks never leak
        yield episode


def _task(spec: TripSpec) -> dict[str, Any]:
    return {
        "id": "t",
        "prompt": "p",
        "solution": "solve_trip",
        "verifier": "verify_trip",
        "difficulty": 1,
        "submit_tool": "submit_result",
        "system_prompt": None,
        "metadata": spec.metadata(),
    }


def _report(ep: Episode, spec: TripSpec, answer: Any) -> dict[str, Any]:
    text = answer if isinstance(answer, str) else json.dumps(answer)
    return ep.verify({"answer_text": text}, _task(spec))


def _failed(ep: Episode, spec: TripSpec, answer: Any) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in _report(ep, spec, answer)["checks"] if not c["passed"]}


def _witness(world: World, spec: TripSpec) -> Plan:
    plan = Planner(world, spec).witness()
    assert plan is not None
    return plan


def _sql(ep: Episode, sql: str, *params: Any) -> None:
    with closing(sqlite3.connect(ep.state / "db.sqlite")) as conn, conn:
        conn.execute(sql, params)


def _tweak(ep: Episode, table: str, name: str, **values: Any) -> None:
    sets = ", ".join(f"{k} = ?" for k in values)
    _sql(ep, f"UPDATE {table} SET {sets} WHERE name = ?", *values.values(), name)


def _other_city(world: World, answer: list[dict]) -> str:
    used = {d["city"] for d in answer}
    return next(c for c in world.cities if c not in used)


# ---- format ----


def test_unreadable_answer_reports_only_the_parse_check(ep: Episode) -> None:
    # Staged: a later check cannot be judged on an unreadable answer, and reporting it failed
    # would make valid_json impossible to witness alone (docs/CHECK.md).
    report = _report(ep, PLAIN, "here is my plan: day 1 Hangzhou")
    assert [c["name"] for c in report["checks"]] == ["valid_json"]
    assert not report["checks"][0]["passed"] and "not valid JSON" in report["checks"][0]["detail"]


def test_absurdly_deep_nesting_is_rejected_not_a_crash(ep: Episode) -> None:
    report = _report(ep, PLAIN, "[" * 3000 + "]" * 3000)
    assert [(c["name"], c["passed"]) for c in report["checks"]] == [("valid_json", False)]


@pytest.mark.parametrize(
    ("break_it", "check"),
    [
        (lambda a: a[:-1], "day_count"),
        (lambda a: [{k: v for k, v in a[0].items() if k != "hotel"}, *a[1:]], "fields_present"),
        (lambda a: [{**a[0], "notes": "x"}, *a[1:]], "fields_present"),
        (lambda a: [{**a[0], "hotel": 7}, *a[1:]], "fields_present"),
    ],
)
def test_format_failures_stop_before_the_constraints(
    ep: Episode, world: World, break_it, check: str
) -> None:
    report = _report(ep, PLAIN, json.dumps(break_it(_witness(world, PLAIN).answer())))
    assert [c["name"] for c in report["checks"]] == ["valid_json", "day_count", "fields_present"]
    assert {c["name"] for c in report["checks"] if not c["passed"]} == {check}


def test_wrong_date(ep: Episode, world: World) -> None:
    answer = _witness(world, PLAIN).answer()
    answer[1]["time"] = "2025-10-05"
    assert _failed(ep, PLAIN, answer) == {
        "dates": "day 2: time is '2025-10-05', expected '2025-10-02'"
    }


def test_unknown_entity(ep: Episode, world: World) -> None:
    answer = _witness(world, PLAIN).answer()
    answer[2]["hotel"] = "Hotel California"
    report = _report(ep, PLAIN, json.dumps(answer))
    # Staged: the constraints are not judged on names that do not exist.
    assert [c["name"] for c in report["checks"]][-1] == "entities_exist"
    assert {c["name"] for c in report["checks"] if not c["passed"]} == {"entities_exist"}


# ---- no repeats, right city, start city ----


def test_start_city(ep: Episode, world: World) -> None:
    answer = _witness(world, PLAIN).answer()
    elsewhere = replace(PLAIN, start_city=_other_city(world, answer))
    assert set(_failed(ep, elsewhere, answer)) == {"start_city"}


def _same_city_again(world: World, answer: list[dict], **keep: str) -> list[dict]:
    """Day 2 moved into day 1's city, with day-1 entities only where ``keep`` says."""
    city = answer[0]["city"]
    hotels = [h.name for h in world.hotels[city] if h.name != answer[0]["hotel"]]
    used = {answer[0]["afternoon_restaurant"], answer[0]["evening_restaurant"]}
    foods = [r.name for r in world.restaurants[city] if r.name not in used]
    sights = [
        a.name for a in world.attractions[city] if a.name != answer[0]["afternoon_attraction"]
    ]
    day = {
        **answer[1],
        "city": city,
        "hotel": hotels[0],
        "afternoon_restaurant": foods[0],
        "evening_restaurant": foods[1],
        "afternoon_attraction": sights[0],
    }
    day.update({k: answer[0][k] for k in keep})
    return [answer[0], day, answer[2]]


@pytest.mark.parametrize(
    ("keep", "expected"),
    [
        ({}, {"no_repeated_city"}),
        (
            {"hotel": "x"},
            {"no_repeated_city"},
        ),  # a repeated hotel is a repeated city (no own check)
        ({"afternoon_attraction": "x"}, {"no_repeated_city"}),
        ({"evening_restaurant": "x"}, {"no_repeated_city", "no_repeated_restaurant"}),
    ],
)
def test_repeats(ep: Episode, world: World, keep: dict, expected: set[str]) -> None:
    # Entities belong to one city, so repeating one means repeating its city too.
    answer = _same_city_again(world, _witness(world, PLAIN).answer(), **keep)
    assert set(_failed(ep, PLAIN, answer)) == expected


def test_lunch_and_dinner_at_the_same_restaurant(ep: Episode, world: World) -> None:
    answer = _witness(world, PLAIN).answer()
    answer[1]["evening_restaurant"] = answer[1]["afternoon_restaurant"]
    failed = _failed(ep, PLAIN, answer)
    assert set(failed) == {"no_repeated_restaurant"}
    assert "(day 2 afternoon, day 2 evening)" in failed["no_repeated_restaurant"]


@pytest.mark.parametrize(
    ("field", "table", "check"),
    [
        ("hotel", "hotels", "hotel_in_city"),
        ("afternoon_restaurant", "restaurants", "restaurants_in_city"),
        ("evening_restaurant", "restaurants", "restaurants_in_city"),
        ("afternoon_attraction", "attractions", "attraction_in_city"),
    ],
)
def test_entity_in_another_city(
    ep: Episode, world: World, field: str, table: str, check: str
) -> None:
    answer = _witness(world, PLAIN).answer()
    other = _other_city(world, answer)
    answer[1][field] = getattr(world, table)[other][0].name
    failed = _failed(ep, PLAIN, answer)
    assert set(failed) == {check}
    assert f"is in {other}, not {answer[1]['city']}" in failed[check]


# ---- the seed's day-2 budget tiers (hangzhou-3day) ----

TIER_CASES = [
    # hotel price, (lunch price, rating), (dinner price, rating), ticket, failure detail or None
    (
        880,
        (200, 4.5),
        (210, 4.5),
        50,
        "restaurants cost 410 CNY (200 + 210), must be < 350 because the hotel costs 880 CNY (luxury tier, ≥ 800)",
    ),
    (800, (100, 4.5), (100, 3.9), 50, "is rated 3.9, both must be ≥ 4.0"),
    (800, (100, 4.0), (100, 4.0), 120, "costs 120 CNY, must be < 120"),
    (800, (174, 4.0), (175, 4.0), 119, None),
    (799, (300, 3.9), (300, 3.9), 50, "neither restaurant is rated ≥ 4.0 (3.9, 3.9)"),
    (
        500,
        (300, 4.0),
        (300, 3.0),
        180,
        "must be < 180 because the hotel costs 500 CNY (mid-to-high tier, 500–800)",
    ),
    (500, (300, 4.0), (300, 3.0), 179, None),
    (499, (300, 3.1), (300, 3.1), 500, "neither restaurant is rated ≥ 3.2"),
    (499, (300, 3.2), (300, 1.0), 500, None),
    (200, (300, 1.0), (300, 3.2), 500, None),
    (
        199,
        (10, 5.0),
        (10, 5.0),
        0,
        "costs 199 CNY, outside every budget tier (the cheapest starts at 200 CNY)",
    ),
]


@pytest.mark.parametrize(("price", "lunch", "dinner", "ticket", "detail"), TIER_CASES)
def test_seed_budget_tiers(
    ep: Episode,
    world: World,
    price: int,
    lunch: tuple,
    dinner: tuple,
    ticket: int,
    detail: str | None,
) -> None:
    answer = _witness(world, HANGZHOU_3DAY).answer()
    day = answer[1]
    _tweak(ep, "hotels", day["hotel"], price_per_night=price)
    _tweak(
        ep,
        "restaurants",
        day["afternoon_restaurant"],
        avg_price_per_person=lunch[0],
        rating=lunch[1],
    )
    _tweak(
        ep,
        "restaurants",
        day["evening_restaurant"],
        avg_price_per_person=dinner[0],
        rating=dinner[1],
    )
    _tweak(ep, "attractions", day["afternoon_attraction"], ticket_price=ticket)
    failed = _failed(ep, HANGZHOU_3DAY, answer)
    if detail is None:
        assert failed == {}
    else:
        assert set(failed) == {"day2_budget_tier"} and detail in failed["day2_budget_tier"]


def test_hotel_below_every_tier_is_allowed_when_not_required(ep: Episode, world: World) -> None:
    c = HANGZHOU_3DAY.constraints
    assert c.budget_tiers is not None
    lenient = replace(
        HANGZHOU_3DAY,
        constraints=Constraints(
            budget_tiers=BudgetTiers(days=(2,), tiers=c.budget_tiers.tiers, require_tier=False)
        ),
    )
    answer = _witness(world, HANGZHOU_3DAY).answer()
    _tweak(ep, "hotels", answer[1]["hotel"], price_per_night=150)
    assert _failed(ep, lenient, answer) == {}
    assert set(_failed(ep, HANGZHOU_3DAY, answer)) == {"day2_budget_tier"}


# ---- floors, caps, budgets ----


@pytest.mark.parametrize(
    ("key", "value", "table", "field", "column", "bad"),
    [
        ("hotel_min_rating", 3.5, "hotels", "hotel", "rating", 3.4),
        ("restaurant_min_rating", 3.5, "restaurants", "evening_restaurant", "rating", 3.4),
        ("attraction_min_rating", 3.5, "attractions", "afternoon_attraction", "rating", 3.4),
        ("max_ticket", 100, "attractions", "afternoon_attraction", "ticket_price", 101),
    ],
)
def test_floors_and_caps(
    ep: Episode,
    world: World,
    key: str,
    value: float,
    table: str,
    field: str,
    column: str,
    bad: float,
) -> None:
    spec = replace(PLAIN, constraints=Constraints(**{key: value}))
    answer = _witness(world, spec).answer()
    check = "ticket_cap" if key == "max_ticket" else key
    _tweak(ep, table, answer[2][field], **{column: value})  # exactly at the limit: allowed
    assert _failed(ep, spec, answer) == {}
    _tweak(ep, table, answer[2][field], **{column: bad})
    failed = _failed(ep, spec, answer)
    assert set(failed) == {check} and failed[check].startswith("day 3: ")


def test_total_budget(ep: Episode, world: World) -> None:
    plan = _witness(world, PLAIN)
    at_limit = replace(PLAIN, constraints=Constraints(total_budget=plan.cost))
    assert _failed(ep, at_limit, plan.answer()) == {}
    over = replace(PLAIN, constraints=Constraints(total_budget=plan.cost - 1))
    assert _failed(ep, over, plan.answer()) == {
        "total_budget": f"hotels, meals and tickets cost {plan.cost} CNY, more than the {plan.cost - 1} CNY budget"
    }


# ---- weather ----


def _set_weather(ep: Episode, city: str, day: str, condition: str) -> None:
    _sql(
        ep,
        "UPDATE weather SET condition = ? WHERE date = ? AND city_id = "
        "(SELECT id FROM cities WHERE name = ?)",
        condition,
        day,
        city,
    )


def test_rain_needs_an_indoor_attraction(ep: Episode, world: World) -> None:
    spec = replace(PLAIN, constraints=Constraints(weather=WeatherRule("rain_indoor")))
    answer = _witness(world, spec).answer()
    _set_weather(ep, answer[1]["city"], answer[1]["time"], "heavy rain")
    _tweak(ep, "attractions", answer[1]["afternoon_attraction"], indoor=1)
    assert _failed(ep, spec, answer) == {}
    _tweak(ep, "attractions", answer[1]["afternoon_attraction"], indoor=0)
    failed = _failed(ep, spec, answer)
    assert set(failed) == {"weather_rain_indoor"} and "heavy rain" in failed["weather_rain_indoor"]


def test_avoid_rain(ep: Episode, world: World) -> None:
    # Day 1 is fixed in Hangzhou: start on a dry day there.
    dry = next(
        d
        for d in world.dates[:-2]
        if world.weather[("Hangzhou", d)] not in WeatherRule("avoid_rain").rainy_conditions
    )
    spec = replace(
        PLAIN, start_date=dry, constraints=Constraints(weather=WeatherRule("avoid_rain"))
    )
    answer = _witness(world, spec).answer()
    _set_weather(ep, answer[2]["city"], answer[2]["time"], "thunderstorm")
    failed = _failed(ep, spec, answer)
    assert set(failed) == {"weather_avoid_rain"}
    assert failed["weather_avoid_rain"] == (
        f"day 3: the forecast for {answer[2]['city']} on {answer[2]['time']} is thunderstorm"
    )


# ---- transport ----

TRANSPORT = replace(
    PLAIN,
    constraints=Constraints(
        transport=TransportRule(modes=("train",), max_hours=5.0, arrive_by="18:00", budget=5000)
    ),
)


def test_transport_rules(ep: Episode, world: World) -> None:
    plan = _witness(world, TRANSPORT)
    answer = plan.answer()
    assert answer[0]["transport"] is None and _failed(ep, TRANSPORT, answer) == {}
    code = answer[1]["transport"]

    def after(sql: str, *params: Any) -> set[str]:
        _sql(ep, sql, *params, code)
        names = set(_failed(ep, TRANSPORT, answer))
        _sql(
            ep,
            "UPDATE inter_city_transport SET mode = 'train', duration_minutes = 60, "
            "arrival_time = '10:00', from_city_id = (SELECT id FROM cities WHERE name = ?) "
            "WHERE code = ?",
            answer[0]["city"],
            code,
        )
        return names

    assert after("UPDATE inter_city_transport SET mode = 'bus' WHERE code = ?") == {
        "transport_mode"
    }
    assert after("UPDATE inter_city_transport SET duration_minutes = 301 WHERE code = ?") == {
        "transport_max_hours"
    }
    assert after("UPDATE inter_city_transport SET arrival_time = '18:01' WHERE code = ?") == {
        "transport_arrive_by"
    }
    assert after(
        "UPDATE inter_city_transport SET from_city_id = "
        "(SELECT id FROM cities WHERE name = ?) WHERE code = ?",
        _other_city(world, answer),
    ) == {"transport_connects"}
    assert _failed(ep, TRANSPORT, [{**answer[0], "transport": code}, *answer[1:]]).keys() == {
        "transport_connects"
    }


def test_transport_budget(ep: Episode, world: World) -> None:
    plan = _witness(world, TRANSPORT)
    c = TRANSPORT.constraints
    assert c.transport is not None
    tight = replace(
        TRANSPORT,
        constraints=replace(c, transport=replace(c.transport, budget=plan.transport_cost - 1)),
    )
    assert set(_failed(ep, tight, plan.answer())) == {"transport_budget"}


def test_missing_transport_field_when_required(ep: Episode, world: World) -> None:
    answer = _witness(world, TRANSPORT).answer()
    del answer[2]["transport"]
    assert "fields_present" in _failed(ep, TRANSPORT, answer)


def test_check_names_are_stable(ep: Episode, world: World) -> None:
    spec = TripSpec(
        "Hangzhou",
        "2025-10-01",
        3,
        Constraints(
            budget_tiers=HANGZHOU_3DAY.constraints.budget_tiers,
            hotel_min_rating=3.0,
            restaurant_min_rating=3.0,
            attraction_min_rating=3.0,
            max_ticket=400,
            total_budget=10**6,
            weather=WeatherRule("rain_indoor"),
            transport=TransportRule(("train", "flight", "bus"), 24.0, "23:59", 10**6),
        ),
    )
    names = [
        c["name"] for c in _report(ep, spec, json.dumps(_witness(world, spec).answer()))["checks"]
    ]
    assert names == [
        "valid_json",
        "day_count",
        "fields_present",
        "dates",
        "entities_exist",
        "start_city",
        "no_repeated_city",
        "no_repeated_restaurant",
        "hotel_in_city",
        "restaurants_in_city",
        "attraction_in_city",
        "day2_budget_tier",
        "hotel_min_rating",
        "restaurant_min_rating",
        "attraction_min_rating",
        "ticket_cap",
        "total_budget",
        "weather_rain_indoor",
        "transport_connects",
        "transport_mode",
        "transport_max_hours",
        "transport_arrive_by",
        "transport_budget",
    ]
