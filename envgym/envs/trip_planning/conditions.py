"""Per-condition and per-boundary probes for trip-planning tasks.

One witness per rule cannot see a rule that lost one of its conditions: a day-2 tier rule that
no longer checks "both restaurants rated at least the floor" still rejects the one witness that
broke the ticket limit.  Nor a threshold moved a little: a ticket limit tested with ``>`` instead
of ``>=`` still rejects a ticket far over it.  These probes swap one slot (or both restaurants) of
the gold plan for the entity that breaks one condition by the least, tagged
``"<rule>:<condition>"``; envgym.envs.procedural_kit.witness.condition_witnesses keeps, per tag, the
first whose verdict fails exactly that rule (proved against the verifier that ships).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from envgym.envs.trip_planning.constraints import Tier, TripSpec
from envgym.envs.trip_planning.world import World

Answer = list[dict[str, Any]]
Probe = tuple[dict[str, Any], str, str]
PER_CONDITION = 40  # probes tried per condition, the nearest to its threshold first
_MEALS = ("afternoon_restaurant", "evening_restaurant")


def probes(world: World, spec: TripSpec, gold: Answer) -> Iterator[Probe]:
    yield from _transport_probes(gold)
    c = spec.constraints
    if c.budget_tiers is not None:
        for n in c.budget_tiers.days:
            yield from _tier_probes(world, spec, gold, n)
    for i, day in enumerate(gold):
        city = day["city"]
        if c.max_ticket is not None:
            yield from _nearest(
                gold,
                i,
                "afternoon_attraction",
                world.attractions[city],
                lambda a: a.ticket - c.max_ticket,
                "ticket_cap:nearest",
            )
        for key, slot, table in (
            ("hotel_min_rating", "hotel", world.hotels[city]),
            ("attraction_min_rating", "afternoon_attraction", world.attractions[city]),
            ("restaurant_min_rating", "afternoon_restaurant", world.restaurants[city]),
            ("restaurant_min_rating", "evening_restaurant", world.restaurants[city]),
        ):
            floor = getattr(c, key)
            if floor is not None:
                yield from _nearest(
                    gold,
                    i,
                    slot,
                    table,
                    lambda r, f=floor: round(f - r.rating, 3),
                    f"{key}:nearest",
                )


def _transport_probes(gold: Answer) -> Iterator[Probe]:
    """A service named on day 1 (the trip starts there: only the route rule looks at day 1), a
    travel day that names no service (the route's defect alone: the leg rules and the fare budget
    judge the services named, so a route rule that lets a day move without one pays it), and a
    travel day's service replaced by a code no service has (only the entities rule refuses it:
    a verifier that stops listing unknown services hands it to the transport rules instead)."""
    moves = [i for i, day in enumerate(gold) if i and day.get("transport")]
    if moves:
        k, code = moves[0], gold[moves[0]]["transport"]
        yield (
            _submit(_with(gold, 0, transport=code)),
            f"day 1 takes {code}",
            "transport_connects:first_day",
        )
        yield (
            _submit(_with(gold, k, transport=None)),
            f"day {k + 1} moves to {gold[k]['city']} with no service",
            "transport_connects:no_service",
        )
        yield (
            _submit(_with(gold, k, transport="ZZ0000")),
            f"day {k + 1} takes ZZ0000",
            "entities_exist:unknown_service",
        )


def _tier_probes(world: World, spec: TripSpec, gold: Answer, n: int) -> Iterator[Probe]:
    """For every tier and every condition it sets: day ``n`` rebuilt on a hotel of that tier, with
    restaurants and an attraction that meet the tier's other conditions and break this one by the
    least (a restaurant total or a ticket *at* the limit, a rating just under the floor)."""
    c, i, rule = spec.constraints, n - 1, f"day{n}_budget_tier"
    assert c.budget_tiers is not None
    city = gold[i]["city"]
    elsewhere = {d[k] for j, d in enumerate(gold) if j != i for k in _MEALS}
    meals = [
        r
        for r in world.restaurants[city]
        if r.name not in elsewhere
        and (c.restaurant_min_rating is None or r.rating >= c.restaurant_min_rating)
    ]
    sights = [
        a
        for a in world.attractions[city]
        if (c.max_ticket is None or a.ticket <= c.max_ticket)
        and (c.attraction_min_rating is None or a.rating >= c.attraction_min_rating)
    ]
    for tier in c.budget_tiers.tiers:
        hotels = sorted(
            (
                h
                for h in world.hotels[city]
                if tier.covers(h.price)
                and (c.hotel_min_rating is None or h.rating >= c.hotel_min_rating)
            ),
            key=lambda h: h.price,
        )
        if not hotels:
            continue
        conditions = _tier_conditions(tier)
        for name, excess in conditions.items():
            others = [f for k, f in conditions.items() if k != name]
            found = sorted(
                (excess(a, b, s), a.price + b.price + s.ticket, a.name, b.name, s.name)
                for a in meals
                for b in meals
                if a.name != b.name
                for s in sights
                if excess(a, b, s) > 0 and all(f(a, b, s) <= 0 for f in others)
            )
            for amount, _, lunch, dinner, sight in found[:PER_CONDITION]:
                day = {
                    "hotel": hotels[0].name,
                    "afternoon_restaurant": lunch,
                    "evening_restaurant": dinner,
                    "afternoon_attraction": sight,
                }
                yield (
                    _submit(_with(gold, i, **day)),
                    f"day {n}: {tier.label} tier, {name} broken by {amount:g}",
                    f"{rule}:{tier.label}:{name}",
                )


Excess = Callable[[Any, Any, Any], float]  # (lunch, dinner, sight) -> > 0 when the condition breaks


def _tier_conditions(t: Tier) -> dict[str, Excess]:
    out: dict[str, Excess] = {}
    if t.restaurants_total_lt is not None:
        out["restaurants_total"] = lambda a, b, s, lt=t.restaurants_total_lt: (
            a.price + b.price - lt + 1
        )
    if t.restaurants_all_min_rating is not None:
        out["all_rating"] = lambda a, b, s, f=t.restaurants_all_min_rating: round(
            f - min(a.rating, b.rating), 3
        )
    if t.restaurants_any_min_rating is not None:
        out["any_rating"] = lambda a, b, s, f=t.restaurants_any_min_rating: round(
            f - max(a.rating, b.rating), 3
        )
    if t.ticket_lt is not None:
        out["ticket"] = lambda a, b, s, lt=t.ticket_lt: s.ticket - lt + 1
    return out


def _nearest(
    gold: Answer, i: int, slot: str, rows: Any, excess: Callable[[Any], float], tag: str
) -> Iterator[Probe]:
    """Swaps of one slot for the rows that break a threshold, the least excess first (0: at it)."""
    over = sorted((excess(r), r.name) for r in rows if excess(r) > 0)
    for amount, name in over[:PER_CONDITION]:
        if name != gold[i][slot]:
            yield (
                _submit(_with(gold, i, **{slot: name})),
                f"day {i + 1}: {slot} {name} ({amount:g} over)",
                tag,
            )


def _submit(answer: Answer) -> dict[str, Any]:
    return {"answer_text": json.dumps(answer, ensure_ascii=False)}


def _with(answer: Answer, i: int, **changes: Any) -> Answer:
    out = [dict(d) for d in answer]
    out[i].update(changes)
    return out
