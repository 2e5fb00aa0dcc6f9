"""Gold solution for routing tasks: enumerate each shipment's feasible routes through the
tools, then a depth-first search over shipments (cheapest routes first) that respects lane
capacities and prunes on the budget with the cheapest remaining routes as a lower bound.
"""

from __future__ import annotations

import json


def solve_routing(tools, task: dict) -> None:
    meta = task["metadata"]
    lanes: dict = {}
    handling = {h["code"]: h["handling_hours"] for h in tools.list_hubs()}
    shipments = [tools.get_shipment(shipment_id=s) for s in meta["shipments"]]
    options = [_routes(tools, s, meta, lanes, handling) for s in shipments]
    if any(not o for o in options):
        raise RuntimeError("a shipment has no feasible route")
    floor = [min(cost for cost, _ in o) for o in options]
    best = _search(options, shipments, 0, [], {}, 0.0, floor, meta["budget"])
    if best is None:
        raise RuntimeError(f"no routing fits the budget of task {task.get('id')!r}")
    routes = [
        {"shipment": s["shipment_id"], "lanes": [lane["lane_id"] for lane in path]}
        for s, (_, path) in zip(shipments, best)
    ]
    total = round(sum(cost for cost, _ in best), 2)
    tools.submit_result(answer_text=json.dumps({"routes": routes, "total_cost": total}))


def _routes(tools, s: dict, meta: dict, lanes: dict, handling: dict) -> list:
    out = []

    def walk(hub: str, path: list, hours: int, seen: set) -> None:
        if hub == s["destination"]:
            cost = round(sum(round(lane["cost_per_kg"] * s["weight_kg"], 2) for lane in path), 2)
            out.append((cost, list(path)))
            return
        if len(path) == meta["max_hops"]:
            return
        if hub not in lanes:
            lanes[hub] = tools.list_lanes_from(hub=hub)
        extra = handling[hub] if path else 0
        for lane in lanes[hub]:
            if lane["mode"] not in meta["allowed_modes"] or lane["destination"] in seen:
                continue
            if (s["hazmat"] and not lane["hazmat_ok"]) or lane["capacity_kg"] < s["weight_kg"]:
                continue
            spent = hours + extra + lane["transit_hours"]
            if spent <= s["deadline_hours"]:
                walk(lane["destination"], path + [lane], spent, seen | {lane["destination"]})

    walk(s["origin"], [], 0, {s["origin"]})
    return sorted(out, key=lambda r: (r[0], [lane["lane_id"] for lane in r[1]]))


def _search(options, shipments, i, chosen, load, spent, floor, budget):
    if i == len(options):
        return list(chosen)
    for cost, path in options[i]:
        if spent + cost + sum(floor[i + 1 :]) > budget + 1e-9:
            break  # routes are sorted by cost: every later one is dearer
        weight = shipments[i]["weight_kg"]
        if any(load.get(lane["lane_id"], 0) + weight > lane["capacity_kg"] for lane in path):
            continue
        for lane in path:
            load[lane["lane_id"]] = load.get(lane["lane_id"], 0) + weight
        found = _search(
            options, shipments, i + 1, chosen + [(cost, path)], load, spent + cost, floor, budget
        )
        for lane in path:
            load[lane["lane_id"]] -= weight
        if found is not None:
            return found
    return None


def greedy_routing(tools, task: dict) -> None:
    """Greedy baseline (no search): shipments in the order listed, each on its cheapest feasible
    route that still fits the lane capacity the earlier ones left; never revisits a choice."""
    meta = task["metadata"]
    lanes: dict = {}
    handling = {h["code"]: h["handling_hours"] for h in tools.list_hubs()}
    load: dict = {}
    routes, total = [], 0.0
    for sid in meta["shipments"]:
        s = tools.get_shipment(shipment_id=sid)
        for cost, path in _routes(tools, s, meta, lanes, handling):  # noqa: B007 - read after the break below
            if all(
                load.get(lane["lane_id"], 0) + s["weight_kg"] <= lane["capacity_kg"]
                for lane in path
            ):
                break
        else:
            raise RuntimeError(f"greedy: no route left for {sid}")
        for lane in path:
            load[lane["lane_id"]] = load.get(lane["lane_id"], 0) + s["weight_kg"]
        routes.append({"shipment": sid, "lanes": [lane["lane_id"] for lane in path]})
        total += cost
    tools.submit_result(answer_text=json.dumps({"routes": routes, "total_cost": round(total, 2)}))
