"""Trip specifications: the constraint kinds, and their JSON form in ``task["metadata"]``.

The bundle's verifier and gold solution read the JSON form only (they cannot import this
package), so :meth:`TripSpec.metadata` is the contract; docs/TRIP_PLANNING.md lists it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

from envgym.envs.trip_planning import reference as ref

BASE_FIELDS: tuple[str, ...] = (
    "time",
    "city",
    "hotel",
    "afternoon_restaurant",
    "afternoon_attraction",
    "evening_restaurant",
)
TRANSPORT_FIELD = "transport"


@dataclass(frozen=True)
class Tier:
    """Conditions that apply when the day's hotel costs ``min_price <= price < max_price``."""

    label: str
    min_price: int
    max_price: int | None = None  # None: no upper bound
    restaurants_total_lt: int | None = None  # lunch + dinner, per person
    restaurants_all_min_rating: float | None = None
    restaurants_any_min_rating: float | None = None
    ticket_lt: int | None = None

    def covers(self, price: int) -> bool:
        return price >= self.min_price and (self.max_price is None or price < self.max_price)


@dataclass(frozen=True)
class BudgetTiers:
    days: tuple[int, ...]  # 1-based day numbers the tiers apply to
    tiers: tuple[Tier, ...]
    # True: the hotel on those days must fall in some tier (no hotel below the lowest tier).
    require_tier: bool = True

    def tier_for(self, price: int) -> Tier | None:
        return next((t for t in self.tiers if t.covers(price)), None)


@dataclass(frozen=True)
class WeatherRule:
    rule: Literal["rain_indoor", "avoid_rain"]
    rainy_conditions: tuple[str, ...] = ref.RAIN_CONDITIONS


@dataclass(frozen=True)
class TransportRule:
    """Every leg (the morning trip from the previous day's city) is a direct service."""

    modes: tuple[str, ...] = ("train",)
    max_hours: float | None = None
    arrive_by: str | None = None  # HH:MM, inclusive
    budget: int | None = None  # total fare of all legs, inclusive


@dataclass(frozen=True)
class Constraints:
    budget_tiers: BudgetTiers | None = None
    hotel_min_rating: float | None = None
    restaurant_min_rating: float | None = None
    attraction_min_rating: float | None = None
    max_ticket: int | None = None  # every attraction ticket <= this
    total_budget: int | None = None  # hotels + meals + tickets over the trip, inclusive
    weather: WeatherRule | None = None
    transport: TransportRule | None = None


@dataclass(frozen=True)
class TripSpec:
    start_city: str
    start_date: str  # YYYY-MM-DD
    days: int
    constraints: Constraints = field(default_factory=Constraints)

    @property
    def dates(self) -> tuple[str, ...]:
        first = date.fromisoformat(self.start_date)
        return tuple((first + timedelta(days=i)).isoformat() for i in range(self.days))

    @property
    def fields(self) -> tuple[str, ...]:
        return BASE_FIELDS + ((TRANSPORT_FIELD,) if self.constraints.transport else ())

    def metadata(self) -> dict[str, Any]:
        return {
            "start_city": self.start_city,
            "start_date": self.start_date,
            "days": self.days,
            "dates": list(self.dates),
            "fields": list(self.fields),
            "constraints": constraints_json(self.constraints),
            "declared_rules": declared_rules(self.constraints),
        }


BASE_RULES: tuple[str, ...] = (
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
)


def declared_rules(c: Constraints) -> list[str]:
    """The check names a trip with these constraints calls for, written from the spec (not from
    the verifier): ``envgym check`` fails a verifier that does not report every one of them."""
    rules = list(BASE_RULES)
    if c.budget_tiers is not None:
        rules += [f"day{n}_budget_tier" for n in c.budget_tiers.days]
    rules += [
        k
        for k in ("hotel_min_rating", "restaurant_min_rating", "attraction_min_rating")
        if getattr(c, k) is not None
    ]
    rules += ["ticket_cap"] if c.max_ticket is not None else []
    rules += ["total_budget"] if c.total_budget is not None else []
    rules += [f"weather_{c.weather.rule}"] if c.weather is not None else []
    if c.transport is not None:
        t = c.transport
        rules += ["transport_connects", "transport_mode"]
        rules += [
            name
            for name, value in (
                ("transport_max_hours", t.max_hours),
                ("transport_arrive_by", t.arrive_by),
                ("transport_budget", t.budget),
            )
            if value is not None
        ]
    return rules


def constraints_json(c: Constraints) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if c.budget_tiers is not None:
        bt = c.budget_tiers
        out["budget_tiers"] = {
            "days": list(bt.days),
            "require_tier": bt.require_tier,
            "tiers": [
                {
                    "label": t.label,
                    "min_price": t.min_price,
                    "max_price": t.max_price,
                    "restaurants_total_lt": t.restaurants_total_lt,
                    "restaurants_all_min_rating": t.restaurants_all_min_rating,
                    "restaurants_any_min_rating": t.restaurants_any_min_rating,
                    "ticket_lt": t.ticket_lt,
                }
                for t in bt.tiers
            ],
        }
    for key in (
        "hotel_min_rating",
        "restaurant_min_rating",
        "attraction_min_rating",
        "max_ticket",
        "total_budget",
    ):
        if getattr(c, key) is not None:
            out[key] = getattr(c, key)
    if c.weather is not None:
        out["weather"] = {
            "rule": c.weather.rule,
            "rainy_conditions": list(c.weather.rainy_conditions),
        }
    if c.transport is not None:
        t = c.transport
        out["transport"] = {
            "modes": list(t.modes),
            "max_hours": t.max_hours,
            "arrive_by": t.arrive_by,
            "budget": t.budget,
        }
    return out


# The seed's worked example (DeepSeek-V3.2 §3.2.3), day-2 tiers exactly as stated there.
SEED_TIERS: tuple[Tier, ...] = (
    Tier(
        "luxury", 800, None, restaurants_total_lt=350, restaurants_all_min_rating=4.0, ticket_lt=120
    ),
    Tier("mid-to-high", 500, 800, restaurants_any_min_rating=4.0, ticket_lt=180),
    Tier("affordable", 200, 500, restaurants_any_min_rating=3.2),
)
HANGZHOU_3DAY = TripSpec(
    start_city="Hangzhou",
    start_date="2025-10-01",
    days=3,
    constraints=Constraints(
        budget_tiers=BudgetTiers(days=(2,), tiers=SEED_TIERS, require_tier=True)
    ),
)
