"""The trip-planning database: SQLAlchemy models and a seeded generator writing ``db.sqlite``.

Same seed → byte-identical file: rows are generated in a fixed order from one
``random.Random(seed)``, nothing depends on the clock or on set/dict iteration of unordered
data, and the file is ``VACUUM``-ed so page layout does not depend on insert history.  (The
SQLite header records the library version, so bytes are identical per SQLite version.)
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

from sqlalchemy import Boolean, Float, ForeignKey, Integer, String, UniqueConstraint, create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.schema import CreateIndex, CreateTable

from envgym.envs.trip_planning import reference as ref

DEFAULT_N_CITIES = 14
WEATHER_START = date(2025, 9, 25)
WEATHER_DAYS = 20  # 2025-09-25 .. 2025-10-14, covering the October holiday week with margin


class Base(DeclarativeBase):
    pass


class City(Base):
    __tablename__ = "cities"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String, unique=True)
    province: Mapped[str] = mapped_column(String)
    region: Mapped[str] = mapped_column(String)
    latitude: Mapped[float] = mapped_column(Float)
    longitude: Mapped[float] = mapped_column(Float)
    population_millions: Mapped[float] = mapped_column(Float)
    description: Mapped[str] = mapped_column(String)
    local_cuisine: Mapped[str] = mapped_column(String)


class Hotel(Base):
    __tablename__ = "hotels"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String, unique=True)
    city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    district: Mapped[str] = mapped_column(String)
    price_per_night: Mapped[int] = mapped_column(Integer)  # CNY
    rating: Mapped[float] = mapped_column(Float)  # 1.0 .. 5.0, one decimal
    stars: Mapped[int] = mapped_column(Integer)


class Restaurant(Base):
    __tablename__ = "restaurants"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String, unique=True)
    city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    district: Mapped[str] = mapped_column(String)
    cuisine: Mapped[str] = mapped_column(String)
    avg_price_per_person: Mapped[int] = mapped_column(Integer)  # CNY
    rating: Mapped[float] = mapped_column(Float)


class Attraction(Base):
    __tablename__ = "attractions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String, unique=True)
    city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    district: Mapped[str] = mapped_column(String)
    kind: Mapped[str] = mapped_column(String)
    indoor: Mapped[bool] = mapped_column(Boolean)
    ticket_price: Mapped[int] = mapped_column(Integer)  # CNY, 0 = free
    rating: Mapped[float] = mapped_column(Float)
    recommended_hours: Mapped[float] = mapped_column(Float)
    opening_hours: Mapped[str] = mapped_column(String)


class CityTransport(Base):
    __tablename__ = "city_transport"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    mode: Mapped[str] = mapped_column(String)  # metro | bus | taxi
    typical_fare: Mapped[int] = mapped_column(Integer)  # CNY for a typical cross-town trip
    avg_trip_minutes: Mapped[int] = mapped_column(Integer)
    service_hours: Mapped[str] = mapped_column(String)


class InterCityTransport(Base):
    __tablename__ = "inter_city_transport"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    code: Mapped[str] = mapped_column(String, unique=True)  # identifies the service
    mode: Mapped[str] = mapped_column(String)  # train | flight | bus
    from_city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    to_city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    departure_time: Mapped[str] = mapped_column(String)  # HH:MM, runs daily
    arrival_time: Mapped[str] = mapped_column(String)  # HH:MM, same day
    duration_minutes: Mapped[int] = mapped_column(Integer)
    price: Mapped[int] = mapped_column(Integer)  # CNY, economy / second class


class Weather(Base):
    __tablename__ = "weather"
    __table_args__ = (UniqueConstraint("city_id", "date"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    date: Mapped[str] = mapped_column(String)  # YYYY-MM-DD
    condition: Mapped[str] = mapped_column(String)
    temp_high: Mapped[int] = mapped_column(Integer)  # °C
    temp_low: Mapped[int] = mapped_column(Integer)
    precipitation_mm: Mapped[float] = mapped_column(Float)


def write_db(path: Path, *, seed: int = 0, n_cities: int = DEFAULT_N_CITIES) -> Path:
    """Generate the database for ``seed`` into ``path`` (which must not exist yet)."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} already exists; the generator never overwrites a database")
    if not 2 <= n_cities <= len(ref.CITIES):
        raise ValueError(f"n_cities must be between 2 and {len(ref.CITIES)}, got {n_cities}")
    rows = _Generator(random.Random(seed), ref.CITIES[:n_cities]).rows()
    engine = create_engine(f"sqlite:///{path}")
    try:
        _create_schema(engine)
        with Session(engine) as session:
            session.add_all(rows)
            session.commit()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM")
    finally:
        engine.dispose()
    return path


class _Generator:
    """Draws every row from one RNG in a fixed order (see the module docstring)."""

    def __init__(self, rng: random.Random, cities: tuple[ref.CityRef, ...]) -> None:
        self.rng = rng
        self.cities = cities
        self.names: set[str] = {c.name for c in cities}  # entity names are unique db-wide
        self.codes: set[str] = set()

    def rows(self) -> list[Base]:
        out: list[Base] = []
        for cid, city in enumerate(self.cities, start=1):
            out.append(
                City(
                    id=cid,
                    name=city.name,
                    province=city.province,
                    region=city.region,
                    latitude=city.lat,
                    longitude=city.lon,
                    population_millions=city.population_millions,
                    description=city.description,
                    local_cuisine=city.local_cuisine,
                )
            )
        for cid, city in enumerate(self.cities, start=1):
            out += self._hotels(cid, city)
            out += self._restaurants(cid, city)
            out += self._attractions(cid, city)
            out += self._city_transport(cid, city)
            out += self._weather(cid, city)
        out += self._inter_city()
        return _with_ids(out)

    def _unique(self, make: Callable[[], str]) -> str:
        for _ in range(200):
            name = make()
            if name not in self.names:
                self.names.add(name)
                return name
        raise RuntimeError("could not draw a unique entity name; word pools are too small")

    def _rating(self, centre: float) -> float:
        return round(min(4.9, max(2.5, self.rng.gauss(centre, 0.35))), 1)

    def _hotels(self, cid: int, city: ref.CityRef) -> list[Hotel]:
        rng = self.rng
        # One hotel per main price band first, so every city can satisfy a tiered budget.
        bands = [(200, 499), (500, 799), (800, 1800)]
        bands += [
            rng.choice([(90, 199), (200, 499), (200, 499), (500, 799), (800, 1800)])
            for _ in range(rng.randint(3, 5))
        ]
        areas = rng.sample(city.areas, len(bands))
        hotels = []
        for area, (lo, hi) in zip(areas, bands):
            price = rng.randint(lo, hi)
            styles = ref.HOSTEL_STYLES if price < 200 else ref.HOTEL_STYLES
            name = self._unique(lambda a=area, s=styles: f"{a} {rng.choice(s)}")
            frac = min(1.0, price / 1500)
            stars = 1 if price < 200 else 2 + min(3, int(price // 300))
            hotels.append(
                Hotel(
                    name=name,
                    city_id=cid,
                    district=area,
                    price_per_night=price,
                    rating=self._rating(3.3 + 1.2 * frac),
                    stars=stars,
                )
            )
        return hotels

    def _restaurants(self, cid: int, city: ref.CityRef) -> list[Restaurant]:
        rng = self.rng
        out = []
        for i in range(rng.randint(8, 10)):
            if rng.random() < 0.3:
                cuisine = city.local_cuisine
                noun = f"{city.local_cuisine} {rng.choice(ref.LOCAL_CUISINE_NOUNS)}"
            else:
                cuisine, noun = rng.choice(ref.CUISINES)
            prefixes = ref.RESTAURANT_OWNERS + city.areas
            name = self._unique(lambda n=noun: f"{rng.choice(prefixes)} {n}")  # noqa: B023 - called within this iteration
            frac = rng.random()
            price = int(round(math.exp(math.log(25) + frac * (math.log(420) - math.log(25)))))
            # Ratings follow price loosely, so the cheapest meal is rarely the best-rated one;
            # the first two restaurants of every city sit below and above every rating threshold
            # the prompts use (2.5-2.9 and 4.5-4.9), so each threshold binds.
            if i == 0:
                price, rating = rng.randint(25, 60), rng.choice([2.5, 2.6, 2.7, 2.8, 2.9])
            elif i == 1:
                price, rating = rng.randint(120, 420), rng.choice([4.5, 4.6, 4.7, 4.8, 4.9])
            else:
                rating = round(min(4.9, max(2.5, rng.gauss(3.3 + 1.1 * frac, 0.45))), 1)
            out.append(
                Restaurant(
                    name=name,
                    city_id=cid,
                    district=rng.choice(city.areas),
                    cuisine=cuisine,
                    avg_price_per_person=price,
                    rating=rating,
                )
            )
        return out

    def _attractions(self, cid: int, city: ref.CityRef) -> list[Attraction]:
        rng = self.rng
        indoor = [k for k in ref.ATTRACTION_KINDS if k[2]]
        outdoor = [k for k in ref.ATTRACTION_KINDS if not k[2]]
        kinds = rng.sample(indoor, 2) + rng.sample(outdoor, 2)
        kinds += [rng.choice(ref.ATTRACTION_KINDS) for _ in range(rng.randint(2, 4))]
        out = []
        for kind, noun, is_indoor, lo, hi in kinds:
            name = self._unique(lambda n=noun: f"{rng.choice(city.areas)} {n}")
            ticket = 0 if rng.random() < 0.15 and lo == 0 else 5 * round(rng.randint(lo, hi) / 5)
            opening = "09:00-17:00" if is_indoor else rng.choice(["08:00-17:30", "all day"])
            out.append(
                Attraction(
                    name=name,
                    city_id=cid,
                    district=name.removesuffix(" " + noun),
                    kind=kind,
                    indoor=is_indoor,
                    ticket_price=ticket,
                    rating=self._rating(4.2),
                    recommended_hours=rng.choice([1.0, 1.5, 2.0, 2.5, 3.0, 4.0]),
                    opening_hours=opening,
                )
            )
        return out

    def _city_transport(self, cid: int, city: ref.CityRef) -> list[CityTransport]:
        rng = self.rng
        out = []
        if city.has_metro:
            out.append(
                CityTransport(
                    city_id=cid,
                    mode="metro",
                    typical_fare=rng.randint(3, 6),
                    avg_trip_minutes=rng.randint(25, 45),
                    service_hours="06:00-23:00",
                )
            )
        out.append(
            CityTransport(
                city_id=cid,
                mode="bus",
                typical_fare=2,
                avg_trip_minutes=rng.randint(35, 60),
                service_hours="05:30-22:30",
            )
        )
        out.append(
            CityTransport(
                city_id=cid,
                mode="taxi",
                typical_fare=rng.randint(25, 60),
                avg_trip_minutes=rng.randint(15, 35),
                service_hours="24 hours",
            )
        )
        return out

    def _weather(self, cid: int, city: ref.CityRef) -> list[Weather]:
        rng = self.rng
        out = []
        rainy = False
        for offset in range(WEATHER_DAYS):
            p = min(0.8, city.rain_probability + (0.3 if rainy else 0.0))
            rainy = rng.random() < p
            high = 30.5 - 0.55 * (city.lat - 23.0) + rng.gauss(0.0, 1.5) - (2.5 if rainy else 0.0)
            low = high - rng.uniform(5.0, 9.0)
            if rainy:
                condition = rng.choices(ref.RAIN_CONDITIONS, weights=[5, 3, 1, 2])[0]
                lo_mm, hi_mm = {
                    "light rain": (0.5, 9.9),
                    "moderate rain": (10.0, 24.9),
                    "heavy rain": (25.0, 60.0),
                    "thunderstorm": (5.0, 40.0),
                }[condition]
                mm = round(rng.uniform(lo_mm, hi_mm), 1)
            else:
                condition = rng.choices(ref.DRY_CONDITIONS, weights=[5, 4, 4, 2, 1])[0]
                mm = 0.0
            day = (WEATHER_START + timedelta(days=offset)).isoformat()
            out.append(
                Weather(
                    city_id=cid,
                    date=day,
                    condition=condition,
                    temp_high=round(high),
                    temp_low=round(low),
                    precipitation_mm=mm,
                )
            )
        return out

    def _code(self, prefix: str, digits: int) -> str:
        for _ in range(1000):
            code = f"{prefix}{self.rng.randint(1, 10**digits - 1)}"
            if code not in self.codes:
                self.codes.add(code)
                return code
        raise RuntimeError(f"ran out of {prefix} service codes")

    def _inter_city(self) -> list[InterCityTransport]:
        rng = self.rng
        out: list[InterCityTransport] = []
        ids = range(1, len(self.cities) + 1)
        for a, b in ((a, b) for a in ids for b in ids if a < b):
            ca, cb = self.cities[a - 1], self.cities[b - 1]
            km = _great_circle_km(ca, cb)
            # Decide per unordered pair (so a route runs both ways), then draw each direction.
            rail = km * 1.25 <= 2200 and rng.random() >= 0.12
            fly = ca.has_airport and cb.has_airport and km >= 450
            coach = km * 1.3 <= 420
            for src, dst in ((a, b), (b, a)):
                if rail:
                    out += self._trains(src, dst, km * 1.25)
                if fly:
                    out += self._services(
                        src,
                        dst,
                        "flight",
                        rng.randint(1, 3),
                        hours=lambda: 0.9 + km / 760,  # noqa: B023 - called within this iteration
                        price=lambda: 10 * round((km * rng.uniform(0.55, 1.1) + 60) / 10),  # noqa: B023 - called within this iteration
                        code=lambda: self._code(rng.choice(ref.AIRLINES), 4),
                    )
                if coach:
                    road = km * 1.3
                    out += self._services(
                        src,
                        dst,
                        "bus",
                        rng.randint(1, 2),
                        hours=lambda: road / rng.uniform(60, 75) + 0.3,  # noqa: B023 - called within this iteration
                        price=lambda: round(road * rng.uniform(0.3, 0.4)),  # noqa: B023 - called within this iteration
                        code=lambda: self._code("BUS", 3),
                    )
        return out

    def _trains(self, src: int, dst: int, rail_km: float) -> list[InterCityTransport]:
        rng = self.rng
        out = []
        if rail_km <= 1400:
            out += self._services(
                src,
                dst,
                "train",
                rng.randint(1, 3),
                hours=lambda: rail_km / rng.uniform(230, 290) + rng.uniform(0.2, 0.4),
                price=lambda: round(rail_km * rng.uniform(0.42, 0.5) + 5),
                code=lambda: self._code("G", 4),
            )
        if rng.random() < 0.4:
            out += self._services(
                src,
                dst,
                "train",
                1,
                hours=lambda: rail_km / rng.uniform(170, 200) + 0.3,
                price=lambda: round(rail_km * rng.uniform(0.3, 0.36) + 5),
                code=lambda: self._code("D", 4),
            )
        if rail_km <= 1200 and rng.random() < 0.4:
            out += self._services(
                src,
                dst,
                "train",
                1,
                hours=lambda: rail_km / rng.uniform(70, 90) + 0.2,
                price=lambda: round(rail_km * 0.16 + 10),
                code=lambda: self._code("K", 4),
            )
        return out

    def _services(
        self,
        src: int,
        dst: int,
        mode: str,
        count: int,
        *,
        hours: Callable[[], float],
        price: Callable[[], float],
        code: Callable[[], str],
    ) -> list[InterCityTransport]:
        out = []
        for _ in range(count):
            minutes = max(20, 5 * round(hours() * 60 / 5))
            latest = min(21 * 60, 23 * 60 + 55 - minutes)
            if latest < 6 * 60:
                continue  # would arrive after midnight: timetables here are same-day only
            depart = 5 * (self.rng.randint(6 * 60, latest) // 5)
            out.append(
                InterCityTransport(
                    code=code(),
                    mode=mode,
                    from_city_id=src,
                    to_city_id=dst,
                    departure_time=_hhmm(depart),
                    arrival_time=_hhmm(depart + minutes),
                    duration_minutes=minutes,
                    price=int(price()),
                )
            )
        return out


def _with_ids(rows: list[Base]) -> list[Base]:
    """Explicit primary keys in generation order, so ids never depend on flush ordering."""
    counters: dict[type, int] = {}
    for row in rows:
        counters[type(row)] = counters.get(type(row), 0) + 1
        row.id = counters[type(row)]  # type: ignore[attr-defined]
    return rows


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _great_circle_km(a: ref.CityRef, b: ref.CityRef) -> float:
    lat1, lon1, lat2, lon2 = map(math.radians, (a.lat, a.lon, b.lat, b.lon))
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * 6371.0 * math.asin(math.sqrt(h))


def _create_schema(engine: Engine) -> None:
    """``create_all`` with a fixed order.  A table's indexes are a set, so ``create_all`` emits
    them in an order that varies from process to process (two on ``inter_city_transport``), and
    the database's bytes — hence the bundle hash of one seed — varied with it."""
    with engine.begin() as conn:
        for table in Base.metadata.sorted_tables:
            conn.execute(CreateTable(table))
            for index in sorted(table.indexes, key=lambda i: str(i.name)):
                conn.execute(CreateIndex(index))
