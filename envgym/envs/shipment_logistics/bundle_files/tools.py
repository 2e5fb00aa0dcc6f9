"""Logistics tools over the bundle's ``db.sqlite``: hubs, lanes and shipments.

Lane and hub identifiers are exact strings as the listing tools return them.
"""

from __future__ import annotations

from typing import Any

from envgym.runtime import sqlite


def list_hubs() -> list[dict[str, Any]]:
    """Every hub: code, city and handling_hours (added when a route passes through it)."""
    return [
        dict(r)
        for r in sqlite().execute("SELECT code, city, handling_hours FROM hubs ORDER BY code")
    ]


def get_hub(code: str) -> dict[str, Any]:
    """One hub by code.

    Args:
        code: A hub code, e.g. "H-ALD".

    Returns:
        code, city, x_km and y_km (map position) and handling_hours.
    """
    row = sqlite().execute("SELECT * FROM hubs WHERE code = ?", (code,)).fetchone()
    if row is None:
        raise KeyError(f"no hub {code!r}")
    return dict(row)


def list_lanes_from(hub: str, mode: str | None = None) -> list[dict[str, Any]]:
    """Lanes leaving a hub, by lane id.

    Args:
        hub: The origin hub's code.
        mode: Only lanes of this mode (truck, rail or air); omit for all.

    Returns:
        One entry per lane: lane_id, destination, mode, transit_hours, cost_per_kg (USD),
        capacity_kg (per dispatch, shared by everything routed over it) and hazmat_ok.
    """
    get_hub(hub)
    rows = sqlite().execute(
        "SELECT lane_id, destination, mode, transit_hours, cost_per_kg, capacity_kg, hazmat_ok FROM lanes "
        "WHERE origin = ? AND (mode = ? OR ? IS NULL) ORDER BY lane_id",
        (hub, mode, mode),
    )
    return [dict(r, hazmat_ok=bool(r["hazmat_ok"])) for r in rows]


def get_lane(lane_id: str) -> dict[str, Any]:
    """One lane by id.

    Args:
        lane_id: A lane id, e.g. "LN-117".
    """
    row = sqlite().execute("SELECT * FROM lanes WHERE lane_id = ?", (lane_id,)).fetchone()
    if row is None:
        raise KeyError(f"no lane {lane_id!r}")
    return dict(row, hazmat_ok=bool(row["hazmat_ok"]))


def get_shipment(shipment_id: str) -> dict[str, Any]:
    """One shipment by id.

    Args:
        shipment_id: e.g. "SHP-5012".

    Returns:
        shipment_id, origin and destination hub codes, weight_kg, hazmat and deadline_hours
        (door to door: transit plus handling at intermediate hubs).
    """
    row = (
        sqlite().execute("SELECT * FROM shipments WHERE shipment_id = ?", (shipment_id,)).fetchone()
    )
    if row is None:
        raise KeyError(f"no shipment {shipment_id!r}")
    return dict(row, hazmat=bool(row["hazmat"]))


def quote_lane(lane_id: str, weight_kg: int) -> float:
    """What carrying a weight over a lane costs: cost_per_kg x weight, rounded to cents.

    Args:
        lane_id: A lane id.
        weight_kg: The weight in kilograms.
    """
    return round(get_lane(lane_id)["cost_per_kg"] * weight_kg, 2)


def submit_result(answer_text: str) -> str:
    """Submit the final routing; this ends the task.

    Args:
        answer_text: The routes as JSON text, in the format the task asks for.
    """
    return "submitted"
