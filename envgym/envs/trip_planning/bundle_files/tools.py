"""Trip-planning tools: the 15 tools of DeepSeek-V3.2 §3.2.3 over the bundle's ``db.sqlite``.

Listing tools return each entity's name with its headline numbers (price, rating); the other
details — an attraction's kind and whether it is indoors, a restaurant's cuisine, a city's
coordinates — come from the ``get_infos_by_*`` tools.  Names are exact and unique across the
whole database, so a hotel's name identifies the hotel.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
from typing import Any

from envgym.runtime import sqlite

_RAINY = ("light rain", "moderate rain", "heavy rain", "thunderstorm")
_FIELDS = (
    "time",
    "city",
    "hotel",
    "afternoon_restaurant",
    "afternoon_attraction",
    "evening_restaurant",
)

# Keyword → SQL expression, per entity table (aliased ``e``; its city is ``c``).
_INFOS: dict[str, dict[str, str]] = {
    "hotels": {
        "city": "c.name",
        "district": "e.district",
        "price_per_night": "e.price_per_night",
        "rating": "e.rating",
        "stars": "e.stars",
    },
    "restaurants": {
        "city": "c.name",
        "district": "e.district",
        "cuisine": "e.cuisine",
        "avg_price_per_person": "e.avg_price_per_person",
        "rating": "e.rating",
    },
    "attractions": {
        "city": "c.name",
        "district": "e.district",
        "kind": "e.kind",
        "indoor": "e.indoor",
        "ticket_price": "e.ticket_price",
        "rating": "e.rating",
        "recommended_hours": "e.recommended_hours",
        "opening_hours": "e.opening_hours",
    },
    "cities": {
        "province": "e.province",
        "region": "e.region",
        "latitude": "e.latitude",
        "longitude": "e.longitude",
        "population_millions": "e.population_millions",
        "description": "e.description",
        "local_cuisine": "e.local_cuisine",
    },
}
_KIND = {
    "hotels": "hotel",
    "restaurants": "restaurant",
    "attractions": "attraction",
    "cities": "city",
}
_LISTER = {
    "hotels": "get_all_hotels_by_city(city)",
    "restaurants": "get_all_restaurants_by_city(city)",
    "attractions": "get_all_attractions_by_city(city)",
    "cities": "get_all_cities()",
}


def get_all_cities() -> list[str]:
    """Get all cities from the database.

    Returns:
        The names of every city, alphabetically. Use these exact names in other tools.
    """
    return [r[0] for r in sqlite().execute("SELECT name FROM cities ORDER BY name")]


def get_all_hotels_by_city(city: str) -> list[dict[str, Any]]:
    """Get all hotels for given city.

    Args:
        city: Exact city name, as returned by get_all_cities.

    Returns:
        One entry per hotel: name, price_per_night (CNY) and rating (out of 5).
    """
    return _list("hotels", city, "e.price_per_night AS price_per_night, e.rating AS rating")


def get_all_restaurants_by_city(city: str) -> list[dict[str, Any]]:
    """Get all restaurants for given city.

    Args:
        city: Exact city name, as returned by get_all_cities.

    Returns:
        One entry per restaurant: name, avg_price_per_person (CNY) and rating (out of 5).
    """
    return _list(
        "restaurants", city, "e.avg_price_per_person AS avg_price_per_person, e.rating AS rating"
    )


def get_all_attractions_by_city(city: str) -> list[dict[str, Any]]:
    """Get all attractions for given city.

    Args:
        city: Exact city name, as returned by get_all_cities.

    Returns:
        One entry per attraction: name, ticket_price (CNY, 0 = free) and rating (out of 5).
        Whether it is indoors, and its kind, come from get_infos_by_attraction.
    """
    return _list("attractions", city, "e.ticket_price AS ticket_price, e.rating AS rating")


def get_city_by_hotel(hotel: str) -> str:
    """Get city for given hotel name.

    Args:
        hotel: Exact hotel name.
    """
    return _city_of("hotels", hotel)


def get_city_by_restaurant(restaurant: str) -> str:
    """Get city for given restaurant name.

    Args:
        restaurant: Exact restaurant name.
    """
    return _city_of("restaurants", restaurant)


def get_city_by_attraction(attraction: str) -> str:
    """Get city for given attraction name.

    Args:
        attraction: Exact attraction name.
    """
    return _city_of("attractions", attraction)


def get_infos_by_hotel(info_keywords: list[str], hotel: str) -> dict[str, Any]:
    """Get specified infos for given hotel.

    Args:
        info_keywords: Fields to return, any of: city, district, price_per_night (CNY per
            night), rating (out of 5), stars (hotel class, 1-5). An empty list returns all.
        hotel: Exact hotel name.
    """
    return _infos("hotels", info_keywords, hotel)


def get_infos_by_restaurant(info_keywords: list[str], restaurant: str) -> dict[str, Any]:
    """Get specified infos for given restaurant.

    Args:
        info_keywords: Fields to return, any of: city, district, cuisine,
            avg_price_per_person (CNY), rating (out of 5). An empty list returns all.
        restaurant: Exact restaurant name.
    """
    return _infos("restaurants", info_keywords, restaurant)


def get_infos_by_attraction(info_keywords: list[str], attraction: str) -> dict[str, Any]:
    """Get specified infos for given attraction.

    Args:
        info_keywords: Fields to return, any of: city, district, kind (museum, park, ...),
            indoor (true/false), ticket_price (CNY, 0 = free), rating (out of 5),
            recommended_hours, opening_hours. An empty list returns all.
        attraction: Exact attraction name.
    """
    return _infos("attractions", info_keywords, attraction)


def get_infos_by_city(info_keywords: list[str], city: str) -> dict[str, Any]:
    """Get specified infos for given city.

    Args:
        info_keywords: Fields to return, any of: province, region, latitude, longitude,
            population_millions, description, local_cuisine. An empty list returns all.
        city: Exact city name, as returned by get_all_cities.
    """
    return _infos("cities", info_keywords, city)


def get_city_transport(city: str) -> list[dict[str, Any]]:
    """Get all intra-city transport options for given city.

    Args:
        city: Exact city name, as returned by get_all_cities.

    Returns:
        One entry per mode (metro, bus, taxi): typical_fare (CNY), avg_trip_minutes and
        service_hours.
    """
    cid = _city_id(city)
    rows = sqlite().execute(
        "SELECT mode, typical_fare, avg_trip_minutes, service_hours FROM city_transport "
        "WHERE city_id = ? ORDER BY id",
        (cid,),
    )
    return [dict(r) for r in rows]


def get_inter_city_transport(from_city: str, to_city: str) -> list[dict[str, Any]]:
    """Get all transports between given city pair.

    Direct services only, running daily; an empty list means there is no direct service.

    Args:
        from_city: Exact name of the departure city.
        to_city: Exact name of the arrival city.

    Returns:
        One entry per service: code (e.g. G1234), mode (train, flight or bus),
        departure_time and arrival_time (HH:MM, same day), duration_minutes, price (CNY).
    """
    src, dst = _city_id(from_city), _city_id(to_city)
    if src == dst:
        raise ValueError(f"from_city and to_city are both {from_city!r}; pick two different cities")
    rows = sqlite().execute(
        "SELECT code, mode, departure_time, arrival_time, duration_minutes, price "
        "FROM inter_city_transport WHERE from_city_id = ? AND to_city_id = ? "
        "ORDER BY departure_time, code",
        (src, dst),
    )
    return [dict(r) for r in rows]


def get_weather_by_city_date(city: str, date: str) -> dict[str, Any]:
    """Get weather for given city-date pair.

    Args:
        city: Exact city name, as returned by get_all_cities.
        date: The day, as YYYY-MM-DD (e.g. 2025-10-01).

    Returns:
        condition (sunny, cloudy, light rain, thunderstorm, ...), rainy (true for any rain or
        thunderstorm), temp_high and temp_low (°C), precipitation_mm.
    """
    cid = _city_id(city)
    try:
        day = _dt.date.fromisoformat(date.strip()).isoformat()
    except ValueError:
        raise ValueError(f"date must look like 2025-10-01 (YYYY-MM-DD), got {date!r}") from None
    row = (
        sqlite()
        .execute(
            "SELECT condition, temp_high, temp_low, precipitation_mm FROM weather "
            "WHERE city_id = ? AND date = ?",
            (cid, day),
        )
        .fetchone()
    )
    if row is None:
        lo, hi = sqlite().execute("SELECT MIN(date), MAX(date) FROM weather").fetchone()
        raise ValueError(f"no forecast for {day}; forecasts cover {lo} to {hi}")
    return {
        "city": city,
        "date": day,
        "condition": row["condition"],
        "rainy": row["condition"] in _RAINY,
        "temp_high": row["temp_high"],
        "temp_low": row["temp_low"],
        "precipitation_mm": row["precipitation_mm"],
    }


def submit_result(answer_text: str) -> str:
    """Submit the final answer content.

    Args:
        answer_text: The itinerary as a JSON array with one object per day, each with the keys
            time (YYYY-MM-DD), city, hotel, afternoon_restaurant, afternoon_attraction and
            evening_restaurant (plus transport when the task asks for it), using the exact names
            the tools return.
    """
    if not isinstance(answer_text, str):
        raise ValueError("answer_text must be a string holding the itinerary as JSON")
    try:
        days = json.loads(_strip_fence(answer_text))
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"answer_text is not valid JSON ({exc}); send the itinerary as a JSON "
            "array of day objects"
        ) from None
    if not isinstance(days, list) or not days:
        raise ValueError("answer_text must be a non-empty JSON array with one object per day")
    allowed = set(_FIELDS) | {"transport"}
    for i, day in enumerate(days, start=1):
        if not isinstance(day, dict):
            raise ValueError(f"day {i} is a {type(day).__name__}, not a JSON object")
        missing = [k for k in _FIELDS if k not in day]
        if missing:
            raise ValueError(
                f"day {i} is missing {', '.join(missing)}; every day needs " + ", ".join(_FIELDS)
            )
        extra = sorted(set(day) - allowed)
        if extra:
            raise ValueError(
                f"day {i} has unknown keys {', '.join(extra)}; allowed: "
                + ", ".join(sorted(allowed))
            )
        bad = [k for k in _FIELDS if not isinstance(day[k], str) or not day[k].strip()]
        if bad:
            raise ValueError(f"day {i}: {', '.join(bad)} must be non-empty strings")
        if not (day.get("transport") is None or isinstance(day["transport"], str)):
            raise ValueError(f"day {i}: transport must be a service code string or null")
        try:
            _dt.date.fromisoformat(day["time"])
        except ValueError:
            raise ValueError(
                f"day {i}: time must be a date like 2025-10-01, got {day['time']!r}"
            ) from None
    return (
        f"Itinerary received: {len(days)} day(s), {days[0]['time']} to {days[-1]['time']}. "
        "It will now be checked against your requirements."
    )


def _strip_fence(text: str) -> str:
    """Accept a JSON document wrapped in a Markdown code fence, as models often send it."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    return body


def _unknown(table: str, name: str) -> ValueError:
    names = [r[0] for r in sqlite().execute(f"SELECT name FROM {table}")]
    close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(
        f"no {_KIND[table]} named {name!r}.{hint} Use {_LISTER[table]} to list the exact names."
    )


def _city_id(city: str) -> int:
    row = sqlite().execute("SELECT id FROM cities WHERE name = ?", (city,)).fetchone()
    if row is None:
        raise _unknown("cities", city)
    return int(row[0])


def _list(table: str, city: str, columns: str) -> list[dict[str, Any]]:
    cid = _city_id(city)
    rows = sqlite().execute(
        f"SELECT e.name AS name, {columns} FROM {table} e WHERE e.city_id = ? ORDER BY e.name",
        (cid,),
    )
    return [dict(r) for r in rows]


def _city_of(table: str, name: str) -> str:
    row = (
        sqlite()
        .execute(
            f"SELECT c.name FROM {table} e JOIN cities c ON c.id = e.city_id WHERE e.name = ?",
            (name,),
        )
        .fetchone()
    )
    if row is None:
        raise _unknown(table, name)
    return str(row[0])


def _infos(table: str, info_keywords: list[str], name: str) -> dict[str, Any]:
    fields = _INFOS[table]
    keywords = [info_keywords] if isinstance(info_keywords, str) else list(info_keywords)
    wanted = [str(k).strip() for k in keywords] or list(fields)
    unknown = [k for k in wanted if k not in fields]
    if unknown:
        raise ValueError(
            f"unknown info keyword(s) {', '.join(repr(k) for k in unknown)} for a "
            f"{_KIND[table]}; valid keywords: {', '.join(fields)}"
        )
    join = "" if table == "cities" else " JOIN cities c ON c.id = e.city_id"
    select = ", ".join(f"{fields[k]} AS k{i}" for i, k in enumerate(wanted))
    row = (
        sqlite()
        .execute(f"SELECT {select} FROM {table} e{join} WHERE e.name = ?", (name,))
        .fetchone()
    )
    if row is None:
        raise _unknown(table, name)
    out: dict[str, Any] = {"name": name}
    for i, key in enumerate(wanted):
        out[key] = bool(row[i]) if key == "indoor" else row[i]
    return out
