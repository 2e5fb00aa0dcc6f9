"""Verifier for scheduling tasks: replays every rule of ``task["metadata"]`` against the calendars.

Check names, in stages: valid_json | meetings_in_order, start_format | no_overlap (two or
more meetings) |
working_hours (inside working hours and not out of office), no_conflicts, lunch_hour (only
when lunch is protected) | representative (only when one is asked for) | room_fits (a room that
exists, seats everyone and has video when asked), room_free, smallest_room.  A stage is reported only when every earlier stage passed: a rejected schedule
stays rejected, and each rule can fail on its own (every rule has a per-rule
witness).  An answer that does not parse reports valid_json alone.
"""

from __future__ import annotations

import json
import re
from typing import Any

from envgym.runtime import sqlite

_TIME = re.compile(r"^([01]\d|2[0-3]):(00|30)$")


def verify_schedule(submission: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    meta = task.get("metadata") or {}
    rows, problem = _read(submission, meta)
    if rows is None:
        return {"checks": [_check("valid_json", [problem])]}
    out: dict[str, list[str]] = {}
    starts = []
    for row, m in zip(rows, meta["meetings"]):
        if row["meeting"] != m["id"]:
            out.setdefault("meetings_in_order", []).append(
                f"expected {m['id']}, got {row['meeting']!r}"
            )
        match = _TIME.match(row["start_utc"]) if isinstance(row["start_utc"], str) else None
        if match is None:
            out.setdefault("start_format", []).append(
                f"{row['meeting']!r}: {row['start_utc']!r} is not HH:00/HH:30"
            )
        starts.append(int(match.group(1)) * 60 + int(match.group(2)) if match else None)
    if "start_format" not in out:
        _check_schedule(meta, rows, starts, out)
    stages = [
        ["meetings_in_order", "start_format"],
        ["no_overlap"] if len(meta["meetings"]) > 1 else [],
        ["working_hours", "no_conflicts"] + (["lunch_hour"] if meta.get("protect_lunch") else []),
        ["representative"] if any(m.get("representative_team") for m in meta["meetings"]) else [],
        ["room_fits", "room_free", "smallest_room"],
    ]
    checks = [_check("valid_json", [])]
    for stage in stages:
        checks += [_check(n, out.get(n, [])) for n in stage]
        if any(n in out for n in stage):
            break  # later stages judge a schedule this one already rejects
    return {"checks": checks}


def _check(name: str, problems: list[str]) -> dict[str, Any]:
    return {"name": name, "passed": not problems, "detail": "; ".join(problems[:3])}


def _read(submission: dict[str, Any], meta: dict) -> tuple[list | None, str]:
    text = submission.get("answer_text")
    if not isinstance(text, str) or not text.strip():
        return None, "answer_text is missing or empty"
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"answer_text is not JSON: {exc.msg}"
    except RecursionError:  # nesting deeper than the parser's stack: not an answer
        return None, "answer_text is nested too deeply"
    rows = answer.get("schedule") if isinstance(answer, dict) else None
    meetings = meta.get("meetings") or []
    if not isinstance(rows, list) or len(rows) != len(meetings):
        return None, f"schedule must be a list of {len(meetings)} entries"
    for row, m in zip(rows, meetings):
        need = ["meeting", "start_utc", "room"] + (
            ["representative"] if m.get("representative_team") else []
        )
        if not isinstance(row, dict) or any(k not in row for k in need):
            return None, f"each entry needs {', '.join(need)}"
    return rows, ""


def _minutes(hhmm: str) -> int:
    return int(hhmm[:2]) * 60 + int(hhmm[3:5])


def _overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


def _person(name: str) -> dict | None:
    row = sqlite().execute("SELECT * FROM people WHERE name = ?", (name,)).fetchone()
    return dict(row) if row else None


def _attend_problems(name: str, date: str, start: int, end: int, lunch: bool) -> dict[str, str]:
    """Which attendance rules ``name`` breaks for [start, end) on ``date`` (rule -> why)."""
    p = _person(name)
    if p is None:
        return {"working_hours": f"no person named {name!r}"}
    out = {}
    shift = 60 * p["tz_offset_hours"]
    if (
        start < _minutes(p["work_start_local"]) - shift
        or end > _minutes(p["work_end_local"]) - shift
    ):
        out["working_hours"] = f"{name} is outside working hours"
    if (
        sqlite()
        .execute("SELECT 1 FROM out_of_office WHERE person = ? AND date = ?", (name, date))
        .fetchone()
    ):
        out["working_hours"] = f"{name} is out of office"  # no working hours on that day
    if lunch and _overlap(start, end, 12 * 60 - shift, 13 * 60 - shift):
        out["lunch_hour"] = f"overlaps {name}'s lunch"
    for e in sqlite().execute(
        "SELECT start_utc, end_utc FROM events WHERE person = ? AND date = ?", (name, date)
    ):
        if _overlap(start, end, _minutes(e[0]), _minutes(e[1])):
            out["no_conflicts"] = f"{name} has an event {e[0]}-{e[1]}"
            break
    return out


def _free_rooms(date: str, start: int, end: int, size: int, video: bool) -> list[str]:
    rooms = (
        sqlite()
        .execute(
            "SELECT name FROM rooms WHERE capacity >= ? AND (has_video = 1 OR ? = 0) "
            "ORDER BY capacity, floor, name",
            (size, int(video)),
        )
        .fetchall()
    )
    out = []
    for (name,) in rooms:
        booked = (
            sqlite()
            .execute(
                "SELECT start_utc, end_utc FROM room_bookings WHERE room = ? AND date = ?",
                (name, date),
            )
            .fetchall()
        )
        if not any(_overlap(start, end, _minutes(a), _minutes(b)) for a, b in booked):
            out.append(name)
    return out


def _check_schedule(meta: dict, rows: list, starts: list, out: dict[str, list[str]]) -> None:
    date, lunch, buffer = meta["date"], meta.get("protect_lunch", False), meta.get("buffer_min", 0)
    spans = [
        (start, start + m["duration_min"], m["id"]) for m, start in zip(meta["meetings"], starts)
    ]
    for i, (a0, a1, a) in enumerate(spans):
        for b0, b1, b in spans[i + 1 :]:
            if a0 < b1 + buffer and b0 < a1 + buffer:
                out.setdefault("no_overlap", []).append(
                    f"{a} and {b} overlap or are closer than {buffer} min"
                )
    for row, m, start in zip(rows, meta["meetings"], starts):
        end = start + m["duration_min"]
        for name in m["attendees"]:
            for rule, why in _attend_problems(name, date, start, end, lunch).items():
                out.setdefault(rule, []).append(f"{m['id']}: {why}")
        size = len(m["attendees"])
        if m.get("representative_team"):
            size += 1
            rep = row["representative"]
            p = _person(rep) if isinstance(rep, str) else None
            candidates = sorted(
                r[0]
                for r in sqlite().execute(
                    "SELECT name FROM people WHERE team = ?", (m["representative_team"],)
                )
                if r[0] not in m["attendees"]
            )
            first = next(
                (c for c in candidates if not _attend_problems(c, date, start, end, lunch)), None
            )
            if p is None or p["team"] != m["representative_team"] or rep in m["attendees"]:
                out.setdefault("representative", []).append(
                    f"{rep!r} is not a {m['representative_team']} member"
                )
            elif rep != first:
                out.setdefault("representative", []).append(
                    f"{rep} is not the first free member ({first})"
                )
        room = row["room"]
        info = (
            sqlite()
            .execute("SELECT capacity, has_video FROM rooms WHERE name = ?", (room,))
            .fetchone()
            if isinstance(room, str)
            else None
        )
        if info is None or info[0] < size or (m["needs_video"] and not info[1]):
            out.setdefault("room_fits", []).append(f"{m['id']}: room {room!r} does not fit")
            continue
        free = _free_rooms(date, start, end, size, m["needs_video"])
        if room not in free:
            out.setdefault("room_free", []).append(f"{m['id']}: {room} is booked then")
        elif free[0] != room:
            out.setdefault("smallest_room", []).append(
                f"{m['id']}: {free[0]} is smaller/lower than {room}"
            )
