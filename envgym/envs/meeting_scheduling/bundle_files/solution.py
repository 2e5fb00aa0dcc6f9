"""Gold solution for scheduling tasks: earliest-first depth-first search, seeing only tools.

Given a start time the room and the representative are determined by the task's rules, so the
search only chooses start times (meetings in any time order, never overlapping, with the buffer
between any two); calendars and rooms are fetched once and cached.
"""

from __future__ import annotations

import json


def solve_schedule(tools, task: dict) -> None:
    schedule = _Search(tools, task["metadata"]).run()
    if schedule is None:
        raise RuntimeError(f"no schedule satisfies task {task.get('id')!r}")
    tools.submit_result(answer_text=json.dumps({"schedule": schedule}))


def _minutes(hhmm: str) -> int:
    return int(hhmm[:2]) * 60 + int(hhmm[3:5])


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


class _Search:
    def __init__(self, tools, meta: dict) -> None:
        self.tools = tools
        self.meta = meta
        self.date = meta["date"]
        self.people: dict = {}
        self.rooms: dict = {}
        self.bookings: dict = {}
        self.teams: dict = {}

    def person(self, name: str) -> dict:
        if name not in self.people:
            p = self.tools.get_person(name=name)
            shift = 60 * p["tz_offset_hours"]
            self.people[name] = {
                "work": (
                    _minutes(p["work_start_local"]) - shift,
                    _minutes(p["work_end_local"]) - shift,
                ),
                "lunch": (12 * 60 - shift, 13 * 60 - shift),
                "away": self.tools.is_out_of_office(person=name, date=self.date),
                "busy": [
                    (_minutes(e["start_utc"]), _minutes(e["end_utc"]))
                    for e in self.tools.get_events(person=name, date=self.date)
                ],
            }
        return self.people[name]

    def free(self, name: str, start: int, end: int) -> bool:
        p = self.person(name)
        if p["away"] or start < p["work"][0] or end > p["work"][1]:
            return False
        if self.meta["protect_lunch"] and _overlap(start, end, *p["lunch"]):
            return False
        return not any(_overlap(start, end, a, b) for a, b in p["busy"])

    def room(self, start: int, end: int, size: int, video: bool) -> str | None:
        key = (size, video)
        if key not in self.rooms:
            self.rooms[key] = self.tools.list_rooms(min_capacity=size, needs_video=video)
        for room in self.rooms[key]:
            if room["name"] not in self.bookings:
                self.bookings[room["name"]] = [
                    (_minutes(b["start_utc"]), _minutes(b["end_utc"]))
                    for b in self.tools.get_room_bookings(room=room["name"], date=self.date)
                ]
            if not any(_overlap(start, end, a, b) for a, b in self.bookings[room["name"]]):
                return room["name"]
        return None

    def representative(self, team: str, exclude: list, start: int, end: int) -> str | None:
        if team not in self.teams:
            self.teams[team] = [p["name"] for p in self.tools.list_people(team=team)]
        return next(
            (n for n in self.teams[team] if n not in exclude and self.free(n, start, end)), None
        )

    def place(self, m: dict, start: int) -> dict | None:
        end = start + m["duration_min"]
        if not all(self.free(a, start, end) for a in m["attendees"]):
            return None
        row = {"meeting": m["id"], "start_utc": _hhmm(start)}
        size = len(m["attendees"])
        if m.get("representative_team"):
            rep = self.representative(m["representative_team"], m["attendees"], start, end)
            if rep is None:
                return None
            row["representative"] = rep
            size += 1
        room = self.room(start, end, size, m["needs_video"])
        if room is None:
            return None
        row["room"] = room
        return row

    def run(self) -> list | None:
        meetings = self.meta["meetings"]
        first = min(self.person(a)["work"][0] for m in meetings for a in m["attendees"])
        self.day_start = first - first % 30
        return self.extend(0, [])

    def clear(self, start: int, end: int, done: list) -> bool:
        """No overlap with a placed meeting, keeping the buffer on both sides."""
        buffer = self.meta["buffer_min"]
        return all(end + buffer <= a or b + buffer <= start for a, b, _ in done)

    def extend(self, i: int, done: list) -> list | None:
        meetings = self.meta["meetings"]
        if i == len(meetings):
            return [row for _, _, row in done]
        m = meetings[i]
        for start in range(self.day_start, 24 * 60 - m["duration_min"] + 1, 30):
            end = start + m["duration_min"]
            if not self.clear(start, end, done):
                continue
            row = self.place(m, start)
            if row is not None:
                found = self.extend(i + 1, done + [(start, end, row)])
                if found is not None:
                    return found
        return None


def greedy_schedule(tools, task: dict) -> None:
    """Greedy baseline (no search): each meeting, in the order listed, at its earliest slot that
    fits the rules and the meetings already placed; a choice is never revisited."""
    search = _Search(tools, task["metadata"])
    meetings = search.meta["meetings"]
    first = min(search.person(a)["work"][0] for m in meetings for a in m["attendees"])
    done: list = []
    for m in meetings:
        for start in range(first - first % 30, 24 * 60 - m["duration_min"] + 1, 30):
            end = start + m["duration_min"]
            row = search.place(m, start) if search.clear(start, end, done) else None
            if row is not None:
                done.append((start, end, row))
                break
        else:
            raise RuntimeError(f"greedy: no slot left for {m['id']}")
    tools.submit_result(answer_text=json.dumps({"schedule": [row for _, _, row in done]}))
