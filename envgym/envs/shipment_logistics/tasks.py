"""Seeded routing tasks, graded 1 (easy) … 5 (hard); every parameter lands in ``metadata``.

Difficulty adds shipments that compete for lane capacity (1 → 4: with several shipments, the
cheapest routes of all of them never fit together), narrows the allowed modes and lowers the
budget quantile (down to the cheapest capacity-feasible combination at levels 4 and 5): the budget sits at a low quantile of what capacity-feasible
combinations of cheap routes cost, so only a small share of route sets meets it (never none).
Level 5 has more route combinations than the exhaustive baseline's bound and is kept only when
greedy + local repair fails it (envgym.envs.procedural_kit.baselines).
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from envgym.envs.procedural_kit.baselines import EXHAUSTIVE_BOUND
from envgym.envs.procedural_kit.task_line import TaskNames
from envgym.envs.shipment_logistics.world import World, fits

TASK_NAMES = TaskNames("route", solution="solve_routing", verifier="verify_routing")
ALL_MODES = ("air", "rail", "truck")
# difficulty -> (shipments, max hops, mode sets to draw from, budget quantile)
LEVELS: dict[int, tuple[int, int, tuple[tuple[str, ...], ...], float]] = {
    1: (1, 4, (ALL_MODES,), 0.5),
    2: (2, 4, (("rail", "truck"), ALL_MODES), 0.3),
    3: (2, 4, (ALL_MODES,), 0.1),
    4: (3, 5, (("rail", "truck"), ALL_MODES), 0.0),
    5: (4, 5, (("rail", "truck"), ALL_MODES), 0.0),
}
# Levels whose tasks defeat the stronger baselines (envgym.envs.procedural_kit.baselines): beyond
# the exhaustive search's bound here, and rejected by the kit when greedy + repair solves them.
TOP_LEVELS = (5,)
PER_SHIPMENT = 8  # cheapest routes per shipment that the budget is computed over


def draw_task(
    world: World, rng: random.Random, difficulty: int, index: int
) -> dict[str, Any] | None:
    count, hops, mode_sets, quantile = LEVELS[difficulty]
    modes = rng.choice(mode_sets)
    first = rng.choice(sorted(world.shipments))
    options = {first: world.routes(first, hops, modes)}
    if not options[first]:
        return None
    # Add shipments whose cheapest route shares a lane with a chosen one's cheapest route and
    # that would overload it: they compete, so routing each on its cheapest path fails.
    others = [s for s in sorted(world.shipments) if s != first]
    rng.shuffle(others)
    for s in others:
        if len(options) == count:
            break
        routes = world.routes(s, hops, modes)
        if routes and any(not fits((chosen[0], routes[0]), world) for chosen in options.values()):
            options[s] = routes
    if len(options) < count:
        return None
    if difficulty in TOP_LEVELS and math.prod(len(r) for r in options.values()) <= EXHAUSTIVE_BOUND:
        return None  # the top level is beyond the exhaustive baseline's bound by definition
    pools = [routes[:PER_SHIPMENT] for routes in options.values()]
    if count > 1 and fits(tuple(pool[0] for pool in pools), world):
        return None  # the cheapest routes do not compete for a lane: no search needed
    totals = sorted(
        round(sum(r.cost for r in combo), 2)
        for combo in itertools.product(*pools)
        if fits(combo, world)
    )
    if not totals:
        return None
    meta = {
        "shipments": list(options),
        "max_hops": hops,
        "allowed_modes": list(modes),
        "budget": math.ceil(totals[int(quantile * (len(totals) - 1))]),
    }
    meta["declared_rules"] = declared_rules(meta, any(world.shipments[s].hazmat for s in options))
    return TASK_NAMES.line(index, difficulty, render_prompt(meta), meta)


def declared_rules(meta: dict[str, Any], hazmat: bool) -> list[str]:
    """The check names this task's constraints call for, written from the recipe (not from the
    verifier): ``envgym check`` fails a verifier that does not report every one of them."""
    modes = ["allowed_modes"] if set(meta["allowed_modes"]) < set(ALL_MODES) else []
    return [
        "valid_json",
        "shipments_in_order",
        "lanes_exist",
        "route_connects",
        "no_repeated_hub",
        "max_hops",
        *modes,
        *(["hazmat"] if hazmat else []),
        "deadline",
        "capacity",
        "total_cost_correct",
        "budget",
    ]


def render_prompt(meta: dict[str, Any]) -> str:
    rules = [
        "each route is a chain of lanes from the shipment's origin hub to its destination hub, "
        "never visiting a hub twice",
        f"at most {meta['max_hops']} lanes per route, only these modes: {', '.join(meta['allowed_modes'])}",
        "hazmat shipments only on lanes that accept hazmat",
        "a route's transit hours plus the handling hours of every intermediate hub must not exceed the "
        "shipment's deadline",
        "the shipments routed over a lane together must not exceed its capacity",
        "a lane costs its cost_per_kg x the shipment's weight, rounded to cents; "
        f"all routes together cost at most ${meta['budget']}",
    ]
    fmt = (
        '{"routes": [{"shipment": "<id>", "lanes": ["<lane_id>", ...]}, ...], '
        '"total_cost": <sum of all lane costs, a number>}'
    )
    return (
        f"Route these shipments through our hub network: {', '.join(meta['shipments'])}.\nRules:\n"
        + "\n".join(f"- {r}" for r in rules)
        + f"\nLook shipments, hubs and lanes up with the tools, then call submit_result with answer_text "
        f"set to JSON of the form {fmt} (one route per shipment, in the order listed)."
    )
