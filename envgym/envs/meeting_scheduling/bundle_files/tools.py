"""Calendar tools over the bundle's ``db.sqlite``: people, their events, rooms and bookings.

Stored times are UTC ``HH:MM``; working hours are local (``local = UTC + tz_offset_hours``).
"""

from __future__ import annotations

from typing import Any

from envgym.runtime import sqlite


def list_teams() -> list[str]:
    """All team names, alphabetically."""
    return [r[0] for r in sqlite().execute("SELECT DISTINCT team FROM people ORDER BY team")]


def list_people(team: str | None = None) -> list[dict[str, str]]:
    """People, alphabetically, optionally only one team.

    Args:
        team: A team name from list_teams; omit for everyone.

    Returns:
        One entry per person: name and team.
    """
    if team is None:
        rows = sqlite().execute("SELECT name, team FROM people ORDER BY name")
    else:
        rows = sqlite().execute(
            "SELECT name, team FROM people WHERE team = ? ORDER BY name", (team,)
        )
    return [dict(r) for r in rows]


def get_person(name: str) -> dict[str, Any]:
    """A person's team, time zone and working hours.

    Args:
        name: The person's full name.

    Returns:
        name, team, tz_offset_hours (local time = UTC + offset), work_start_local and
        work_end_local (HH:MM, local time).
    """
    row = sqlite().execute("SELECT * FROM people WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise KeyError(f"no person named {name!r}")
    return dict(row)


def get_events(person: str, date: str) -> list[dict[str, str]]:
    """A person's calendar events on one date, by start time.

    Args:
        person: The person's full name.
        date: YYYY-MM-DD.

    Returns:
        One entry per event: start_utc, end_utc (HH:MM, UTC) and title.
    """
    get_person(person)
    rows = sqlite().execute(
        "SELECT start_utc, end_utc, title FROM events WHERE person = ? AND date = ? "
        "ORDER BY start_utc",
        (person, date),
    )
    return [dict(r) for r in rows]


def is_out_of_office(person: str, date: str) -> bool:
    """Whether a person is out of office (unavailable all day) on a date.

    Args:
        person: The person's full name.
        date: YYYY-MM-DD.
    """
    get_person(person)
    return (
        sqlite()
        .execute("SELECT 1 FROM out_of_office WHERE person = ? AND date = ?", (person, date))
        .fetchone()
        is not None
    )


def list_rooms(min_capacity: int = 1, needs_video: bool = False) -> list[dict[str, Any]]:
    """Meeting rooms, smallest first (then lower floor, then name).

    Args:
        min_capacity: Only rooms seating at least this many people.
        needs_video: Only rooms with video conferencing.

    Returns:
        One entry per room: name, capacity, floor and has_video.
    """
    rows = sqlite().execute(
        "SELECT name, capacity, floor, has_video FROM rooms WHERE capacity >= ? "
        "AND (has_video = 1 OR ? = 0) ORDER BY capacity, floor, name",
        (min_capacity, int(needs_video)),
    )
    return [dict(r, has_video=bool(r["has_video"])) for r in rows]


def get_room_bookings(room: str, date: str) -> list[dict[str, str]]:
    """A room's existing bookings on one date, by start time.

    Args:
        room: The room's name.
        date: YYYY-MM-DD.

    Returns:
        One entry per booking: start_utc and end_utc (HH:MM, UTC).
    """
    if sqlite().execute("SELECT 1 FROM rooms WHERE name = ?", (room,)).fetchone() is None:
        raise KeyError(f"no room named {room!r}")
    rows = sqlite().execute(
        "SELECT start_utc, end_utc FROM room_bookings WHERE room = ? AND date = ? "
        "ORDER BY start_utc",
        (room, date),
    )
    return [dict(r) for r in rows]


def local_to_utc(local_time: str, tz_offset_hours: int) -> str:
    """Convert a local HH:MM to UTC HH:MM for a whole-hour offset (same day assumed).

    Args:
        local_time: HH:MM in the person's local time.
        tz_offset_hours: The person's offset (local = UTC + offset).
    """
    total = int(local_time[:2]) * 60 + int(local_time[3:5]) - 60 * tz_offset_hours
    if not 0 <= total < 24 * 60:
        raise ValueError("the converted time falls on another day")
    return f"{total // 60:02d}:{total % 60:02d}"


def submit_result(answer_text: str) -> str:
    """Submit the final schedule; this ends the task.

    Args:
        answer_text: The schedule as JSON text, in the format the task asks for.
    """
    return "submitted"
