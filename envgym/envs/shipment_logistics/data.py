"""The logistics database: SQLAlchemy models and a seeded generator writing ``db.sqlite``.

Hubs on a plane; lanes join nearby hubs (each direction its own lane, several modes per pair);
shipments are drawn between hubs that are a few hops apart.  Same seed, same rows.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from sqlalchemy import Boolean, Float, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from envgym.envs.procedural_kit.build import write_rows

CITIES = (
    "Aldmere",
    "Brackwater",
    "Corlis",
    "Dunhaven",
    "Eastmarch",
    "Falkirk Rise",
    "Glenport",
    "Harrowgate",
    "Ironvale",
    "Jessop",
    "Kingsreach",
    "Lowmoor",
    "Marrow Bay",
    "Northfold",
    "Oakhurst",
    "Pellham",
)
# mode -> (km per hour, cost per kg per 100 km, capacity range kg, hazmat share)
MODES = {
    "truck": (70, 0.09, (400, 1800), 0.7),
    "rail": (90, 0.05, (800, 3000), 0.5),
    "air": (600, 0.45, (200, 700), 0.0),
}


class Base(DeclarativeBase):
    pass


class Hub(Base):
    __tablename__ = "hubs"
    code: Mapped[str] = mapped_column(String, primary_key=True)
    city: Mapped[str] = mapped_column(String, unique=True)
    x_km: Mapped[int] = mapped_column(Integer)
    y_km: Mapped[int] = mapped_column(Integer)
    handling_hours: Mapped[int] = mapped_column(Integer)  # added at every intermediate hub


class Lane(Base):
    __tablename__ = "lanes"
    lane_id: Mapped[str] = mapped_column(String, primary_key=True)
    origin: Mapped[str] = mapped_column(String, index=True)
    destination: Mapped[str] = mapped_column(String)
    mode: Mapped[str] = mapped_column(String)
    transit_hours: Mapped[int] = mapped_column(Integer)
    cost_per_kg: Mapped[float] = mapped_column(Float)  # USD, two decimals
    capacity_kg: Mapped[int] = mapped_column(Integer)
    hazmat_ok: Mapped[bool] = mapped_column(Boolean)


class Shipment(Base):
    __tablename__ = "shipments"
    shipment_id: Mapped[str] = mapped_column(String, primary_key=True)
    origin: Mapped[str] = mapped_column(String)
    destination: Mapped[str] = mapped_column(String)
    weight_kg: Mapped[int] = mapped_column(Integer)
    hazmat: Mapped[bool] = mapped_column(Boolean)
    deadline_hours: Mapped[int] = mapped_column(Integer)  # door to door, from dispatch


def write_db(path: Path, seed: int) -> Path:
    """Generate the database for ``seed`` into ``path`` (which must not exist yet)."""
    return write_rows(path, Base, _rows(random.Random(f"shipment-logistics:{seed}")))


def _rows(rng: random.Random) -> list[Base]:
    hubs = []
    for city in rng.sample(CITIES, rng.randint(11, 14)):
        hubs.append(
            Hub(
                code=f"H-{city[:3].upper()}",
                city=city,
                x_km=rng.randint(0, 1200),
                y_km=rng.randint(0, 800),
                handling_hours=rng.randint(1, 4),
            )
        )
    hubs.sort(key=lambda h: h.code)
    rows: list[Base] = list(hubs)
    lanes: list[Lane] = []
    # Every near pair is joined both ways (each direction its own lane, price and capacity):
    # a one-way network strands hubs, and out-and-back detours are what a revisit looks like.
    pairs: set[tuple[int, int]] = set()
    for i, a in enumerate(hubs):
        near = sorted((h for h in hubs if h is not a), key=lambda h: _km(a, h))[: rng.randint(3, 4)]
        pairs |= {(i, hubs.index(b)) for b in near} | {(hubs.index(b), i) for b in near}
    for i, j in sorted(pairs):
        a, b = hubs[i], hubs[j]
        for mode, (speed, rate, (lo, hi), hazmat) in MODES.items():
            if mode == "air" and _km(a, b) < 250 or rng.random() < 0.35:
                continue
            km = _km(a, b) * rng.uniform(1.05, 1.3)
            lanes.append(
                Lane(
                    lane_id="",
                    origin=a.code,
                    destination=b.code,
                    mode=mode,
                    transit_hours=max(1, round(km / speed + (2 if mode == "air" else 0))),
                    cost_per_kg=round(rate * km / 100 * rng.uniform(0.8, 1.25) + 0.05, 2),
                    capacity_kg=50 * rng.randint(lo // 50, hi // 50),
                    hazmat_ok=rng.random() < hazmat,
                )
            )
    for i, lane in enumerate(
        sorted(lanes, key=lambda x: (x.origin, x.destination, x.mode)), start=101
    ):
        lane.lane_id = f"LN-{i}"
    rows += lanes
    # Shipments travel eight busy corridors (sometimes starting one hub off), so several of
    # them want the same cheap lanes and lane capacity binds (tasks.py draws such groups).
    corridors = [rng.sample(hubs, 2) for _ in range(8)]
    for i in range(120):
        a, b = rng.choice(corridors)
        if rng.random() < 0.3:
            a = rng.choice([h for h in hubs if h is not b])
        weight = 10 * rng.randint(10, 120)
        direct = _km(a, b)
        rows.append(
            Shipment(
                shipment_id=f"SHP-{5000 + 7 * i + rng.randint(0, 6)}",
                origin=a.code,
                destination=b.code,
                weight_kg=weight,
                hazmat=rng.random() < 0.25,
                deadline_hours=max(8, round(direct / 60) + rng.randint(2, 16)),
            )
        )
    return rows


def _km(a: Hub, b: Hub) -> float:
    return math.hypot(a.x_km - b.x_km, a.y_km - b.y_km)
