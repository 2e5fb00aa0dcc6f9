"""Seeded scheduling tasks, graded 1 (easy) … 5 (hard); every parameter lands in ``metadata``.

Difficulty adds meetings (1 → 3, then 6 at level 5), attendees from more teams and time zones, video rooms,
lunch protection, buffers between meetings and a team representative to choose; from level 3
the least constrained meeting is listed first, so earliest-slot-first placement is a trap.  A draw is
kept only when the host solver (envgym.envs.meeting_scheduling.world) finds a schedule.  Level 5 has
more start-time combinations than the exhaustive baseline's bound and is kept only when greedy
+ local repair fails it (envgym.envs.procedural_kit.baselines).
"""

from __future__ import annotations

import math
import random
from typing import Any

from envgym.envs.meeting_scheduling import data as db
from envgym.envs.meeting_scheduling.world import DAY_END, GRID, World
from envgym.envs.procedural_kit.baselines import EXHAUSTIVE_BOUND
from envgym.envs.procedural_kit.task_line import TaskNames

TASK_NAMES = TaskNames("meet", solution="solve_schedule", verifier="verify_schedule")
# difficulty -> (meetings, attendees range, durations, video share, lunch, buffer, representative)
LEVELS: dict[int, tuple[int, tuple[int, int], tuple[int, ...], float, bool, int, bool]] = {
    1: (1, (2, 2), (30, 60), 0.0, False, 0, False),
    2: (1, (3, 3), (60,), 0.5, False, 0, False),
    3: (2, (2, 3), (60, 90), 0.5, True, 30, False),
    4: (3, (2, 3), (30, 60), 0.5, True, 30, False),
    5: (6, (2, 2), (30, 60), 0.5, True, 30, True),
}
# Levels whose tasks defeat the stronger baselines (envgym.envs.procedural_kit.baselines): beyond
# the exhaustive search's bound here, and rejected by the kit when greedy + repair solves them.
TOP_LEVELS = (5,)
TOPICS = (
    "roadmap sync",
    "launch readiness",
    "budget review",
    "hiring debrief",
    "vendor pitch",
    "retro",
    "architecture deep dive",
    "quarterly planning",
    "user research readout",
)


def draw_task(
    world: World, rng: random.Random, difficulty: int, index: int
) -> dict[str, Any] | None:
    count, (lo, hi), durations, video, lunch, buffer, rep = LEVELS[difficulty]
    date = rng.choice(db.dates())
    names = sorted(world.people)
    anchor = world.people[rng.choice(names)]
    if difficulty == 1:
        names = [n for n in names if world.people[n].team == anchor.team]
    else:  # people whose UTC working day overlaps the anchor's by at least six hours
        names = [
            n
            for n in names
            if min(world.people[n].work[1], anchor.work[1])
            - max(world.people[n].work[0], anchor.work[0])
            >= 6 * 60
        ]
    meetings = []
    for i in range(count):
        attendees = rng.sample(names, min(len(names), rng.randint(lo, hi)))
        if any((a, date) in world.away for a in attendees):
            return None
        meetings.append(
            {
                "id": f"M{i + 1}",
                "title": rng.choice(TOPICS),
                "attendees": sorted(attendees),
                "duration_min": rng.choice(durations),
                "needs_video": rng.random() < video,
                "representative_team": None,
            }
        )
    if rep:
        m = rng.choice(meetings)
        m["representative_team"] = rng.choice(sorted({p.team for p in world.people.values()}))
    meta = {"date": date, "meetings": meetings, "protect_lunch": lunch, "buffer_min": buffer}
    if difficulty >= 3:
        # List the meeting with the most possible starts first: its earliest slot is then
        # likely to be one a later, tighter meeting needs, so placing meetings one by one at
        # their earliest slot fails and a search over start times is required.
        starts = {
            id(m): sum(
                world.place(meta, m, t) is not None
                for t in range(0, DAY_END - m["duration_min"] + 1, GRID)
            )
            for m in meetings
        }
        if difficulty in TOP_LEVELS and math.prod(starts.values()) <= EXHAUSTIVE_BOUND:
            return None  # the top level is beyond the exhaustive baseline's bound by definition
        meetings.sort(key=lambda m: -starts[id(m)])
        for i, m in enumerate(meetings):
            m["id"] = f"M{i + 1}"
    if next(world.schedules(meta, limit=1), None) is None:
        return None
    meta["declared_rules"] = declared_rules(meta)
    return TASK_NAMES.line(index, difficulty, render_prompt(meta), meta)


def declared_rules(meta: dict[str, Any]) -> list[str]:
    """The check names this task's constraints call for, written from the recipe (not from the
    verifier): ``envgym check`` fails a verifier that does not report every one of them."""
    rules = ["valid_json", "meetings_in_order", "start_format"]
    rules += ["no_overlap"] if len(meta["meetings"]) > 1 else []
    rules += ["working_hours", "no_conflicts"] + (["lunch_hour"] if meta["protect_lunch"] else [])
    rules += ["representative"] if any(m["representative_team"] for m in meta["meetings"]) else []
    return rules + ["room_fits", "room_free", "smallest_room"]


def render_prompt(meta: dict[str, Any]) -> str:
    lines = []
    for m in meta["meetings"]:
        extra = ", in a room with video conferencing" if m["needs_video"] else ""
        rep = (
            (
                f", plus one representative of the {m['representative_team']} team (the alphabetically first "
                "team member who is free, in working hours and not out of office; not one of the attendees "
                "listed)"
            )
            if m["representative_team"]
            else ""
        )
        lines.append(
            f'- {m["id"]} "{m["title"]}": {m["duration_min"]} minutes with '
            f"{', '.join(m['attendees'])}{rep}{extra}"
        )
    rules = [
        "the meetings may happen in any order, but no two of them overlap (they share a note-taker)",
        "start times are UTC on the half hour (HH:00 or HH:30)",
        "every attendee is inside their working hours (local time; get_person gives the UTC offset), "
        "not out of office, and has no other event overlapping the meeting",
        "each meeting uses the smallest free room that seats everyone (and has video when asked); "
        "ties go to the lower floor, then the alphabetically first name",
    ]
    if meta["protect_lunch"]:
        rules.append("no meeting overlaps any attendee's local lunch hour, 12:00-13:00")
    if meta["buffer_min"]:
        rules.append(f"at least {meta['buffer_min']} minutes between any two of these meetings")
    fmt = (
        '{"schedule": [{"meeting": "M1", "start_utc": "HH:MM", "room": "<room>"'
        + (
            ', "representative": "<name>"'
            if any(m["representative_team"] for m in meta["meetings"])
            else ""
        )
        + "}, ...]}"
    )
    return (
        f"Please schedule these meetings on {meta['date']}:\n"
        + "\n".join(lines)
        + "\nRules:\n"
        + "\n".join(f"- {r}" for r in rules)
        + "\nCheck calendars and rooms with the tools, then call submit_result with answer_text set to "
        f"JSON of the form {fmt} (one entry per meeting, in the order listed; representative only where asked)."
    )
