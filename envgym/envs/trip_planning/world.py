"""A read-only, in-memory view of a generated database, for the host-side task generator."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from envgym.envs.trip_planning import data as db


@dataclass(frozen=True)
class HotelRow:
    name: str
    price: int
    rating: float


@dataclass(frozen=True)
class RestaurantRow:
    name: str
    price: int
    rating: float


@dataclass(frozen=True)
class AttractionRow:
    name: str
    ticket: int
    rating: float
    indoor: bool


@dataclass(frozen=True)
class Connection:
    code: str
    mode: str
    src: str
    dst: str
    departure: str
    arrival: str
    minutes: int
    price: int


@dataclass(frozen=True)
class World:
    cities: tuple[str, ...]
    hotels: dict[str, tuple[HotelRow, ...]]  # by city
    restaurants: dict[str, tuple[RestaurantRow, ...]]
    attractions: dict[str, tuple[AttractionRow, ...]]
    connections: dict[tuple[str, str], tuple[Connection, ...]]  # (from, to) → services
    weather: dict[tuple[str, str], str]  # (city, date) → condition
    dates: tuple[str, ...]  # every date that has weather for every city


def load_world(path: Path) -> World:
    engine = create_engine(f"sqlite:///{Path(path)}")
    try:
        with Session(engine) as s:
            names = {c.id: c.name for c in s.scalars(select(db.City).order_by(db.City.id))}
            hotels: dict[str, list[HotelRow]] = defaultdict(list)
            for h in s.scalars(select(db.Hotel).order_by(db.Hotel.id)):
                hotels[names[h.city_id]].append(HotelRow(h.name, h.price_per_night, h.rating))
            restaurants: dict[str, list[RestaurantRow]] = defaultdict(list)
            for r in s.scalars(select(db.Restaurant).order_by(db.Restaurant.id)):
                restaurants[names[r.city_id]].append(
                    RestaurantRow(r.name, r.avg_price_per_person, r.rating)
                )
            attractions: dict[str, list[AttractionRow]] = defaultdict(list)
            for a in s.scalars(select(db.Attraction).order_by(db.Attraction.id)):
                attractions[names[a.city_id]].append(
                    AttractionRow(a.name, a.ticket_price, a.rating, a.indoor)
                )
            connections: dict[tuple[str, str], list[Connection]] = defaultdict(list)
            for t in s.scalars(select(db.InterCityTransport).order_by(db.InterCityTransport.id)):
                src, dst = names[t.from_city_id], names[t.to_city_id]
                connections[(src, dst)].append(
                    Connection(
                        t.code,
                        t.mode,
                        src,
                        dst,
                        t.departure_time,
                        t.arrival_time,
                        t.duration_minutes,
                        t.price,
                    )
                )
            weather = {
                (names[w.city_id], w.date): w.condition
                for w in s.scalars(select(db.Weather).order_by(db.Weather.id))
            }
    finally:
        engine.dispose()
    cities = tuple(names.values())
    all_dates = sorted({d for _, d in weather})
    dates = tuple(d for d in all_dates if all((c, d) in weather for c in cities))
    return World(
        cities=cities,
        hotels={c: tuple(hotels[c]) for c in cities},
        restaurants={c: tuple(restaurants[c]) for c in cities},
        attractions={c: tuple(attractions[c]) for c in cities},
        connections={k: tuple(v) for k, v in connections.items()},
        weather=weather,
        dates=dates,
    )
