"""Trip tasks as searches for the shared baselines (envgym.envs.procedural_kit.baselines).

Built from the task's metadata and the database the tools expose (``World``), never the gold.
Two views of the same plans, one per stronger baseline:

* **Repair** (:func:`item_search`): one slot per day for each choice a plan makes — the city,
  the hotel, lunch, dinner, the attraction and, with transport rules, the leg's service.  An
  option is a *rank* in the city's cheapest-first list of items that meet the one-item rules
  (rating floors, ticket cap; for services mode, hours and arrival), as ``greedy_trip`` in
  solution.py reads them; so a city move keeps the ranks (it re-picks that day in the new
  city).  Greedy's plan is rank 0 everywhere in greedy's cities; repair changes one choice at
  a time (kit ``repair``) while that lowers the penalty.
* **Exhaustive** (:func:`city_search`): one slot per day whose options are the cities with a
  valid day on that date (its own rules: floors, tier, weather), each as its cheapest such day
  (``Planner.best_day``), legs as the cheapest allowed service.  Days interact only through
  the trip-wide sums and the no-repeat rule, so this reduction loses no solvable task: the
  search is exhaustive over city sequences.  Its size is the product of the pools, at most
  ``(cities - 1) ** (days - 1)`` (13**4 = 28,561 for a 5-day trip on 14 cities).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envgym.envs.procedural_kit.baselines import (
    EXHAUSTIVE_BOUND,
    NAMES,
    Choice,
    Search,
    exhaustive,
    repair,
)
from envgym.envs.trip_planning.constraints import (
    BudgetTiers,
    Constraints,
    Tier,
    TransportRule,
    TripSpec,
    WeatherRule,
)
from envgym.envs.trip_planning.planner import DayPlan, Plan, Planner
from envgym.envs.trip_planning.world import Connection, World

Answer = list[dict[str, Any]]
ITEMS = ("hotel", "lunch", "dinner", "attraction")  # per-day rank slots after the city slot


def baselines(
    world: World, meta: dict[str, Any], bound: int = EXHAUSTIVE_BOUND
) -> dict[str, Answer | str | None]:
    """Each baseline's answer: a submission's day list, None (gave up) or
    ``BEYOND`` (the exhaustive search did not start)."""
    spec = spec_from_metadata(meta)
    items = item_search(world, spec)
    start = greedy_start(world, spec)
    cities = city_search(world, spec)
    found = None if cities is None else exhaustive(cities, bound)
    return {
        "greedy": items.answer(start),
        "greedy+repair": items.answer(repair(items, start)),
        "exhaustive": cities.answer(found) if cities and isinstance(found, tuple) else found,
    }


assert NAMES == ("greedy", "greedy+repair", "exhaustive")  # the kit's names, in its order


class _Lists:
    """Per-city cheapest-first lists of the items meeting the one-item rules (as greedy reads
    them: sorted by price, then name)."""

    def __init__(self, world: World, c: Constraints) -> None:
        def floor(rating: float, key: str) -> bool:
            value = getattr(c, key)
            return value is None or rating >= value

        self.world, self.rule = world, c.transport
        self.hotels = {
            city: sorted(
                (h for h in rows if floor(h.rating, "hotel_min_rating")),
                key=lambda h: (h.price, h.name),
            )
            for city, rows in world.hotels.items()
        }
        self.restaurants = {
            city: sorted(
                (r for r in rows if floor(r.rating, "restaurant_min_rating")),
                key=lambda r: (r.price, r.name),
            )
            for city, rows in world.restaurants.items()
        }
        self.attractions = {
            city: sorted(
                (
                    a
                    for a in rows
                    if floor(a.rating, "attraction_min_rating")
                    and (c.max_ticket is None or a.ticket <= c.max_ticket)
                ),
                key=lambda a: (a.ticket, a.name),
            )
            for city, rows in world.attractions.items()
        }
        self._legs: dict[tuple[str, str], list[Connection]] = {}

    def legs(self, src: str, dst: str) -> list[Connection]:
        """Allowed direct services src → dst, cheapest first (empty without a transport rule)."""
        key = (src, dst)
        if key not in self._legs:
            rule = self.rule
            self._legs[key] = (
                []
                if rule is None
                else sorted(
                    (
                        s
                        for s in self.world.connections.get(key, ())
                        if s.mode in rule.modes
                        and (rule.max_hours is None or s.minutes <= rule.max_hours * 60)
                        and (rule.arrive_by is None or s.arrival <= rule.arrive_by)
                    ),
                    key=lambda s: (s.price, s.code),
                )
            )
        return self._legs[key]


def item_search(world: World, spec: TripSpec) -> Search:
    """The plan as item choices (see the module doc); slot order per day: city, hotel, lunch,
    dinner, attraction, and the leg's service when the task has a transport rule."""
    c, lists = spec.constraints, _Lists(world, spec.constraints)
    per_day = 6 if c.transport is not None else 5
    widest = {
        "hotel": max(map(len, lists.hotels.values()), default=0),
        "lunch": max(map(len, lists.restaurants.values()), default=0),
        "attraction": max(map(len, lists.attractions.values()), default=0),
    }
    widest["dinner"] = widest["lunch"]
    legs = max((len(v) for v in world.connections.values()), default=0)
    others = [city for city in world.cities if city != spec.start_city]
    pools: list[Sequence[Any]] = []
    for n in range(spec.days):
        pools.append([spec.start_city] if n == 0 else others)
        pools += [range(max(1, widest[item])) for item in ITEMS]
        if c.transport is not None:
            pools.append(range(max(1, legs)))

    def days(choice: Choice) -> list[tuple[Any, ...]]:
        return [choice[i : i + per_day] for i in range(0, len(choice), per_day)]

    def penalty(choice: Choice) -> float:
        out, seen, fares, total = 0.0, set(), 0, 0
        prev = None
        for n, (city, h, lunch, dinner, a, *leg) in enumerate(days(choice), 1):
            out += city in seen
            seen.add(city)
            hotels, meals, sights = (
                lists.hotels[city],
                lists.restaurants[city],
                lists.attractions[city],
            )
            out += (h >= len(hotels)) + (lunch >= len(meals)) + (dinner >= len(meals))
            out += (a >= len(sights)) + (lunch == dinner)
            if prev is not None and c.transport is not None:
                services = lists.legs(prev, city)
                if leg[0] >= len(services):
                    out += 1
                else:
                    fares += services[leg[0]].price
            prev = city
            if h >= len(hotels) or max(lunch, dinner) >= len(meals) or a >= len(sights):
                continue
            hotel, sight = hotels[h], sights[a]
            pair = (meals[lunch], meals[dinner])
            total += hotel.price + pair[0].price + pair[1].price + sight.ticket
            out += _day_penalty(world, spec, n, city, hotel.price, pair, sight)
        if c.total_budget is not None:
            out += max(0, total - c.total_budget) / c.total_budget
        if c.transport is not None and c.transport.budget is not None:
            out += max(0, fares - c.transport.budget) / c.transport.budget
        return out

    def answer(choice: Choice) -> Answer:
        rows, prev = [], None
        for n, (city, h, lunch, dinner, a, *leg) in enumerate(days(choice)):
            meals = lists.restaurants[city]
            row = {
                "time": spec.dates[n],
                "city": city,
                "hotel": _name(lists.hotels[city], h),
                "afternoon_restaurant": _name(meals, lunch),
                "afternoon_attraction": _name(lists.attractions[city], a),
                "evening_restaurant": _name(meals, dinner),
            }
            if c.transport is not None:
                services = lists.legs(prev, city) if prev is not None else []
                row["transport"] = services[leg[0]].code if leg[0] < len(services) else None
            rows.append(row)
            prev = city
        return rows

    return Search(pools, penalty, answer)


def _name(rows: Sequence[Any], rank: int) -> str:
    return rows[rank].name if rank < len(rows) else ""


def _day_penalty(
    world: World,
    spec: TripSpec,
    n: int,
    city: str,
    price: int,
    meals: tuple[Any, Any],
    sight: Any,
) -> float:
    """How far day ``n`` is from its own rules (tier, weather); 0 when it meets them."""
    c, out = spec.constraints, 0.0
    if c.weather is not None and world.weather[(city, spec.dates[n - 1])] in (
        c.weather.rainy_conditions
    ):
        out += 1 if c.weather.rule == "avoid_rain" or not sight.indoor else 0
    bt = c.budget_tiers
    if bt is None or n not in bt.days:
        return out
    tier = bt.tier_for(price)
    if tier is None:
        lowest = min(t.min_price for t in bt.tiers)
        return out + (1 + (lowest - price) / lowest if bt.require_tier else 0)
    spent = meals[0].price + meals[1].price
    if tier.restaurants_total_lt is not None and spent >= tier.restaurants_total_lt:
        out += 1 + (spent - tier.restaurants_total_lt) / tier.restaurants_total_lt
    low, high = min(m.rating for m in meals), max(m.rating for m in meals)
    if tier.restaurants_all_min_rating is not None and low < tier.restaurants_all_min_rating:
        out += 1 + tier.restaurants_all_min_rating - low
    if tier.restaurants_any_min_rating is not None and high < tier.restaurants_any_min_rating:
        out += 1 + tier.restaurants_any_min_rating - high
    if tier.ticket_lt is not None and sight.ticket >= tier.ticket_lt:
        out += 1 + (sight.ticket - tier.ticket_lt) / tier.ticket_lt
    return out


def greedy_start(world: World, spec: TripSpec) -> Choice:
    """``greedy_trip``'s plan as item ranks: each next city the first unvisited one in the
    tools' (alphabetical) order that an allowed service reaches, every item its cheapest.
    Where no city is reachable it takes the first unvisited one (greedy_trip gives up there,
    and an answer without a leg fails the verifier as well)."""
    lists = _Lists(world, spec.constraints)
    transport = spec.constraints.transport is not None
    cities, out = [spec.start_city], []
    for n in range(spec.days):
        if n > 0:
            left = [c for c in sorted(world.cities) if c not in cities]
            reach = [c for c in left if not transport or lists.legs(cities[-1], c)]
            cities.append((reach or left)[0])
        out += [cities[-1], 0, 0, 1, 0] + ([0] if transport else [])
    return tuple(out)


def city_search(world: World, spec: TripSpec) -> Search | None:
    """City sequences with each day's cheapest valid day (see the module doc); None when a
    day has no city at all."""
    planner, c = Planner(world, spec), spec.constraints
    pools: list[list[DayPlan]] = []
    for n in range(1, spec.days + 1):
        names = [spec.start_city] if n == 1 else [x for x in world.cities if x != spec.start_city]
        found = [d for x in names if (d := planner.best_day(x, n)) is not None]
        pools.append(sorted(found, key=lambda d: (d.cost, d.city)))
    if any(not pool for pool in pools):
        return None

    def legs(choice: Choice) -> list[Connection | None]:
        return [None] + [
            planner.best_leg(a.city, b.city) if c.transport is not None else None
            for a, b in zip(choice, choice[1:])
        ]

    def penalty(choice: Choice) -> float:
        out = float(len(choice) - len({d.city for d in choice}))
        if c.transport is not None:
            services = legs(choice)[1:]
            out += sum(s is None for s in services)
            fares = sum(s.price for s in services if s is not None)
            if c.transport.budget is not None:
                out += max(0, fares - c.transport.budget) / c.transport.budget
        if c.total_budget is not None:
            cost = sum(d.cost for d in choice)
            out += max(0, cost - c.total_budget) / c.total_budget
        return out

    def answer(choice: Choice) -> Answer:
        return Plan(tuple(choice), tuple(legs(choice)), c.transport is not None).answer()

    return Search(pools, penalty, answer)


def spec_from_metadata(meta: dict[str, Any]) -> TripSpec:
    """The :class:`TripSpec` whose ``metadata()`` is ``meta`` (the task line's JSON form)."""
    c = meta.get("constraints") or {}
    bt = c.get("budget_tiers")
    weather, transport = c.get("weather"), c.get("transport")
    constraints = Constraints(
        budget_tiers=None
        if bt is None
        else BudgetTiers(
            days=tuple(bt["days"]),
            tiers=tuple(Tier(**t) for t in bt["tiers"]),
            require_tier=bt["require_tier"],
        ),
        weather=None
        if weather is None
        else WeatherRule(weather["rule"], tuple(weather["rainy_conditions"])),
        transport=None
        if transport is None
        else TransportRule(
            modes=tuple(transport["modes"]),
            max_hours=transport["max_hours"],
            arrive_by=transport["arrive_by"],
            budget=transport["budget"],
        ),
        **{
            k: c[k]
            for k in (
                "hotel_min_rating",
                "restaurant_min_rating",
                "attraction_min_rating",
                "max_ticket",
                "total_budget",
            )
            if k in c
        },
    )
    return TripSpec(meta["start_city"], meta["start_date"], meta["days"], constraints)
