"""The calendar database: SQLAlchemy models and a seeded generator writing ``db.sqlite``.

All stored times are UTC ``HH:MM`` on a 30-minute grid; working hours are local time, shifted by
each person's whole-hour UTC offset.  Same seed, same rows (one ``random.Random``, fixed order,
VACUUM).
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path

from sqlalchemy import Boolean, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from envgym.envs.procedural_kit.build import write_rows

FIRST_WEEKDAY = date(2025, 3, 3)  # a Monday
DAYS = 5
TEAMS = ("Platform", "Design", "Sales", "Research", "Support")
FIRST = (
    "Aiko",
    "Bilal",
    "Carmen",
    "Dmitri",
    "Elif",
    "Femi",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Luca",
    "Mira",
    "Nils",
    "Olga",
    "Pavel",
    "Rania",
    "Sven",
    "Talia",
    "Ugo",
    "Vera",
    "Wiktor",
    "Yara",
    "Zane",
)
LAST = (
    "Ahn",
    "Brandt",
    "Costa",
    "Diallo",
    "Engel",
    "Fischer",
    "Gomez",
    "Horvat",
    "Iqbal",
    "Juarez",
    "Keller",
    "Lopez",
    "Mensah",
    "Nakamura",
    "Olsen",
    "Perez",
    "Ruiz",
    "Stein",
    "Tran",
    "Vogel",
)
ROOM_NAMES = (
    "Alder",
    "Birch",
    "Cedar",
    "Dogwood",
    "Elm",
    "Fir",
    "Ginkgo",
    "Hazel",
    "Juniper",
    "Larch",
    "Maple",
    "Oak",
)
TITLES = (
    "1:1",
    "standup",
    "design review",
    "customer call",
    "planning",
    "interview",
    "focus time",
    "all-hands prep",
    "incident review",
    "lunch & learn",
)


class Base(DeclarativeBase):
    pass


class Person(Base):
    __tablename__ = "people"
    name: Mapped[str] = mapped_column(String, primary_key=True)
    team: Mapped[str] = mapped_column(String, index=True)
    tz_offset_hours: Mapped[int] = mapped_column(Integer)  # local = UTC + offset
    work_start_local: Mapped[str] = mapped_column(String)
    work_end_local: Mapped[str] = mapped_column(String)


class Event(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    person: Mapped[str] = mapped_column(String, index=True)
    date: Mapped[str] = mapped_column(String)
    start_utc: Mapped[str] = mapped_column(String)
    end_utc: Mapped[str] = mapped_column(String)
    title: Mapped[str] = mapped_column(String)


class OutOfOffice(Base):
    __tablename__ = "out_of_office"
    person: Mapped[str] = mapped_column(String, primary_key=True)
    date: Mapped[str] = mapped_column(String, primary_key=True)


class Room(Base):
    __tablename__ = "rooms"
    name: Mapped[str] = mapped_column(String, primary_key=True)
    capacity: Mapped[int] = mapped_column(Integer)
    floor: Mapped[int] = mapped_column(Integer)
    has_video: Mapped[bool] = mapped_column(Boolean)


class RoomBooking(Base):
    __tablename__ = "room_bookings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    room: Mapped[str] = mapped_column(String, index=True)
    date: Mapped[str] = mapped_column(String)
    start_utc: Mapped[str] = mapped_column(String)
    end_utc: Mapped[str] = mapped_column(String)


def hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def dates() -> list[str]:
    return [(FIRST_WEEKDAY + timedelta(days=i)).isoformat() for i in range(DAYS)]


def write_db(path: Path, seed: int) -> Path:
    """Generate the database for ``seed`` into ``path`` (which must not exist yet)."""
    return write_rows(path, Base, _rows(random.Random(f"meeting-scheduling:{seed}")))


def _rows(rng: random.Random) -> list[Base]:
    rows: list[Base] = []
    people: list[Person] = []
    names: set[str] = set()
    for team in TEAMS:
        offsets = rng.sample([-1, 0, 1, 2, 3], 3)
        for _ in range(rng.randint(4, 6)):
            while (name := f"{rng.choice(FIRST)} {rng.choice(LAST)}") in names:
                pass
            names.add(name)
            start = rng.choice([8, 9, 9, 10])
            people.append(
                Person(
                    name=name,
                    team=team,
                    tz_offset_hours=rng.choice(offsets),
                    work_start_local=hhmm(start * 60),
                    work_end_local=hhmm((start + 8) * 60),
                )
            )
    rows += people
    for p in people:
        begin = int(p.work_start_local[:2]) * 60 - p.tz_offset_hours * 60
        for day in dates():
            if rng.random() < 0.06:
                rows.append(OutOfOffice(person=p.name, date=day))
                continue
            t = begin + 30 * rng.randint(0, 3)
            while t < begin + 8 * 60 - 30:
                length = 30 * rng.choice([1, 1, 2, 2, 3, 4])
                if rng.random() < 0.45:
                    rows.append(
                        Event(
                            person=p.name,
                            date=day,
                            start_utc=hhmm(t),
                            end_utc=hhmm(min(t + length, begin + 8 * 60)),
                            title=rng.choice(TITLES),
                        )
                    )
                t += length + 30 * rng.randint(0, 2)
    for name in ROOM_NAMES[: rng.randint(8, 12)]:
        rows.append(
            Room(
                name=name,
                capacity=rng.choice([2, 4, 4, 6, 6, 8, 10, 12, 16]),
                floor=rng.randint(1, 4),
                has_video=rng.random() < 0.5,
            )
        )
        for day in dates():
            t = 6 * 60 + 30 * rng.randint(0, 4)
            while t < 19 * 60:
                length = 30 * rng.randint(1, 4)
                if rng.random() < 0.45:
                    rows.append(
                        RoomBooking(
                            room=name, date=day, start_utc=hhmm(t), end_utc=hhmm(t + length)
                        )
                    )
                t += length + 30 * rng.randint(0, 3)
    return rows
