"""Shipment logistics: network, feasible routes, tools, verifier, envgym check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.bundle import load_bundle
from envgym.check import check_bundle
from envgym.envs.procedural_kit.local import LocalBundle
from envgym.envs.shipment_logistics.build import build_bundle
from envgym.envs.shipment_logistics.data import write_db
from envgym.envs.shipment_logistics.world import load_world

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle(tmp_path_factory.mktemp("ship") / "b", seed=4, n_tasks=5)


def failed(report: dict) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["passed"]}


def test_database_is_deterministic(tmp_path: Path) -> None:
    assert (
        write_db(tmp_path / "a.sqlite", 9).read_bytes()
        == write_db(tmp_path / "b.sqlite", 9).read_bytes()
    )


def test_levels(bundle: Path) -> None:
    tasks = load_bundle(bundle).tasks
    assert [len(t.metadata["shipments"]) for t in tasks] == [1, 2, 2, 3, 4]
    assert [t.metadata["max_hops"] for t in tasks] == [4, 4, 4, 5, 5]


def test_routes_respect_every_rule(bundle: Path) -> None:
    world = load_world(bundle / "state" / "db.sqlite")
    meta = load_bundle(bundle).tasks[3].metadata
    for sid in meta["shipments"]:
        s = world.shipments[sid]
        routes = world.routes(sid, meta["max_hops"], tuple(meta["allowed_modes"]))
        assert routes and [r.cost for r in routes] == sorted(r.cost for r in routes)
        for route in routes[:5]:
            assert (
                route.lanes[0].origin == s.origin and route.lanes[-1].destination == s.destination
            )
            assert all(a.destination == b.origin for a, b in zip(route.lanes, route.lanes[1:]))
            assert all(lane.mode in meta["allowed_modes"] for lane in route.lanes)
            assert not s.hazmat or all(lane.hazmat_ok for lane in route.lanes)


def test_tools(bundle: Path) -> None:
    with LocalBundle(bundle).episode() as ep:
        hub = ep.call_tool("list_hubs")[0]["code"]
        lanes = ep.call_tool("list_lanes_from", hub=hub)
        assert lanes == sorted(lanes, key=lambda lane: lane["lane_id"])
        lane = lanes[0]
        assert ep.call_tool("quote_lane", lane_id=lane["lane_id"], weight_kg=100) == round(
            lane["cost_per_kg"] * 100, 2
        )
        assert all(
            x["mode"] == "rail" for x in ep.call_tool("list_lanes_from", hub=hub, mode="rail")
        )
        with pytest.raises(KeyError, match="no lane"):
            ep.call_tool("get_lane", lane_id="LN-0")


def test_verifier_names_each_broken_rule(bundle: Path) -> None:
    task = load_bundle(bundle).tasks[3].to_dict()
    with LocalBundle(bundle).episode() as ep:
        gold = ep.solve(task).submission
        answer = json.loads(gold["answer_text"])
        assert failed(ep.verify(gold, task)) == set()
        off = dict(answer, total_cost=round(answer["total_cost"] + 1, 2))
        assert failed(ep.verify({"answer_text": json.dumps(off)}, task)) == {"total_cost_correct"}
        routes = [dict(r) for r in answer["routes"]]
        routes[0] = dict(
            routes[0], lanes=routes[0]["lanes"][::-1] if len(routes[0]["lanes"]) > 1 else ["LN-0"]
        )
        assert failed(ep.verify({"answer_text": json.dumps(dict(answer, routes=routes))}, task)) & {
            "route_connects",
            "lanes_exist",
        }
        reordered = dict(answer, routes=answer["routes"][::-1])
        assert "shipments_in_order" in failed(
            ep.verify({"answer_text": json.dumps(reordered)}, task)
        )


def test_envgym_check_passes_in_the_sandbox(bundle: Path, require_backend) -> None:
    require_backend("bwrap")
    report = check_bundle(load_bundle(bundle), sandbox="bwrap")
    assert report.passed, report.to_dict()
