"""Verifier for routing tasks: every rule of ``task["metadata"]``, checked against the network.

Check names, in stages: valid_json | shipments_in_order, lanes_exist | route_connects,
no_repeated_hub | max_hops | allowed_modes (only when a mode is ruled out), hazmat (only when a
shipment is hazmat) | deadline | capacity | total_cost_correct, budget.  A stage is reported
only when every earlier stage passed: a rejected submission stays rejected, and each rule can
fail on its own (every rule has a per-rule witness).  An answer that does not parse reports
valid_json alone.
"""

from __future__ import annotations

import json
import math
from typing import Any

from envgym.runtime import sqlite

_MODES = ("air", "rail", "truck")


def _stages(meta: dict) -> list[list[str]]:
    hazmat = any(
        bool(r[0])
        for r in sqlite().execute(
            f"SELECT hazmat FROM shipments WHERE shipment_id IN ({','.join('?' * len(meta['shipments']))})",
            list(meta["shipments"]),
        )
    )
    modes = ["allowed_modes"] if set(meta["allowed_modes"]) < set(_MODES) else []
    return [
        ["shipments_in_order", "lanes_exist"],
        ["route_connects", "no_repeated_hub"],
        ["max_hops"],
        modes + (["hazmat"] if hazmat else []),
        ["deadline"],
        ["capacity"],
        ["total_cost_correct", "budget"],
    ]


def verify_routing(submission: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    meta = task.get("metadata") or {}
    answer, problem = _read(submission, len(meta.get("shipments") or []))
    if answer is None:
        return {"checks": [_check("valid_json", [problem])]}
    out: dict[str, list[str]] = {}
    load: dict[str, int] = {}
    capacity: dict[str, int] = {}
    total = 0.0
    for route, wanted in zip(answer["routes"], meta["shipments"]):
        if route["shipment"] != wanted:
            out.setdefault("shipments_in_order", []).append(
                f"expected {wanted}, got {route['shipment']!r}"
            )
            continue
        s = dict(
            sqlite().execute("SELECT * FROM shipments WHERE shipment_id = ?", (wanted,)).fetchone()
        )
        lanes = []
        for lane_id in route["lanes"]:
            row = sqlite().execute("SELECT * FROM lanes WHERE lane_id = ?", (lane_id,)).fetchone()
            if row is None:
                out.setdefault("lanes_exist", []).append(f"no lane {lane_id!r}")
            else:
                lanes.append(dict(row))
        if len(lanes) < len(route["lanes"]):
            continue
        total += _route(s, lanes, meta, out)
        for lane in lanes:
            load[lane["lane_id"]] = load.get(lane["lane_id"], 0) + s["weight_kg"]
            capacity[lane["lane_id"]] = lane["capacity_kg"]
    for lane_id, kg in load.items():
        if kg > capacity[lane_id]:
            out.setdefault("capacity", []).append(
                f"{lane_id} carries {kg} kg > {capacity[lane_id]} kg"
            )
    if not any(k in out for k in ("shipments_in_order", "lanes_exist")):
        total = round(total, 2)
        claimed = answer["total_cost"]
        if not _close(claimed, total):
            out["total_cost_correct"] = [f"total_cost {claimed!r} != {total}"]
        if total > meta["budget"] + 1e-9:
            out["budget"] = [f"{total} > budget {meta['budget']}"]
    checks = [_check("valid_json", [])]
    for stage in _stages(meta):
        checks += [_check(n, out.get(n, [])) for n in stage]  # an empty stage reports nothing
        if any(n in out for n in stage):
            break  # later stages judge a submission this one already rejects
    return {"checks": checks}


def _close(claimed: Any, total: float) -> bool:
    """Whether a claimed amount is a finite JSON number within half a cent of ``total``."""
    if isinstance(claimed, bool) or not isinstance(claimed, (int, float)):
        return False
    try:
        return math.isfinite(float(claimed)) and abs(float(claimed) - total) <= 0.005
    except OverflowError:  # an integer too large for a float (10**400)
        return False


def _check(name: str, problems: list[str]) -> dict[str, Any]:
    return {"name": name, "passed": not problems, "detail": "; ".join(problems[:3])}


def _read(submission: dict[str, Any], count: int) -> tuple[dict | None, str]:
    text = submission.get("answer_text")
    if not isinstance(text, str) or not text.strip():
        return None, "answer_text is missing or empty"
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"answer_text is not JSON: {exc.msg}"
    except RecursionError:  # nesting deeper than the parser's stack: not an answer
        return None, "answer_text is nested too deeply"
    if (
        not isinstance(answer, dict)
        or "total_cost" not in answer
        or not isinstance(answer.get("routes"), list)
    ):
        return None, "answer_text must be an object with routes and total_cost"
    routes = answer["routes"]
    if len(routes) != count or not all(
        isinstance(r, dict)
        and isinstance(r.get("shipment"), str)
        and isinstance(r.get("lanes"), list)
        and r["lanes"]
        and all(isinstance(x, str) for x in r["lanes"])
        for r in routes
    ):
        return (
            None,
            f"routes must hold {count} objects with a shipment id and a non-empty lanes list",
        )
    return answer, ""


def _route(s: dict, lanes: list[dict], meta: dict, out: dict[str, list[str]]) -> float:
    sid = s["shipment_id"]
    hub, seen, hours = s["origin"], {s["origin"]}, 0
    for i, lane in enumerate(lanes):
        if lane["origin"] != hub:
            out.setdefault("route_connects", []).append(
                f"{sid}: {lane['lane_id']} does not leave {hub}"
            )
        if i:
            hours += (
                sqlite()
                .execute("SELECT handling_hours FROM hubs WHERE code = ?", (hub,))
                .fetchone()[0]
            )
        hours += lane["transit_hours"]
        hub = lane["destination"]
        if hub in seen:
            out.setdefault("no_repeated_hub", []).append(f"{sid} visits {hub} twice")
        seen.add(hub)
        if lane["mode"] not in meta["allowed_modes"]:
            out.setdefault("allowed_modes", []).append(f"{lane['lane_id']} is {lane['mode']}")
        if s["hazmat"] and not lane["hazmat_ok"]:
            out.setdefault("hazmat", []).append(f"{lane['lane_id']} refuses hazmat")
    if hub != s["destination"]:
        out.setdefault("route_connects", []).append(f"{sid} ends at {hub}, not {s['destination']}")
    if len(lanes) > meta["max_hops"]:
        out.setdefault("max_hops", []).append(f"{sid} uses {len(lanes)} lanes")
    if hours > s["deadline_hours"]:
        out.setdefault("deadline", []).append(f"{sid} takes {hours} h > {s['deadline_hours']} h")
    return sum(round(lane["cost_per_kg"] * s["weight_kg"], 2) for lane in lanes)
