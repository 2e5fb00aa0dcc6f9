"""The calendar world on the host and the rules of a schedule (mirrored by the bundle code).

A schedule places meetings in the listed order on one date.  Given the start times everything
else is determined: a meeting's room is the smallest suitable free room (capacity, then floor,
then name) and a team representative is the alphabetically first team member who can attend.
So the only search is over start times, and a checker only has to replay these rules.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from envgym.envs.meeting_scheduling import data as db

GRID = 30
DAY_END = 24 * 60


def minutes(hhmm: str) -> int:
    return int(hhmm[:2]) * 60 + int(hhmm[3:5])


@dataclass(frozen=True)
class PersonRow:
    name: str
    team: str
    offset: int
    work: tuple[int, int]  # UTC minutes [start, end)


@dataclass(frozen=True)
class RoomRow:
    name: str
    capacity: int
    floor: int
    video: bool


@dataclass(frozen=True)
class World:
    people: dict[str, PersonRow]
    busy: dict[tuple[str, str], tuple[tuple[int, int], ...]]  # (person, date) -> UTC intervals
    away: frozenset[tuple[str, str]]  # (person, date) out of office
    rooms: tuple[RoomRow, ...]  # sorted by (capacity, floor, name)
    booked: dict[tuple[str, str], tuple[tuple[int, int], ...]]  # (room, date) -> intervals

    def can_attend(self, person: str, date: str, start: int, end: int, lunch: bool) -> bool:
        p = self.people[person]
        if (person, date) in self.away or start < p.work[0] or end > p.work[1]:
            return False
        if lunch and _overlap(start, end, 12 * 60 - 60 * p.offset, 13 * 60 - 60 * p.offset):
            return False
        return not any(_overlap(start, end, a, b) for a, b in self.busy.get((person, date), ()))

    def room_for(self, date: str, start: int, end: int, size: int, video: bool) -> str | None:
        for room in self.rooms:
            if (
                room.capacity >= size
                and (room.video or not video)
                and not any(
                    _overlap(start, end, a, b) for a, b in self.booked.get((room.name, date), ())
                )
            ):
                return room.name
        return None

    def representative(
        self, team: str, exclude: list[str], date: str, start: int, end: int, lunch: bool
    ) -> str | None:
        for name in sorted(
            n for n, p in self.people.items() if p.team == team and n not in exclude
        ):
            if self.can_attend(name, date, start, end, lunch):
                return name
        return None

    def schedules(self, meta: dict[str, Any], limit: int = 50) -> Iterator[list[dict[str, str]]]:
        """Valid schedules for a task's metadata, earliest starts first (at most ``limit``).

        Meetings may happen in any time order but never overlap, with ``buffer_min`` between
        any two, so an early slot taken by one meeting can be the only slot of another."""
        found = 0
        first = min(self.people[a].work[0] for m in meta["meetings"] for a in m["attendees"])
        day_start = first - first % GRID

        def extend(
            i: int, done: list[tuple[int, int, dict[str, str]]]
        ) -> Iterator[list[dict[str, str]]]:
            nonlocal found
            if i == len(meta["meetings"]):
                found += 1
                yield [row for _, _, row in done]
                return
            m = meta["meetings"][i]
            for start in range(day_start, DAY_END - m["duration_min"] + 1, GRID):
                if found >= limit:
                    return
                end = start + m["duration_min"]
                if any(
                    start < b + meta["buffer_min"] and a < end + meta["buffer_min"]
                    for a, b, _ in done
                ):
                    continue
                row = self.place(meta, m, start)
                if row is not None:
                    yield from extend(i + 1, done + [(start, end, row)])

        yield from extend(0, [])

    def place(self, meta: dict[str, Any], m: dict[str, Any], start: int) -> dict[str, str] | None:
        date, lunch, end = meta["date"], meta["protect_lunch"], start + m["duration_min"]
        if not all(self.can_attend(a, date, start, end, lunch) for a in m["attendees"]):
            return None
        row = {"meeting": m["id"], "start_utc": db.hhmm(start)}
        size = len(m["attendees"])
        if m.get("representative_team"):
            rep = self.representative(
                m["representative_team"], m["attendees"], date, start, end, lunch
            )
            if rep is None:
                return None
            row["representative"] = rep
            size += 1
        room = self.room_for(date, start, end, size, m["needs_video"])
        if room is None:
            return None
        row["room"] = room
        return row


def _overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


def load_world(path: Path) -> World:
    engine = create_engine(f"sqlite:///{Path(path)}")
    try:
        with Session(engine) as s:
            people = {}
            for p in s.scalars(select(db.Person).order_by(db.Person.name)):
                shift = 60 * p.tz_offset_hours
                people[p.name] = PersonRow(
                    p.name,
                    p.team,
                    p.tz_offset_hours,
                    (minutes(p.work_start_local) - shift, minutes(p.work_end_local) - shift),
                )
            busy: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
            for e in s.scalars(select(db.Event).order_by(db.Event.id)):
                busy[(e.person, e.date)].append((minutes(e.start_utc), minutes(e.end_utc)))
            away = frozenset((o.person, o.date) for o in s.scalars(select(db.OutOfOffice)))
            rooms = tuple(
                sorted(
                    (
                        RoomRow(r.name, r.capacity, r.floor, r.has_video)
                        for r in s.scalars(select(db.Room))
                    ),
                    key=lambda r: (r.capacity, r.floor, r.name),
                )
            )
            booked: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
            for b in s.scalars(select(db.RoomBooking).order_by(db.RoomBooking.id)):
                booked[(b.room, b.date)].append((minutes(b.start_utc), minutes(b.end_utc)))
    finally:
        engine.dispose()
    return World(
        people,
        {k: tuple(v) for k, v in busy.items()},
        away,
        rooms,
        {k: tuple(v) for k, v in booked.items()},
    )
