"""The hub network on the host: feasible routes per shipment and the cost of a route set.

A route is a simple path of lanes from the shipment's origin to its destination; its time is
the lanes' transit hours plus the handling hours of every intermediate hub.  Lanes carry the
summed weight of the task's shipments routed over them, up to their capacity.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from envgym.envs.shipment_logistics import data as db


@dataclass(frozen=True)
class LaneRow:
    lane_id: str
    origin: str
    destination: str
    mode: str
    hours: int
    rate: float
    capacity: int
    hazmat_ok: bool


@dataclass(frozen=True)
class ShipmentRow:
    shipment_id: str
    origin: str
    destination: str
    weight: int
    hazmat: bool
    deadline: int


@dataclass(frozen=True)
class Route:
    shipment: str
    lanes: tuple[LaneRow, ...]
    cost: float


@dataclass(frozen=True)
class World:
    handling: dict[str, int]
    lanes_from: dict[str, tuple[LaneRow, ...]]
    shipments: dict[str, ShipmentRow]
    _routes: dict[tuple[str, int, tuple[str, ...]], list[Route]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def routes(self, shipment: str, max_hops: int, modes: tuple[str, ...]) -> list[Route]:
        """Every feasible route of a shipment, cheapest first (ties by lane ids); cached, since
        the drawer asks for the same shipments many times."""
        key = (shipment, max_hops, tuple(modes))
        if key not in self._routes:
            self._routes[key] = self._enumerate(shipment, max_hops, modes)
        return list(self._routes[key])

    def _enumerate(self, shipment: str, max_hops: int, modes: tuple[str, ...]) -> list[Route]:
        s = self.shipments[shipment]
        out: list[Route] = []

        def walk(
            hub: str, path: tuple[LaneRow, ...], hours: int, seen: frozenset[str]
        ) -> Iterator[None]:
            if hub == s.destination:
                cost = round(sum(round(lane.rate * s.weight, 2) for lane in path), 2)
                out.append(Route(shipment, path, cost))
                return
            if len(path) == max_hops:
                return
            extra = self.handling[hub] if path else 0
            for lane in self.lanes_from.get(hub, ()):
                if (
                    lane.mode not in modes
                    or lane.destination in seen
                    or (s.hazmat and not lane.hazmat_ok)
                ):
                    continue
                if lane.capacity < s.weight or hours + extra + lane.hours > s.deadline:
                    continue
                yield from walk(
                    lane.destination,
                    path + (lane,),
                    hours + extra + lane.hours,
                    seen | {lane.destination},
                )

        for _ in walk(s.origin, (), 0, frozenset({s.origin})):
            pass
        return sorted(out, key=lambda r: (r.cost, [lane.lane_id for lane in r.lanes]))


def fits(routes: tuple[Route, ...], world: World) -> bool:
    """Whether the routes together stay within every lane's capacity."""
    load: dict[str, int] = defaultdict(int)
    for route in routes:
        for lane in route.lanes:
            load[lane.lane_id] += world.shipments[route.shipment].weight
            if load[lane.lane_id] > lane.capacity:
                return False
    return True


def load_world(path: Path) -> World:
    engine = create_engine(f"sqlite:///{Path(path)}")
    try:
        with Session(engine) as s:
            handling = {h.code: h.handling_hours for h in s.scalars(select(db.Hub))}
            lanes: dict[str, list[LaneRow]] = defaultdict(list)
            for lane in s.scalars(select(db.Lane).order_by(db.Lane.lane_id)):
                lanes[lane.origin].append(
                    LaneRow(
                        lane.lane_id,
                        lane.origin,
                        lane.destination,
                        lane.mode,
                        lane.transit_hours,
                        lane.cost_per_kg,
                        lane.capacity_kg,
                        lane.hazmat_ok,
                    )
                )
            shipments = {
                x.shipment_id: ShipmentRow(
                    x.shipment_id, x.origin, x.destination, x.weight_kg, x.hazmat, x.deadline_hours
                )
                for x in s.scalars(select(db.Shipment).order_by(db.Shipment.shipment_id))
            }
    finally:
        engine.dispose()
    return World(handling, {k: tuple(v) for k, v in lanes.items()}, shipments)
