"""Witness search: proves a trip spec solvable on a database by constructing a plan.

Cities never repeat, and every entity belongs to exactly one city, so a day's choices only
interact with other days through the two trip-wide sums (``total_budget`` and the transport
``budget``).  The search therefore takes the cheapest valid day in each city and the cheapest
valid leg between cities, and enumerates city sequences; the cheapest plan over all sequences
is a witness whenever any plan is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from itertools import combinations
from typing import Any

from envgym.envs.trip_planning.constraints import TripSpec
from envgym.envs.trip_planning.world import AttractionRow, Connection, World


@dataclass(frozen=True)
class DayPlan:
    city: str
    date: str
    hotel: str
    lunch: str
    attraction: str
    dinner: str
    cost: int  # hotel + lunch + dinner + ticket


@dataclass(frozen=True)
class Plan:
    days: tuple[DayPlan, ...]
    legs: tuple[Connection | None, ...]  # legs[i] brings you to day i's city; legs[0] is None
    transport: bool  # whether the spec asks for the transport field

    @property
    def cost(self) -> int:
        return sum(d.cost for d in self.days)

    @property
    def transport_cost(self) -> int:
        return sum(leg.price for leg in self.legs if leg is not None)

    def answer(self) -> list[dict[str, Any]]:
        """The submission in the seed's format (plus ``transport`` when the task asks)."""
        out = []
        for day, leg in zip(self.days, self.legs):
            row: dict[str, Any] = {
                "time": day.date,
                "city": day.city,
                "hotel": day.hotel,
                "afternoon_restaurant": day.lunch,
                "afternoon_attraction": day.attraction,
                "evening_restaurant": day.dinner,
            }
            if self.transport:
                row["transport"] = leg.code if leg is not None else None
            out.append(row)
        return out


class Planner:
    """Cheapest valid days and legs for one spec over one world (memoised)."""

    def __init__(self, world: World, spec: TripSpec) -> None:
        self.world = world
        self.spec = spec
        self.c = spec.constraints
        self.best_day = cache(self._best_day)
        self.best_leg = cache(self._best_leg)

    def rainy(self, city: str, day_date: str) -> bool:
        rule = self.c.weather
        return rule is not None and self.world.weather[(city, day_date)] in rule.rainy_conditions

    def _best_day(self, city: str, day_no: int) -> DayPlan | None:
        c = self.c
        day_date = self.spec.dates[day_no - 1]
        rainy = self.rainy(city, day_date)
        if rainy and c.weather is not None and c.weather.rule == "avoid_rain":
            return None
        tiers = c.budget_tiers if c.budget_tiers and day_no in c.budget_tiers.days else None
        restaurants = [
            r
            for r in self.world.restaurants[city]
            if c.restaurant_min_rating is None or r.rating >= c.restaurant_min_rating
        ]
        best: DayPlan | None = None
        for hotel in self.world.hotels[city]:
            if c.hotel_min_rating is not None and hotel.rating < c.hotel_min_rating:
                continue
            tier = tiers.tier_for(hotel.price) if tiers else None
            if tiers and tiers.require_tier and tier is None:
                continue
            attraction = self._cheapest_attraction(city, rainy, tier.ticket_lt if tier else None)
            if attraction is None:
                continue
            for a, b in combinations(restaurants, 2):
                total = a.price + b.price
                if tier is not None:
                    if tier.restaurants_total_lt is not None and total >= tier.restaurants_total_lt:
                        continue
                    floor = tier.restaurants_all_min_rating
                    if floor is not None and min(a.rating, b.rating) < floor:
                        continue
                    floor = tier.restaurants_any_min_rating
                    if floor is not None and max(a.rating, b.rating) < floor:
                        continue
                cost = hotel.price + total + attraction.ticket
                if best is None or cost < best.cost:
                    best = DayPlan(
                        city, day_date, hotel.name, a.name, attraction.name, b.name, cost
                    )
        return best

    def _cheapest_attraction(
        self, city: str, rainy: bool, ticket_lt: int | None
    ) -> AttractionRow | None:
        c = self.c
        ok = [
            a
            for a in self.world.attractions[city]
            if (c.attraction_min_rating is None or a.rating >= c.attraction_min_rating)
            and (c.max_ticket is None or a.ticket <= c.max_ticket)
            and (ticket_lt is None or a.ticket < ticket_lt)
            and (not rainy or a.indoor)
        ]
        return min(ok, key=lambda a: a.ticket, default=None)

    def _best_leg(self, src: str, dst: str) -> Connection | None:
        rule = self.c.transport
        if rule is None:
            return None
        ok = [
            s
            for s in self.world.connections.get((src, dst), ())
            if s.mode in rule.modes
            and (rule.max_hours is None or s.minutes <= rule.max_hours * 60)
            and (rule.arrive_by is None or s.arrival <= rule.arrive_by)
        ]
        return min(ok, key=lambda s: s.price, default=None)

    def plans(self) -> Iterator[Plan]:
        """Every city sequence that works when trip-wide budgets are ignored."""
        yield from self._extend((), ())

    def _extend(
        self, days: tuple[DayPlan, ...], legs: tuple[Connection | None, ...]
    ) -> Iterator[Plan]:
        n = len(days)
        if n == self.spec.days:
            yield Plan(days, legs, self.c.transport is not None)
            return
        visited = {d.city for d in days}
        candidates = (
            [self.spec.start_city] if n == 0 else [c for c in self.world.cities if c not in visited]
        )
        for city in candidates:
            leg = None
            if n > 0 and self.c.transport is not None:
                leg = self.best_leg(days[-1].city, city)
                if leg is None:
                    continue
            day = self.best_day(city, n + 1)
            if day is not None:
                yield from self._extend(days + (day,), legs + (leg,))

    def witness(self) -> Plan | None:
        """A plan meeting every constraint, budgets included; the cheapest one when any."""
        budget = self.c.total_budget
        fare = self.c.transport.budget if self.c.transport else None
        best: Plan | None = None
        for plan in self.plans():
            if budget is not None and plan.cost > budget:
                continue
            if fare is not None and plan.transport_cost > fare:
                continue
            if best is None or (plan.cost, plan.transport_cost) < (best.cost, best.transport_cost):
                best = plan
        return best
