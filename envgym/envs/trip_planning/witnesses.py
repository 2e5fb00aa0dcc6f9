"""Per-rule witnesses for trip-planning tasks (docs/CHECK.md: every reported rule is enforced).

A witness for rule R is a submission whose verdict fails exactly R.  They are *found*, not
assumed: candidates are built from the task's constraints over the database and each one is
run through the bundle's own verifier; the first candidate that fails exactly one rule becomes
that rule's witness.  Candidates, cheapest first:

1. format breaks: unreadable JSON, a missing day, an extra field, a wrong date, a name that
   does not exist;
2. one slot of the gold plan swapped for another entity (same city, then other cities), lunch
   reused as dinner, a day's service swapped for any other service;
3. whole plans that meet the spec with one constraint relaxed (``Planner`` over the relaxed
   spec), or started elsewhere; budgets are ignored there, so they break the trip budgets too;
4. a day spent in the previous day's city (staying put needs no service).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import replace
from itertools import combinations, islice
from typing import Any

from envgym.envs.procedural_kit.witness import Verify
from envgym.envs.procedural_kit.witness import find_witnesses as kit_witnesses
from envgym.envs.trip_planning.constraints import TripSpec
from envgym.envs.trip_planning.planner import Planner
from envgym.envs.trip_planning.world import World

Answer = list[dict[str, Any]]
MAX_PLANS_PER_RULE = 150
MAX_STAY_DAYS = 80
_SLOTS = (
    ("hotel", "hotels"),
    ("afternoon_restaurant", "restaurants"),
    ("evening_restaurant", "restaurants"),
    ("afternoon_attraction", "attractions"),
)


def find_witnesses(
    verify: Verify, world: World, spec: TripSpec, gold: Answer
) -> tuple[list[dict[str, Any]], list[str]]:
    """Witnesses (tasks.jsonl form) for every rule the gold verdict reports, and the rules left without one."""
    rules = [c["name"] for c in verify(_submit(gold))["checks"]]
    return kit_witnesses(verify, rules, _candidates(world, spec, gold))


def _submit(answer: Answer) -> dict[str, Any]:
    return {"answer_text": json.dumps(answer, ensure_ascii=False)}


def _candidates(world: World, spec: TripSpec, gold: Answer) -> Iterator[tuple[dict[str, Any], str]]:
    yield {"answer_text": "Day 1: Hangzhou. Day 2: Shanghai."}, "prose, not a JSON array"
    if len(gold) > 1:
        yield _submit(gold[:-1]), "the last day is missing"
    else:
        yield _submit(gold + gold), "the only day is given twice"
    yield (
        _submit([{**gold[0], "note": "extra"}, *gold[1:]]),
        "day 1 has a field the task does not ask for",
    )
    yield _submit([{**gold[0], "time": "1999-01-01"}, *gold[1:]]), "day 1 has the wrong date"
    yield (
        _submit([{**gold[0], "hotel": "Nowhere Grand Hotel"}, *gold[1:]]),
        "day 1's hotel does not exist",
    )
    for answer, note in _slot_swaps(world, gold):
        yield _submit(answer), note
    for answer, note in _relaxed_plans(world, spec):
        yield _submit(answer), note
    for answer, note in _stays(world, spec, gold):
        yield _submit(answer), note


def _slot_swaps(world: World, gold: Answer) -> Iterator[tuple[Answer, str]]:
    for i, day in enumerate(gold):
        if day["afternoon_restaurant"] != day["evening_restaurant"]:
            yield (
                _with(gold, i, evening_restaurant=day["afternoon_restaurant"]),
                f"day {i + 1}: lunch reused as dinner",
            )
    for i, day in enumerate(gold):
        home = day["city"]
        for key, table in _SLOTS:
            rows = getattr(world, table)
            for city in [home, *[c for c in world.cities if c != home]]:
                for row in rows[city]:
                    if row.name != day[key]:
                        yield (
                            _with(gold, i, **{key: row.name}),
                            f"day {i + 1}: {key} is {row.name} ({city})",
                        )
    services = [s for group in world.connections.values() for s in group]
    for i, day in enumerate(gold):
        if "transport" in day and i > 0:
            for s in sorted(services, key=lambda s: s.price):
                if s.code != day["transport"]:
                    yield (
                        _with(gold, i, transport=s.code),
                        f"day {i + 1}: takes {s.code} ({s.src} → {s.dst})",
                    )


def _relaxed_plans(world: World, spec: TripSpec) -> Iterator[tuple[Answer, str]]:
    c = spec.constraints
    fare = c.transport.budget if c.transport else None
    for relaxed, note in _relaxations(world, spec):
        # Keep to the original trip budgets (unless relaxed): a plan over them breaks two rules.
        r = relaxed.constraints
        cap = c.total_budget if r.total_budget is not None else None
        fare_cap = fare if r.transport is not None and r.transport.budget is not None else None
        within = (
            p
            for p in Planner(world, relaxed).plans()
            if (cap is None or p.cost <= cap) and (fare_cap is None or p.transport_cost <= fare_cap)
        )
        for plan in islice(within, MAX_PLANS_PER_RULE):
            yield plan.answer(), note


def _relaxations(world: World, spec: TripSpec) -> Iterator[tuple[TripSpec, str]]:
    c = spec.constraints
    bt = c.budget_tiers
    if bt is not None:
        for n in bt.days:
            days = tuple(d for d in bt.days if d != n)
            yield (
                _spec(spec, budget_tiers=replace(bt, days=days) if days else None),
                f"day {n} ignores the budget tiers",
            )
    for key in (
        "hotel_min_rating",
        "restaurant_min_rating",
        "attraction_min_rating",
        "max_ticket",
        "total_budget",
        "weather",
    ):
        if getattr(c, key) is not None:
            yield _spec(spec, **{key: None}), f"a plan that ignores {key}"
    t = c.transport
    if t is not None:
        yield (
            _spec(spec, transport=replace(t, modes=("train", "bus", "flight"))),
            "a plan on any mode",
        )
        for key in ("max_hours", "arrive_by", "budget"):
            if getattr(t, key) is not None:
                yield (
                    _spec(spec, transport=replace(t, **{key: None})),
                    f"a plan that ignores transport {key}",
                )
    for city in world.cities:
        if city != spec.start_city:
            yield replace(spec, start_city=city), f"the trip starts in {city}"


def _spec(spec: TripSpec, **changes: Any) -> TripSpec:
    return replace(spec, constraints=replace(spec.constraints, **changes))


def _stays(world: World, spec: TripSpec, gold: Answer) -> Iterator[tuple[Answer, str]]:
    """Day k in day k-1's city, with other restaurants; the next leg re-planned from there."""
    planner = Planner(world, spec)
    used = {d[k] for d in gold for k in ("afternoon_restaurant", "evening_restaurant")}
    for k in range(1, len(gold)):
        city = gold[k - 1]["city"]
        answer = copy.deepcopy(gold)
        if k + 1 < len(gold) and "transport" in gold[k + 1]:
            leg = planner.best_leg(city, gold[k + 1]["city"])
            if leg is None:
                continue
            answer[k + 1]["transport"] = leg.code
        c, prev = spec.constraints, gold[k - 1]
        free = [
            r
            for r in world.restaurants[city]
            if r.name not in used
            and (c.restaurant_min_rating is None or r.rating >= c.restaurant_min_rating)
        ]
        hotels = [
            h
            for h in world.hotels[city]
            if c.hotel_min_rating is None or h.rating >= c.hotel_min_rating
        ]
        sights = [
            s
            for s in world.attractions[city]
            if (c.attraction_min_rating is None or s.rating >= c.attraction_min_rating)
            and (c.max_ticket is None or s.ticket <= c.max_ticket)
        ]
        # The previous day's hotel and attraction already meet the per-item rules (repeating
        # them is fine: only the city repeat is a violation), so they come first.
        options = [
            (
                h.name != prev["hotel"],
                s.name != prev["afternoon_attraction"],
                h.price + a.price + b.price + s.ticket,
                h.name,
                a.name,
                b.name,
                s.name,
            )
            for h in hotels
            for s in sights
            for a, b in combinations(free, 2)
        ]
        for *_, hotel, lunch, dinner, sight in sorted(options)[:MAX_STAY_DAYS]:
            day = {
                **answer[k],
                "city": city,
                "hotel": hotel,
                "afternoon_restaurant": lunch,
                "afternoon_attraction": sight,
                "evening_restaurant": dinner,
            }
            if "transport" in day:
                day["transport"] = None
            yield [*answer[:k], day, *answer[k + 1 :]], f"day {k + 1} stays in {city}"


def _with(answer: Answer, i: int, **changes: Any) -> Answer:
    out = [dict(d) for d in answer]
    out[i].update(changes)
    return out
