"""Verifier for trip-planning tasks: every constraint in ``task["metadata"]``, checked in the db.

One check per constraint, plus format checks.  Names are stable so that rewards can be broken
down per constraint: valid_json, day_count, fields_present, dates, entities_exist, start_city,
no_repeated_{city,restaurant}, hotel_in_city, restaurants_in_city,
attraction_in_city, day<N>_budget_tier, {hotel,restaurant,attraction}_min_rating, ticket_cap,
total_budget, weather_rain_indoor | weather_avoid_rain, transport_connects, transport_mode,
transport_max_hours, transport_arrive_by, transport_budget.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envgym.runtime import sqlite

_BASE_FIELDS = (
    "time",
    "city",
    "hotel",
    "afternoon_restaurant",
    "afternoon_attraction",
    "evening_restaurant",
)
_MEALS = (("afternoon_restaurant", "lunch"), ("evening_restaurant", "dinner"))


@dataclass(frozen=True)
class _Hotel:
    name: str
    city: str
    price: int
    rating: float


@dataclass(frozen=True)
class _Restaurant:
    name: str
    city: str
    price: int
    rating: float


@dataclass(frozen=True)
class _Attraction:
    name: str
    city: str
    ticket: int
    rating: float
    indoor: bool


@dataclass(frozen=True)
class _Service:
    code: str
    mode: str
    src: str
    dst: str
    arrival: str
    minutes: int
    price: int


Day = dict[str, Any]
CheckFn = Callable[[list[Day], "_Facts", dict[str, Any]], list[str]]


def verify_trip(submission: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """Check a submitted itinerary against every constraint of the task.

    Checks run in stages (format → shape → entities → constraints) and a failed stage ends the
    report there: a later check cannot be judged on an answer it cannot read, and reporting it
    as failed would hide which rule the answer broke.  So every reported check can fail alone,
    which is what ``envgym check``'s per-rule witnesses prove (docs/CHECK.md).
    """
    meta = task.get("metadata") or {}
    checks: list[dict[str, Any]] = []
    days, problem = _read(submission)
    if days is None:
        return {"checks": [_check("valid_json", [problem])]}
    checks.append(_check("valid_json", []))
    count = [] if len(days) == meta["days"] else [f"expected {meta['days']} days, got {len(days)}"]
    checks.append(_check("day_count", count))
    checks.append(_check("fields_present", _fields(days, meta)))
    if not all(c["passed"] for c in checks):
        return {"checks": checks}
    checks.append(
        _check(
            "dates",
            [
                f"day {i}: time is {d['time']!r}, expected {want!r}"
                for i, (d, want) in enumerate(zip(days, meta["dates"]), 1)
                if d["time"] != want
            ],
        )
    )
    facts = _Facts(days)
    checks.append(_check("entities_exist", facts.missing))
    if facts.missing:
        return {"checks": checks}
    checks += [_check(name, fn(days, facts, meta)) for name, fn in _constraint_plan(meta)]
    return {"checks": checks}


def _check(name: str, failures: list[str]) -> dict[str, Any]:
    return {"name": name, "passed": not failures, "detail": "; ".join(failures)}


def _strip_fence(text: str) -> str:
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    return body


def _read(submission: Any) -> tuple[list[Day] | None, str]:
    text = submission.get("answer_text") if isinstance(submission, dict) else None
    if isinstance(text, list):
        value: Any = text
    elif not isinstance(text, str) or not text.strip():
        return None, "no answer_text was submitted"
    else:
        try:
            value = json.loads(_strip_fence(text))
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            return None, f"answer_text is not valid JSON ({type(exc).__name__})"
    if not isinstance(value, list) or not value or not all(isinstance(d, dict) for d in value):
        return None, "answer_text must be a non-empty JSON array of day objects"
    return value, ""


def _fields(days: list[Day], meta: dict[str, Any]) -> list[str]:
    fields = meta.get("fields") or list(_BASE_FIELDS)
    out = []
    for i, day in enumerate(days, 1):
        missing = [k for k in fields if k not in day]
        extra = sorted(set(day) - set(fields))
        wrong = [k for k in fields if k in day and k != "transport" and not isinstance(day[k], str)]
        if "transport" in day and not (
            day["transport"] is None or isinstance(day["transport"], str)
        ):
            wrong.append("transport")
        if missing:
            out.append(f"day {i}: missing {', '.join(missing)}")
        if extra:
            out.append(f"day {i}: unexpected {', '.join(extra)}")
        if wrong:
            out.append(f"day {i}: {', '.join(wrong)} must be strings")
    return out


class _Facts:
    """The database rows the submission names (unknown names are simply absent)."""

    def __init__(self, days: list[Day]) -> None:
        self.cities = {r[0] for r in sqlite().execute("SELECT name FROM cities")}
        self.hotels = {
            r[0]: _Hotel(*r)
            for r in _rows(
                "SELECT e.name, c.name, e.price_per_night, e.rating FROM hotels e",
                _names(days, "hotel"),
            )
        }
        self.restaurants = {
            r[0]: _Restaurant(*r)
            for r in _rows(
                "SELECT e.name, c.name, e.avg_price_per_person, e.rating FROM restaurants e",
                _names(days, "afternoon_restaurant", "evening_restaurant"),
            )
        }
        self.attractions = {
            r[0]: _Attraction(r[0], r[1], r[2], r[3], bool(r[4]))
            for r in _rows(
                "SELECT e.name, c.name, e.ticket_price, e.rating, e.indoor FROM attractions e",
                _names(days, "afternoon_attraction"),
            )
        }
        codes = _names(days, "transport")
        marks = ",".join("?" * len(codes))
        self.services = {
            r[0]: _Service(*r)
            for r in sqlite().execute(
                "SELECT t.code, t.mode, a.name, b.name, t.arrival_time, t.duration_minutes, t.price "
                "FROM inter_city_transport t JOIN cities a ON a.id = t.from_city_id "
                f"JOIN cities b ON b.id = t.to_city_id WHERE t.code IN ({marks})",
                codes,
            )
        }
        self.missing = []
        for i, day in enumerate(days, 1):
            for key, kind, known in (
                ("city", "city", self.cities),
                ("hotel", "hotel", self.hotels),
                ("afternoon_restaurant", "restaurant", self.restaurants),
                ("afternoon_attraction", "attraction", self.attractions),
                ("evening_restaurant", "restaurant", self.restaurants),
            ):
                if day[key] not in known:
                    self.missing.append(f"day {i}: no {kind} named {day[key]!r}")
            if day.get("transport") is not None and day["transport"] not in self.services:
                self.missing.append(f"day {i}: no transport service {day['transport']!r}")

    def weather(self, city: str, date: str) -> str | None:
        row = (
            sqlite()
            .execute(
                "SELECT w.condition FROM weather w JOIN cities c ON c.id = w.city_id "
                "WHERE c.name = ? AND w.date = ?",
                (city, date),
            )
            .fetchone()
        )
        return None if row is None else str(row[0])


def _names(days: list[Day], *keys: str) -> list[str]:
    return sorted({d[k] for d in days for k in keys if isinstance(d.get(k), str)})


def _rows(select: str, names: list[str]) -> list[Any]:
    marks = ",".join("?" * len(names))
    sql = f"{select} JOIN cities c ON c.id = e.city_id WHERE e.name IN ({marks})"
    return list(sqlite().execute(sql, names))


# ---- constraint checks: each returns the list of violations (empty = passed) ----


def _constraint_plan(meta: dict[str, Any]) -> list[tuple[str, CheckFn]]:
    c = meta.get("constraints") or {}
    plan: list[tuple[str, CheckFn]] = [
        ("start_city", _start_city),
        # No repeated hotel or attraction needs no check of its own: each belongs to one city,
        # so repeating one repeats its city (no_repeated_city) or leaves it (the *_in_city checks).
        ("no_repeated_city", _no_repeat("city", ("city",))),
        (
            "no_repeated_restaurant",
            _no_repeat("restaurant", ("afternoon_restaurant", "evening_restaurant")),
        ),
        ("hotel_in_city", _in_city("hotels", ("hotel",))),
        (
            "restaurants_in_city",
            _in_city("restaurants", ("afternoon_restaurant", "evening_restaurant")),
        ),
        ("attraction_in_city", _in_city("attractions", ("afternoon_attraction",))),
    ]
    for n in (c.get("budget_tiers") or {}).get("days", []):
        plan.append((f"day{n}_budget_tier", _tier_check(n)))
    for key in ("hotel_min_rating", "restaurant_min_rating", "attraction_min_rating"):
        if c.get(key) is not None:
            plan.append((key, _rating_floor(key)))
    if c.get("max_ticket") is not None:
        plan.append(("ticket_cap", _ticket_cap))
    if c.get("total_budget") is not None:
        plan.append(("total_budget", _total_budget))
    if c.get("weather"):
        plan.append(("weather_" + c["weather"]["rule"], _weather))
    transport = c.get("transport")
    if transport:
        plan.append(("transport_connects", _connects))
        plan.append(
            (
                "transport_mode",
                _leg_rule(
                    lambda s, t: s.mode in t["modes"],
                    lambda s, t: f"is a {s.mode}, allowed: {', '.join(t['modes'])}",
                ),
            )
        )
        if transport.get("max_hours") is not None:
            plan.append(
                (
                    "transport_max_hours",
                    _leg_rule(
                        lambda s, t: s.minutes <= t["max_hours"] * 60,
                        lambda s, t: f"takes {s.minutes} min, more than {t['max_hours']:g} h",
                    ),
                )
            )
        if transport.get("arrive_by") is not None:
            plan.append(
                (
                    "transport_arrive_by",
                    _leg_rule(
                        lambda s, t: s.arrival <= t["arrive_by"],
                        lambda s, t: f"arrives at {s.arrival}, after {t['arrive_by']}",
                    ),
                )
            )
        if transport.get("budget") is not None:
            plan.append(("transport_budget", _transport_budget))
    return plan


def _start_city(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
    want = meta["start_city"]
    return (
        []
        if days[0]["city"] == want
        else [f"day 1 is in {days[0]['city']!r}; the trip starts in {want}"]
    )


def _no_repeat(kind: str, keys: tuple[str, ...]) -> CheckFn:
    def check(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
        seen: dict[str, list[str]] = {}
        for i, day in enumerate(days, 1):
            for key in keys:
                slot = f"day {i}" + (f" {key.split('_')[0]}" if len(keys) > 1 else "")
                seen.setdefault(day[key], []).append(slot)
        return [
            f"{kind} {name!r} is used more than once ({', '.join(slots)})"
            for name, slots in seen.items()
            if len(slots) > 1
        ]

    return check


def _in_city(table: str, keys: tuple[str, ...]) -> CheckFn:
    def check(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
        known = getattr(facts, table)
        out = []
        for i, day in enumerate(days, 1):
            for key in keys:
                row = known.get(day[key])
                if row is None:
                    out.append(f"day {i}: {key} {day[key]!r} does not exist")
                elif row.city != day["city"]:
                    out.append(f"day {i}: {key} {day[key]!r} is in {row.city}, not {day['city']}")
        return out

    return check


def _tier_check(n: int) -> CheckFn:
    def check(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
        bt = meta["constraints"]["budget_tiers"]
        day = days[n - 1]
        hotel = facts.hotels.get(day["hotel"])
        lunch, dinner = (facts.restaurants.get(day[k]) for k, _ in _MEALS)
        sight = facts.attractions.get(day["afternoon_attraction"])
        if hotel is None:
            return [
                f"day {n}: hotel {day['hotel']!r} does not exist, so its budget tier is unknown"
            ]
        tier = next(
            (
                t
                for t in bt["tiers"]
                if hotel.price >= t["min_price"]
                and (t["max_price"] is None or hotel.price < t["max_price"])
            ),
            None,
        )
        if tier is None:
            lowest = min(t["min_price"] for t in bt["tiers"])
            return (
                [
                    f"day {n}: hotel {hotel.name!r} costs {hotel.price} CNY, outside every budget "
                    f"tier (the cheapest starts at {lowest} CNY)"
                ]
                if bt.get("require_tier")
                else []
            )
        band = (
            f"≥ {tier['min_price']}"
            if tier["max_price"] is None
            else f"{tier['min_price']}–{tier['max_price']}"
        )
        why = f"because the hotel costs {hotel.price} CNY ({tier['label']} tier, {band})"
        out = []
        if lunch is None or dinner is None:
            out.append(
                f"day {n}: a restaurant does not exist, so the {tier['label']} tier cannot hold"
            )
        else:
            total = lunch.price + dinner.price
            if (
                tier.get("restaurants_total_lt") is not None
                and total >= tier["restaurants_total_lt"]
            ):
                out.append(
                    f"day {n}: restaurants cost {total} CNY ({lunch.price} + {dinner.price}), "
                    f"must be < {tier['restaurants_total_lt']} {why}"
                )
            floor = tier.get("restaurants_all_min_rating")
            for r in (lunch, dinner):
                if floor is not None and r.rating < floor:
                    out.append(
                        f"day {n}: restaurant {r.name!r} is rated {r.rating}, both must be "
                        f"≥ {floor} {why}"
                    )
            floor = tier.get("restaurants_any_min_rating")
            if floor is not None and max(lunch.rating, dinner.rating) < floor:
                out.append(
                    f"day {n}: neither restaurant is rated ≥ {floor} ({lunch.rating}, "
                    f"{dinner.rating}) {why}"
                )
        cap = tier.get("ticket_lt")
        if cap is not None:
            if sight is None:
                out.append(
                    f"day {n}: the attraction does not exist, so its ticket cannot be < {cap}"
                )
            elif sight.ticket >= cap:
                out.append(
                    f"day {n}: attraction {sight.name!r} costs {sight.ticket} CNY, must be "
                    f"< {cap} {why}"
                )
        return out

    return check


def _rating_floor(key: str) -> CheckFn:
    slots = {
        "hotel_min_rating": (("hotel", "hotels"),),
        "restaurant_min_rating": (
            ("afternoon_restaurant", "restaurants"),
            ("evening_restaurant", "restaurants"),
        ),
        "attraction_min_rating": (("afternoon_attraction", "attractions"),),
    }[key]

    def check(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
        floor = meta["constraints"][key]
        out = []
        for i, day in enumerate(days, 1):
            for field, table in slots:
                row = getattr(facts, table).get(day[field])
                if row is None:
                    out.append(f"day {i}: {field} {day[field]!r} does not exist")
                elif row.rating < floor:
                    out.append(
                        f"day {i}: {field} {row.name!r} is rated {row.rating}, must be ≥ {floor}"
                    )
        return out

    return check


def _ticket_cap(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
    cap = meta["constraints"]["max_ticket"]
    out = []
    for i, day in enumerate(days, 1):
        sight = facts.attractions.get(day["afternoon_attraction"])
        if sight is None:
            out.append(f"day {i}: attraction {day['afternoon_attraction']!r} does not exist")
        elif sight.ticket > cap:
            out.append(
                f"day {i}: attraction {sight.name!r} costs {sight.ticket} CNY, more than {cap}"
            )
    return out


def _total_budget(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
    budget = meta["constraints"]["total_budget"]
    total, unknown = 0, []
    for i, day in enumerate(days, 1):
        for field, table, attr in (
            ("hotel", "hotels", "price"),
            ("afternoon_restaurant", "restaurants", "price"),
            ("evening_restaurant", "restaurants", "price"),
            ("afternoon_attraction", "attractions", "ticket"),
        ):
            row = getattr(facts, table).get(day[field])
            if row is None:
                unknown.append(
                    f"day {i}: {field} {day[field]!r} does not exist, so its price is unknown"
                )
            else:
                total += getattr(row, attr)
    if unknown:
        return unknown
    return (
        []
        if total <= budget
        else [f"hotels, meals and tickets cost {total} CNY, more than the {budget} CNY budget"]
    )


def _weather(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
    rule = meta["constraints"]["weather"]
    out = []
    for i, (day, date) in enumerate(zip(days, meta["dates"]), 1):
        condition = facts.weather(day["city"], date)
        if condition is None:
            out.append(f"day {i}: no forecast for {day['city']!r} on {date}")
            continue
        if condition not in rule["rainy_conditions"]:
            continue
        if rule["rule"] == "avoid_rain":
            out.append(f"day {i}: the forecast for {day['city']} on {date} is {condition}")
        else:
            sight = facts.attractions.get(day["afternoon_attraction"])
            if sight is None or not sight.indoor:
                out.append(
                    f"day {i}: {condition} in {day['city']} on {date}, but "
                    f"{day['afternoon_attraction']!r} is not an indoor attraction"
                )
    return out


def _connects(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
    out = []
    if days[0].get("transport") is not None:
        out.append(
            f"day 1: transport must be null (the trip starts in {meta['start_city']}), "
            f"got {days[0]['transport']!r}"
        )
    for i in range(1, len(days)):
        code, prev, here = days[i].get("transport"), days[i - 1]["city"], days[i]["city"]
        if code is None and here == prev:
            continue  # staying put needs no service (the repeat itself is no_repeated_city's)
        service = facts.services.get(code) if code is not None else None
        if service is None:
            out.append(f"day {i + 1}: no direct service from {prev} to {here} named {code!r}")
        elif (service.src, service.dst) != (prev, here):
            out.append(
                f"day {i + 1}: {code} runs {service.src} → {service.dst}, not {prev} → {here}"
            )
    return out


def _leg_rule(
    ok: Callable[[_Service, dict[str, Any]], bool], why: Callable[[_Service, dict[str, Any]], str]
) -> CheckFn:
    def check(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
        rule = meta["constraints"]["transport"]
        out = []
        for i, service in enumerate(_services(days, facts), 2):
            if service is not None and not ok(service, rule):
                out.append(f"day {i}: {service.code} {why(service, rule)}")
        return out

    return check


def _services(days: list[Day], facts: _Facts) -> list[_Service | None]:
    """The service each day after the first names (None: it names none).

    A day that changes city with no service is the route's defect alone (transport_connects): the
    leg rules and the fare budget judge the services named.  Reporting it under every transport
    rule too would hide which rule it breaks, and no witness could then fail each rule alone.
    (Unknown codes never get here: entities_exist ends the report first.)
    """
    return [facts.services.get(d.get("transport") or "") for d in days[1:]]


def _transport_budget(days: list[Day], facts: _Facts, meta: dict[str, Any]) -> list[str]:
    budget = meta["constraints"]["transport"]["budget"]
    total = sum(s.price for s in _services(days, facts) if s is not None)
    return [] if total <= budget else [f"transport fares add up to {total} CNY, more than {budget}"]
