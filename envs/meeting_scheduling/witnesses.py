"""Witness candidates for scheduling tasks (envs.procedural_kit.witness runs them through the verifier).

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

from envs.meeting_scheduling import data as db
from envs.meeting_scheduling.world import DAY_END, GRID, World

Pair = tuple[dict[str, Any], str]


def candidates(world: World, task: dict[str, Any], gold: dict[str, Any]) -> Iterator[Pair]:
    meta = task["metadata"]
    rows: list[dict[str, str]] = json.loads(gold["answer_text"])["schedule"]

    def sub(i: int, **change: str) -> dict[str, Any]:
        new = [dict(r) for r in rows]
        new[i].update(change)
        return {"answer_text": json.dumps({"schedule": new})}

    yield sub(0, meeting="M9"), "the first entry names a meeting the task does not have"
    yield sub(0, start_utc=rows[0]["start_utc"].lstrip("0") + "5"), "the first start is not HH:00/HH:30"
    yield sub(0, room="Room 0"), "the first meeting's room does not exist"
    for i, m in enumerate(meta["meetings"]):
        if m.get("representative_team"):
            for name in sorted(n for n, p in world.people.items()
                               if p.team == m["representative_team"] and n != rows[i]["representative"]):
                yield sub(i, representative=name), f"{m['id']}: {name} instead of the first free member"
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
                    yield sub(i, **{**placed, "room": room.name}), f"{m['id']} at {placed['start_utc']} in {room.name}"
