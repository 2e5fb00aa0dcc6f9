"""Stronger baselines (greedy + local repair, bounded exhaustive search) on hand-made tasks with
known answers, and the top difficulty level of each procedural family defeating them."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from envgym.envs.meeting_scheduling import baselines as meeting
from envgym.envs.meeting_scheduling.world import PersonRow, RoomRow
from envgym.envs.meeting_scheduling.world import World as MeetingWorld
from envgym.envs.procedural_kit.baselines import BEYOND, Search, exhaustive, judged, repair
from envgym.envs.procedural_kit.local import LocalBundle
from envgym.envs.retail_orders import baselines as retail
from envgym.envs.retail_orders.world import CustomerRow, LineRow, ProductRow
from envgym.envs.retail_orders.world import World as RetailWorld
from envgym.envs.shipment_logistics import baselines as shipping
from envgym.envs.shipment_logistics.world import LaneRow, ShipmentRow
from envgym.envs.shipment_logistics.world import World as ShippingWorld

pytestmark = pytest.mark.timeout(300)


def test_repair_takes_the_best_move_until_solved() -> None:
    search = Search([[1, 2, 3], [1, 2, 3]], lambda c: abs(c[0] + c[1] - 5), lambda c: {})
    # (1,1)=3 -> best single move (3,1)=1 (first of the ties) -> (3,2)=0
    assert repair(search, (1, 1)) == (3, 2)


def test_repair_stops_in_a_local_optimum_that_a_swap_escapes() -> None:
    scores = {(0, 0): 1, (1, 0): 2, (0, 1): 2, (1, 1): 0}
    search = Search([[0, 1], [0, 1]], scores.__getitem__, lambda c: {})
    assert repair(search, (0, 0)) == (0, 0)  # every one-slot move makes it worse
    assert repair(search, (0, 0), pairs=True) == (1, 1)


def test_exhaustive_respects_its_bound() -> None:
    scores = {(0, 0): 1, (1, 0): 0, (0, 1): 0, (1, 1): 0}
    search = Search([[0, 1], [0, 1]], scores.__getitem__, lambda c: {})
    assert exhaustive(search, bound=4) == (0, 1)  # first in product order
    assert exhaustive(search, bound=3) == BEYOND
    assert exhaustive(Search([[0], [0]], scores.__getitem__, lambda c: {}), bound=4) is None


def _retail_world() -> RetailWorld:
    products = [
        ProductRow("A-1", "a", "Acme", 10, 4.0, 100, False),
        ProductRow("A-2", "a", "Bolt", 12, 4.0, 100, False),
        ProductRow("B-1", "b", "Acme", 5, 4.0, 100, False),
        ProductRow("B-2", "b", "Acme", 9, 4.0, 100, False),
    ]
    lines = tuple(
        LineRow(f"O-{i}", f"L-{i}", "a", refund, "2026-01-01")
        for i, refund in enumerate((50.0, 30.0, 25.0, 20.0))
    )
    return RetailWorld(
        customers=(CustomerRow("Ada", "standard", "north", 0),),
        products={p.sku: p for p in products} | {f"L-{i}": products[0] for i in range(4)},
        by_category={"a": tuple(products[:2]), "b": tuple(products[2:])},
        stock={(p.sku, "north"): 1 for p in products},
        purchased={"Ada": frozenset()},
        lines={"Ada": lines},
        windows={"a": 30},
        owned_lines={"Ada": ()},
        refunds={},
    )


def test_retail_basket_repair_swaps_the_clashing_brand() -> None:
    meta = {
        "kind": "basket",
        "customer": "Ada",
        "categories": ["a", "b"],
        "budget": 20,
        "min_rating": None,
        "distinct_brands": True,
        "max_weight_g": None,
        "exclude_purchased": False,
    }
    out = retail.baselines(_retail_world(), meta)
    assert out["greedy"] == {"customer": "Ada", "skus": ["A-1", "B-1"], "total": 15.0}  # two Acme
    assert out["greedy+repair"] == {"customer": "Ada", "skus": ["A-2", "B-1"], "total": 17.0}
    assert out["exhaustive"] == out["greedy+repair"]
    assert retail.baselines(_retail_world(), meta, bound=3)["exhaustive"] == BEYOND


def test_retail_returns_repair_needs_a_swap() -> None:
    meta = {
        "kind": "returns",
        "customer": "Ada",
        "as_of": "2026-01-05",
        "refund_min": 45,
        "refund_max": 46,
        "one_per_order": False,
        "exclude_category": None,
    }
    out = retail.baselines(_retail_world(), meta)
    assert out["greedy"]["refund_total"] == 30.0  # 50 is over the maximum, then 30, nothing fits
    # 30 -> 30+20 (one move) -> 25+20 (a swap): refund 45
    assert [r["order_id"] for r in out["greedy+repair"]["returns"]] == ["O-2", "O-3"]
    assert out["greedy+repair"]["refund_total"] == 45.0
    assert out["exhaustive"] == out["greedy+repair"]


def _shipping_world() -> ShippingWorld:
    lane = {
        "AB": LaneRow("AB", "A", "B", "truck", 1, 1.0, 10, True),
        "AC": LaneRow("AC", "A", "C", "truck", 1, 1.0, 100, True),
        "CB": LaneRow("CB", "C", "B", "truck", 1, 1.0, 100, True),
    }
    lanes_from = {"A": (lane["AB"], lane["AC"]), "C": (lane["CB"],)}
    return ShippingWorld(
        {"A": 0, "B": 0, "C": 0},
        lanes_from,
        {
            "S1": ShipmentRow("S1", "A", "B", 5, False, 10),
            "S2": ShipmentRow("S2", "A", "B", 10, False, 10),
        },
    )


def test_shipping_repair_is_stuck_where_exhaustive_search_is_not() -> None:
    meta = {"shipments": ["S1", "S2"], "max_hops": 2, "allowed_modes": ["truck"], "budget": 20}
    out = shipping.baselines(_shipping_world(), meta)
    # greedy: S1 takes the direct lane, S2 (heavier) the detour: 5 + 20 = 25 > 20; moving either
    # one alone overloads the direct lane or costs more, so repair stays there
    greedy = {
        "routes": [{"shipment": "S1", "lanes": ["AB"]}, {"shipment": "S2", "lanes": ["AC", "CB"]}],
        "total_cost": 25.0,
    }
    assert out["greedy"] == greedy and out["greedy+repair"] == greedy
    assert out["exhaustive"] == {
        "routes": [{"shipment": "S1", "lanes": ["AC", "CB"]}, {"shipment": "S2", "lanes": ["AB"]}],
        "total_cost": 20.0,
    }


def test_meeting_repair_moves_the_flexible_meeting() -> None:
    people = {n: PersonRow(n, "core", 0, (9 * 60, 11 * 60)) for n in ("Ann", "Bo")}
    busy = {("Bo", "2026-01-05"): ((10 * 60, 11 * 60),)}
    world = MeetingWorld(people, busy, frozenset(), (RoomRow("Alder", 4, 1, False),), {})
    meta = {
        "date": "2026-01-05",
        "protect_lunch": False,
        "buffer_min": 0,
        "meetings": [
            {
                "id": "M1",
                "attendees": ["Ann"],
                "duration_min": 30,
                "needs_video": False,
                "representative_team": None,
            },
            {
                "id": "M2",
                "attendees": ["Ann", "Bo"],
                "duration_min": 60,
                "needs_video": False,
                "representative_team": None,
            },
        ],
    }
    out = meeting.baselines(world, meta)
    starts = {k: [row["start_utc"] for row in v["schedule"]] for k, v in out.items()}
    assert starts == {
        "greedy": ["09:00", "09:00"],  # M2's only start is taken
        "greedy+repair": ["10:00", "09:00"],
        "exhaustive": ["10:00", "09:00"],
    }


FAMILIES = ("retail_orders", "shipment_logistics", "meeting_scheduling")


@pytest.mark.parametrize("family", FAMILIES)
def test_top_level_tasks_defeat_the_stronger_baselines(family: str, tmp_path: Path) -> None:
    build = importlib.import_module(f"envgym.envs.{family}.build")
    host = importlib.import_module(f"envgym.envs.{family}.baselines")
    top = 5
    for seed in (0, 1):
        out = build.build_bundle(tmp_path / f"s{seed}", seed=seed, n_tasks=1, difficulties=(top,))
        world = build.RECIPE.load_world(out / "state" / "db.sqlite")
        task = json.loads((out / "tasks.jsonl").read_text().splitlines()[0])
        with LocalBundle(out).episode() as episode:
            answers = host.baselines(world, task["metadata"])
            outcome = judged(lambda sub, t=task: episode.verify(sub, t), answers)
        defeated = {"greedy": False, "greedy+repair": False, "exhaustive": BEYOND}
        assert outcome == defeated, (seed, outcome)


def test_the_kit_redraws_a_top_level_task_any_stronger_baseline_solves(tmp_path: Path) -> None:
    from dataclasses import replace

    from envgym.envs.procedural_kit.build import UnsolvableTask, build_procedural_bundle
    from envgym.envs.retail_orders.build import RECIPE

    # level 1 made a "top level": greedy solves every level-1 basket, so no draw can be kept
    recipe = replace(RECIPE, top_levels=(1,), max_draws=5)
    with pytest.raises(UnsolvableTask, match="greedy solves it"):
        build_procedural_bundle(recipe, tmp_path / "b", seed=0, n_tasks=1, difficulties=(1,))
