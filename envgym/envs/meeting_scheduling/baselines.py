"""Scheduling tasks as searches for the shared baselines (envgym.envs.procedural_kit.baselines).

Built from the task's metadata and the calendars (the tools' data), never the gold: one slot
per meeting, whose options are the half-hour starts it can take on its own (attendees free, a
room, a representative where asked), earliest first; the room and representative follow from
the start.  The only rule between meetings is that no two overlap (with the buffer between).
Greedy places the meetings in the order listed, each at its earliest start clear of the ones
placed before, as solution.py's greedy does.
"""

from __future__ import annotations

import itertools
from typing import Any

from envgym.envs.meeting_scheduling.world import DAY_END, GRID, World
from envgym.envs.procedural_kit.baselines import EXHAUSTIVE_BOUND, Choice, Search, attempts


def baselines(
    world: World, meta: dict[str, Any], bound: int = EXHAUSTIVE_BOUND
) -> dict[str, dict[str, Any] | str | None]:
    """Each baseline's answer (see envgym.envs.procedural_kit.baselines.attempts)."""
    search = schedule_search(world, meta)
    return attempts(search, greedy_schedule(search, meta) if search else None, bound=bound)


def schedule_search(world: World, meta: dict[str, Any]) -> Search | None:
    first = min(world.people[a].work[0] for m in meta["meetings"] for a in m["attendees"])
    day_start = first - first % GRID
    pools = []
    for m in meta["meetings"]:
        starts = range(day_start, DAY_END - m["duration_min"] + 1, GRID)
        pools.append(
            [
                (s, s + m["duration_min"], row)
                for s in starts
                if (row := world.place(meta, m, s)) is not None
            ]
        )
    if any(not pool for pool in pools):
        return None

    def penalty(choice: Choice) -> float:
        return sum(_clash(a, b, meta["buffer_min"]) for a, b in itertools.combinations(choice, 2))

    def answer(choice: Choice) -> dict[str, Any]:
        return {"schedule": [row for _, _, row in choice]}

    return Search(pools, penalty, answer)


def greedy_schedule(search: Search, meta: dict[str, Any]) -> Choice:
    """Each meeting in order at its earliest start clear of the earlier ones; where none is,
    its earliest start (repair starts from there; solution.py's greedy gives up instead)."""
    chosen: list[tuple[int, int, dict[str, str]]] = []
    for pool in search.pools:
        clear = (o for o in pool if all(_clash(o, c, meta["buffer_min"]) == 0 for c in chosen))
        chosen.append(next(clear, pool[0]))
    return tuple(chosen)


def _clash(a: tuple[int, int, Any], b: tuple[int, int, Any], buffer: int) -> float:
    """0 when the two meetings are apart by at least the buffer, else 1 plus the shortfall in
    hours (so a repair move that shrinks a clash counts as progress)."""
    shortfall = min(a[1] + buffer - b[0], b[1] + buffer - a[0])
    return 0.0 if shortfall <= 0 else 1 + shortfall / 60
