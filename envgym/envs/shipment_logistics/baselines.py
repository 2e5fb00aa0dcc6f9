"""Routing tasks as searches for the shared baselines (envgym.envs.procedural_kit.baselines).

Built from the task's metadata and the hub network (the tools' data), never the gold: one slot
per shipment, whose options are its feasible routes (hops, modes, hazmat, deadline), cheapest
first.  Greedy routes the shipments in the order listed, each on its cheapest route that fits
the capacity the earlier ones left, as solution.py's greedy does.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from envgym.envs.procedural_kit.baselines import EXHAUSTIVE_BOUND, Choice, Search, attempts
from envgym.envs.shipment_logistics.world import Route, World


def baselines(
    world: World, meta: dict[str, Any], bound: int = EXHAUSTIVE_BOUND
) -> dict[str, dict[str, Any] | str | None]:
    """Each baseline's answer (see envgym.envs.procedural_kit.baselines.attempts)."""
    search = routing_search(world, meta)
    return attempts(search, greedy_routes(world, search) if search else None, bound=bound)


def routing_search(world: World, meta: dict[str, Any]) -> Search | None:
    modes = tuple(meta["allowed_modes"])
    pools = [world.routes(s, meta["max_hops"], modes) for s in meta["shipments"]]
    if any(not pool for pool in pools):
        return None

    def penalty(routes: Choice) -> float:
        out = max(0.0, _total(routes) - meta["budget"]) / meta["budget"]
        for load, capacity in _loads(world, routes).values():
            out += max(0, load - capacity) / capacity
        return out

    def answer(routes: Choice) -> dict[str, Any]:
        return {
            "routes": [
                {"shipment": r.shipment, "lanes": [lane.lane_id for lane in r.lanes]}
                for r in routes
            ],
            "total_cost": _total(routes),
        }

    return Search(pools, penalty, answer)


def greedy_routes(world: World, search: Search) -> Choice:
    """Each shipment in order on its cheapest route that still fits; where none fits, its
    cheapest route (repair starts from there; solution.py's greedy gives up instead)."""
    chosen: list[Route] = []
    for pool in search.pools:
        fitting = (
            r
            for r in pool
            if all(load <= cap for load, cap in _loads(world, (*chosen, r)).values())
        )
        chosen.append(next(fitting, pool[0]))
    return tuple(chosen)


def _total(routes: Choice) -> float:
    return round(sum(r.cost for r in routes), 2)


def _loads(world: World, routes: Choice) -> dict[str, tuple[int, int]]:
    """lane id -> (weight the routes put on it, its capacity)."""
    load: dict[str, int] = defaultdict(int)
    capacity: dict[str, int] = {}
    for route in routes:
        for lane in route.lanes:
            load[lane.lane_id] += world.shipments[route.shipment].weight
            capacity[lane.lane_id] = lane.capacity
    return {k: (load[k], capacity[k]) for k in load}
