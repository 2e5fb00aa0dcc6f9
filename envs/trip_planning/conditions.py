"""Per-condition and per-boundary probes for trip-planning tasks.

One witness per rule cannot see a rule that lost one of its conditions: a day-2 tier rule that
no longer checks "both restaurants rated at least the floor" still rejects the one witness that
broke the ticket limit.  Nor a threshold moved a little: a ticket limit tested with ``>`` instead
of ``>=`` still rejects a ticket far over it.  These probes swap one slot (or both restaurants) of
the gold plan for the entity that breaks one condition by the least, tagged
``"<rule>:<condition>"``; envs.procedural_kit.witness.condition_witnesses keeps, per tag, the
first whose verdict fails exactly that rule (proved against the verifier that ships).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from itertools import combinations
from typing import Any

from envs.trip_planning.constraints import Tier, TripSpec
from envs.trip_planning.world import World

Answer = list[dict[str, Any]]
Probe = tuple[dict[str, Any], str, str]
PER_CONDITION = 40  # probes tried per condition, the nearest to its threshold first
_MEALS = ("afternoon_restaurant", "evening_restaurant")


def probes(world: World, spec: TripSpec, gold: Answer) -> Iterator[Probe]:
    c = spec.constraints
    if c.budget_tiers is not None:
        for n in c.budget_tiers.days:
            yield from _tier_probes(world, gold, n, c.budget_tiers.tier_for(_hotel(world, gold[n - 1]).price))
    for i, day in enumerate(gold):
        city = day["city"]
        if c.max_ticket is not None:
            yield from _nearest(gold, i, "afternoon_attraction", world.attractions[city],
                                lambda a: a.ticket - c.max_ticket, "ticket_cap:nearest")
        for key, slot, table in (("hotel_min_rating", "hotel", world.hotels[city]),
                                 ("attraction_min_rating", "afternoon_attraction", world.attractions[city]),
                                 ("restaurant_min_rating", "afternoon_restaurant", world.restaurants[city]),
                                 ("restaurant_min_rating", "evening_restaurant", world.restaurants[city])):
            floor = getattr(c, key)
            if floor is not None:
                yield from _nearest(gold, i, slot, table, lambda r, f=floor: round(f - r.rating, 3),
                                    f"{key}:nearest")


def _hotel(world: World, day: dict[str, Any]) -> Any:
    return next(h for h in world.hotels[day["city"]] if h.name == day["hotel"])


def _tier_probes(world: World, gold: Answer, n: int, tier: Tier | None) -> Iterator[Probe]:
    if tier is None:
        return
    rule, i = f"day{n}_budget_tier", n - 1
    day, rows = gold[i], world.restaurants[gold[i]["city"]]
    meal = {r.name: r for r in rows}
    if tier.ticket_lt is not None:
        yield from _nearest(gold, i, "afternoon_attraction", world.attractions[day["city"]],
                            lambda a: a.ticket - tier.ticket_lt + 1, f"{rule}:ticket")
    if tier.restaurants_all_min_rating is not None:
        floor = tier.restaurants_all_min_rating
        for slot in _MEALS:  # one restaurant under the floor, the other kept
            yield from _nearest(gold, i, slot, rows, lambda r: round(floor - r.rating, 3), f"{rule}:all_rating")
    pairs = [(a, b) for a, b in combinations(rows, 2)]
    if tier.restaurants_any_min_rating is not None:
        floor = tier.restaurants_any_min_rating
        both_under = sorted((p for p in pairs if max(p[0].rating, p[1].rating) < floor),
                            key=lambda p: floor - max(p[0].rating, p[1].rating))
        for a, b in both_under[:PER_CONDITION]:
            yield _submit(_with(gold, i, afternoon_restaurant=a.name, evening_restaurant=b.name)), \
                f"day {n}: both restaurants under {floor}", f"{rule}:any_rating"
    if tier.restaurants_total_lt is not None:
        lt = tier.restaurants_total_lt
        spent = meal.get(day["afternoon_restaurant"]), meal.get(day["evening_restaurant"])
        singles = [(slot, r, r.price + other.price) for slot, other in zip(reversed(_MEALS), spent) if other
                   for r in rows]
        over = sorted((t - lt, slot, r.name) for slot, r, t in singles if t >= lt)
        for _, slot, name in over[:PER_CONDITION]:
            yield _submit(_with(gold, i, **{slot: name})), f"day {n}: restaurants at or over {lt}", \
                f"{rule}:restaurants_total"


def _nearest(gold: Answer, i: int, slot: str, rows: Any, excess: Callable[[Any], float], tag: str) -> Iterator[Probe]:
    """Swaps of one slot for the rows that break a threshold, the least excess first (0: at it)."""
    over = sorted((excess(r), r.name) for r in rows if excess(r) > 0)
    for amount, name in over[:PER_CONDITION]:
        if name != gold[i][slot]:
            yield _submit(_with(gold, i, **{slot: name})), f"day {i + 1}: {slot} {name} ({amount:g} over)", tag


def _submit(answer: Answer) -> dict[str, Any]:
    return {"answer_text": json.dumps(answer, ensure_ascii=False)}


def _with(answer: Answer, i: int, **changes: Any) -> Answer:
    out = [dict(d) for d in answer]
    out[i].update(changes)
    return out
