"""Witness candidates for routing tasks (envgym.envs.procedural_kit.witness runs them through the verifier).

Built from the network: one shipment's gold route replaced by another walk from its origin —
a walk that ignores exactly one routing rule (mode, hazmat, deadline, lane capacity, hop limit,
no revisits), a single lane that ends elsewhere, or another feasible route (which may overload a
lane shared with another shipment, or cost more than the budget) — with the total cost claimed
correctly; plus an unknown shipment, an unknown lane and a wrong total.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from envgym.envs.shipment_logistics.world import LaneRow, ShipmentRow, World

Pair = tuple[dict[str, Any], str]
PER_RELAXATION = 40  # walks tried per shipment and relaxed rule
# The rule a walk may break, and what else it may ignore: rules of later verifier stages are
# not reported for a walk that fails an earlier one, so they need not hold.
_LATER = {
    "modes": {"deadline", "capacity"},
    "hazmat": {"deadline", "capacity"},
    "deadline": {"capacity"},
    "capacity": set(),
    "simple": {"hops", "modes", "hazmat", "deadline", "capacity"},
    "hops": {"modes", "hazmat", "deadline", "capacity"},
}
MAX_WALK = 7  # lanes in a walk that may ignore the hop limit


def candidates(world: World, task: dict[str, Any], gold: dict[str, Any]) -> Iterator[Pair]:
    meta, answer = task["metadata"], json.loads(gold["answer_text"])
    lanes = {lane.lane_id: lane for out in world.lanes_from.values() for lane in out}
    routes: list[dict[str, Any]] = answer["routes"]

    def priced(new: list[dict[str, Any]]) -> dict[str, Any]:
        total = sum(
            round(lanes[x].rate * world.shipments[r["shipment"]].weight, 2)
            for r in new
            if r["shipment"] in world.shipments
            for x in r["lanes"]
            if x in lanes
        )
        return {"answer_text": json.dumps({"routes": new, "total_cost": round(total, 2)})}

    def swap(i: int, path: tuple[LaneRow, ...]) -> list[dict[str, Any]]:
        return (
            routes[:i] + [{**routes[i], "lanes": [lane.lane_id for lane in path]}] + routes[i + 1 :]
        )

    yield (
        priced([{**routes[0], "shipment": "SHP-0"}, *routes[1:]]),
        "the first route names no shipment",
    )
    yield (
        priced([{**routes[0], "lanes": ["LN-0", *routes[0]["lanes"][1:]]}, *routes[1:]]),
        "an unknown lane",
    )
    yield (
        {"answer_text": json.dumps({**answer, "total_cost": round(answer["total_cost"] + 1, 2)})},
        "the claimed total is $1 off",
    )
    for i, route in enumerate(routes):
        s = world.shipments[route["shipment"]]
        for lane in world.lanes_from.get(s.origin, ()):
            if lane.destination != s.destination:
                yield (
                    priced(swap(i, (lane,))),
                    f"{s.shipment_id} stops after one lane at {lane.destination}",
                )
        for path in world.routes(s.shipment_id, meta["max_hops"], tuple(meta["allowed_modes"]))[
            :PER_RELAXATION
        ]:
            yield priced(swap(i, path.lanes)), f"{s.shipment_id} on another feasible route"
        for rule, later in _LATER.items():
            for path in itertools.islice(_walks(world, s, meta, rule, later), PER_RELAXATION):
                yield (
                    priced(swap(i, path)),
                    f"{s.shipment_id} on a route that breaks the {rule} rule",
                )


def _walks(
    world: World, s: ShipmentRow, meta: dict[str, Any], rule: str, later: set[str]
) -> Iterator[tuple[LaneRow, ...]]:
    """Walks origin -> destination that break ``rule`` and keep every rule not in ``later``."""
    modes, relax = set(meta["allowed_modes"]), later | {rule}
    hops = MAX_WALK if rule == "hops" or "hops" in later else meta["max_hops"]

    def breaks(path: tuple[LaneRow, ...]) -> bool:
        if rule == "hops":
            return len(path) > meta["max_hops"]
        if rule == "simple":
            return len({lane.destination for lane in path} | {s.origin}) < len(path) + 1
        return True  # the other rules are broken, or not, by the verifier's own reckoning

    def walk(
        hub: str, path: tuple[LaneRow, ...], hours: int, seen: frozenset[str]
    ) -> Iterator[tuple[LaneRow, ...]]:
        if hub == s.destination and path:
            if breaks(path):
                yield path
            if rule != "simple":
                return
        if len(path) == hops:
            return
        extra = world.handling[hub] if path else 0
        for lane in world.lanes_from.get(hub, ()):
            if "modes" not in relax and lane.mode not in modes:
                continue
            if "simple" not in relax and lane.destination in seen:
                continue
            if "hazmat" not in relax and s.hazmat and not lane.hazmat_ok:
                continue
            if "capacity" not in relax and lane.capacity < s.weight:
                continue
            spent = hours + extra + lane.hours
            if "deadline" not in relax and spent > s.deadline:
                continue
            yield from walk(lane.destination, path + (lane,), spent, seen | {lane.destination})

    return walk(s.origin, (), 0, frozenset({s.origin}))


Probe = tuple[dict[str, Any], str, str]
MAX_PROBES = 200  # per condition


def conditions(world: World, task: dict[str, Any], gold: dict[str, Any]) -> Iterator[Probe]:
    """Per-condition and per-boundary probes
    (envgym.envs.procedural_kit.witness.condition_witnesses).

    A total a cent off (a loosened tolerance still rejects $1 off); a route that starts at the
    origin and ends at the destination but whose lanes do not join (a join check switched off
    still rejects a route that ends elsewhere); one lane over the hop limit; the deadline and the
    budget broken by the least.
    """
    meta, answer = task["metadata"], json.loads(gold["answer_text"])
    lanes = {lane.lane_id: lane for out in world.lanes_from.values() for lane in out}
    routes: list[dict[str, Any]] = answer["routes"]

    def priced(new: list[dict[str, Any]]) -> dict[str, Any]:
        total = sum(
            round(lanes[x].rate * world.shipments[r["shipment"]].weight, 2)
            for r in new
            for x in r["lanes"]
        )
        return {"answer_text": json.dumps({"routes": new, "total_cost": round(total, 2)})}

    for cents in (0.01, -0.01):
        yield (
            {
                "answer_text": json.dumps(
                    {**answer, "total_cost": round(answer["total_cost"] + cents, 2)}
                )
            },
            f"the claimed total is {cents:+} off",
            f"total_cost_correct:{cents:+}",
        )
    everything = [lane for out in world.lanes_from.values() for lane in out]
    for i, route in enumerate(routes):
        s = world.shipments[route["shipment"]]

        def swap(
            path: tuple[LaneRow, ...], i: int = i, route: dict[str, Any] = route
        ) -> list[dict[str, Any]]:
            return (
                routes[:i] + [{**route, "lanes": [lane.lane_id for lane in path]}] + routes[i + 1 :]
            )

        gaps = sorted(
            (
                (a, b)
                for a in world.lanes_from.get(s.origin, ())
                for b in everything
                if b.destination == s.destination
                and b.origin not in (a.destination, s.origin)
                and a.destination != s.destination
            ),
            key=lambda p: p[0].hours + p[1].hours,
        )
        for a, b in gaps[:MAX_PROBES]:
            why = f"{s.shipment_id}: {a.lane_id} ends at {a.destination}, {b.lane_id} leaves {b.origin}"
            yield priced(swap((a, b))), why, "route_connects:gap"
        walks = list(
            itertools.islice(_walks(world, s, meta, "hops", _LATER["hops"]), PER_RELAXATION * 5)
        )
        for path in (p for p in walks if len(p) == meta["max_hops"] + 1):
            yield (
                priced(swap(path)),
                f"{s.shipment_id}: one lane over the hop limit",
                "max_hops:one_over",
            )
        late = list(
            itertools.islice(
                _walks(world, s, meta, "deadline", _LATER["deadline"]), PER_RELAXATION * 5
            )
        )
        for path in sorted(late, key=lambda p: _hours(world, p)):
            if _hours(world, path) > s.deadline:
                yield (
                    priced(swap(path)),
                    f"{s.shipment_id}: the deadline missed by the least",
                    "deadline:nearest",
                )
        feasible = world.routes(s.shipment_id, meta["max_hops"], tuple(meta["allowed_modes"]))
        for path in feasible[
            : PER_RELAXATION * 5
        ]:  # cheapest first: the first over budget is nearest
            yield (
                priced(swap(path.lanes)),
                f"{s.shipment_id}: the budget broken by the least",
                "budget:nearest",
            )


def _hours(world: World, path: tuple[LaneRow, ...]) -> int:
    return sum(lane.hours for lane in path) + sum(world.handling[lane.origin] for lane in path[1:])
