"""Witness candidates for scheduling tasks (envgym.envs.procedural_kit.witness runs them through the verifier).

Built from the calendars: the gold schedule with one meeting moved to another half-hour start
(its room and representative re-chosen by the rules when the new time allows, kept otherwise),
one representative swapped for another member of the team, or one room swapped for any other
room (at the gold time, then at every other valid time); plus a wrong meeting id and a badly
formatted start.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from envgym.envs.meeting_scheduling import data as db
from envgym.envs.meeting_scheduling.world import DAY_END, GRID, World, minutes

Pair = tuple[dict[str, Any], str]


def candidates(world: World, task: dict[str, Any], gold: dict[str, Any]) -> Iterator[Pair]:
    meta = task["metadata"]
    rows: list[dict[str, str]] = json.loads(gold["answer_text"])["schedule"]

    def sub(i: int, **change: str) -> dict[str, Any]:
        new = [dict(r) for r in rows]
        new[i].update(change)
        return {"answer_text": json.dumps({"schedule": new})}

    yield sub(0, meeting="M9"), "the first entry names a meeting the task does not have"
    yield (
        sub(0, start_utc=rows[0]["start_utc"].lstrip("0") + "5"),
        "the first start is not HH:00/HH:30",
    )
    yield sub(0, room="Room 0"), "the first meeting's room does not exist"
    for i, m in enumerate(meta["meetings"]):
        if m.get("representative_team"):
            for name in sorted(
                n
                for n, p in world.people.items()
                if p.team == m["representative_team"] and n != rows[i]["representative"]
            ):
                yield (
                    sub(i, representative=name),
                    f"{m['id']}: {name} instead of the first free member",
                )
        for room in world.rooms:
            if room.name != rows[i]["room"]:
                yield sub(i, room=room.name), f"{m['id']} in {room.name}"
        for start in range(0, DAY_END - m["duration_min"] + 1, GRID):
            at = db.hhmm(start)
            if at == rows[i]["start_utc"]:
                continue
            yield sub(i, start_utc=at), f"{m['id']} moved to {at}, same room"
            placed = world.place(meta, m, start)
            if placed is not None:
                yield sub(i, **placed), f"{m['id']} moved to {at}, room chosen by the rules"
    for i, m in enumerate(meta["meetings"]):  # rooms at other valid times: a booked room is rare
        for start in range(0, DAY_END - m["duration_min"] + 1, GRID):
            placed = world.place(meta, m, start)
            if placed is None:
                continue
            for room in world.rooms:
                if room.name != placed["room"]:
                    yield (
                        sub(i, **{**placed, "room": room.name}),
                        f"{m['id']} at {placed['start_utc']} in {room.name}",
                    )


Probe = tuple[dict[str, Any], str, str]


def conditions(world: World, task: dict[str, Any], gold: dict[str, Any]) -> Iterator[Probe]:
    """Per-condition and per-boundary probes
    (envgym.envs.procedural_kit.witness.condition_witnesses).

    Each meeting moved to every other start, tagged by the condition and edge the move breaks:
    starting before or ending after an attendee's working hours, touching the start or the end
    of lunch, closer to another meeting than the buffer without overlapping it, over an event's
    start or end, clashing with the next meeting in the answer's list or one further away (a pair
    loop that skips neighbours still sees the others); and rooms one seat short or without the
    video a meeting needs.  A rule that lost one of these conditions (or an edge moved by one
    slot) still rejects the other moves.
    """
    meta = task["metadata"]
    rows: list[dict[str, str]] = json.loads(gold["answer_text"])["schedule"]
    starts = [minutes(r["start_utc"]) for r in rows]

    def sub(i: int, **change: str) -> dict[str, Any]:
        new = [dict(r) for r in rows]
        new[i].update(change)
        return {"answer_text": json.dumps({"schedule": new})}

    for i, m in enumerate(meta["meetings"]):
        length = m["duration_min"]
        for start in range(0, DAY_END - length + 1, GRID):
            if start == starts[i]:
                continue
            end, at = start + length, db.hhmm(start)
            placed = world.place(meta, m, start) or {"start_utc": at}
            for tag in _edges(world, meta, m, i, start, end, starts):
                yield sub(i, **{**placed, "start_utc": at}), f"{m['id']} moved to {at}", tag
        if m.get(
            "representative_team"
        ):  # a name that is no member: unknown, of another team, an attendee
            others = sorted(
                n for n, q in world.people.items() if q.team != m["representative_team"]
            )
            for tag, name in (
                ("unknown", "Nobody Known"),
                ("other_team", others[0] if others else ""),
                ("attendee", m["attendees"][0]),
            ):
                yield (
                    sub(i, representative=name),
                    f"{m['id']}: representative {name}",
                    f"representative:{tag}",
                )
        size = len(m["attendees"]) + (1 if m.get("representative_team") else 0)
        for room in world.rooms:
            if room.capacity == size - 1 and (room.video or not m["needs_video"]):
                yield (
                    sub(i, room=room.name),
                    f"{m['id']} in {room.name}, one seat short",
                    "room_fits:one_short",
                )
            if m["needs_video"] and not room.video and room.capacity >= size:
                yield (
                    sub(i, room=room.name),
                    f"{m['id']} in {room.name}, no video",
                    "room_fits:no_video",
                )


def _edges(
    world: World,
    meta: dict[str, Any],
    m: dict[str, Any],
    i: int,
    start: int,
    end: int,
    starts: list[int],
) -> Iterator[str]:
    """The condition tags a move of meeting ``i`` to [start, end) sits on the edge of."""
    for name in m["attendees"]:
        p = world.people[name]
        if start == p.work[0] - GRID:
            yield "working_hours:starts_early"
        if end == p.work[1] + GRID:
            yield "working_hours:ends_late"
        lunch0, lunch1 = 12 * 60 - p.offset * 60, 13 * 60 - p.offset * 60
        if meta["protect_lunch"] and end == lunch0 + GRID:
            yield "lunch_hour:into_start"
        if meta["protect_lunch"] and start == lunch1 - GRID:
            yield "lunch_hour:into_end"
        for e0, e1 in world.busy.get((name, meta["date"]), ()):
            if end == e0 + GRID:
                yield "no_conflicts:into_start"
            if start == e1 - GRID:
                yield "no_conflicts:into_end"
    buffer = meta.get("buffer_min", 0)
    clashes = set()  # how far apart in the list the meetings this move clashes with are
    for j, other in enumerate(meta["meetings"]):
        if j == i:
            continue
        o0, o1 = starts[j], starts[j] + other["duration_min"]
        touching = start - o1 == 0 or o0 - end == 0
        if buffer and (0 < start - o1 < buffer or 0 < o0 - end < buffer or touching):
            yield "no_overlap:inside_buffer"
        if start < o1 + buffer and o0 < end + buffer:
            clashes.add(abs(i - j) == 1)
    if clashes == {True}:  # only with neighbours: a pair loop that skips them accepts the move
        yield "no_overlap:next_in_list"
    if clashes == {False}:
        yield "no_overlap:apart_in_list"
