"""Trip planning's stronger baselines (greedy + local repair, bounded exhaustive search) on a
hand-made world with known answers, and its top level defeating them."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from envgym.envs.procedural_kit.baselines import BEYOND, judged
from envgym.envs.procedural_kit.local import LocalBundle
from envgym.envs.trip_planning import baselines as trip
from envgym.envs.trip_planning.build import TOP_LEVELS, build_bundle, stronger_solves
from envgym.envs.trip_planning.constraints import (
    BudgetTiers,
    Constraints,
    Tier,
    TransportRule,
    TripSpec,
    WeatherRule,
)
from envgym.envs.trip_planning.data import write_db
from envgym.envs.trip_planning.tasks import UnsolvableTask, generate_tasks
from envgym.envs.trip_planning.world import (
    AttractionRow,
    HotelRow,
    RestaurantRow,
    World,
    load_world,
)
from envgym.runtime import CODE_FILES

pytestmark = pytest.mark.timeout(600)
TEMPLATES = Path(trip.__file__).resolve().parent / "bundle_files"
DATES = ("2025-10-01", "2025-10-02")


def _world() -> World:
    """Ada (the start) and Bly; greedy goes to Bly (first in the tools' order) and takes its
    300 CNY hotel, below every tier; the 600 CNY one is mid-tier."""
    return World(
        cities=("Ada", "Bly"),
        hotels={
            "Ada": (HotelRow("a-inn", 250, 4.0),),
            "Bly": (HotelRow("b-inn", 300, 4.0), HotelRow("b-grand", 600, 4.0)),
        },
        restaurants={
            "Ada": (RestaurantRow("a-1", 10, 3.0), RestaurantRow("a-2", 20, 3.0)),
            "Bly": (
                RestaurantRow("b-1", 10, 3.0),
                RestaurantRow("b-2", 20, 3.5),
                RestaurantRow("b-3", 30, 4.5),
            ),
        },
        attractions={
            "Ada": (AttractionRow("a-park", 0, 4.0, False),),
            "Bly": (AttractionRow("b-park", 5, 4.0, False),),
        },
        connections={},
        weather={(c, d): "sunny" for c in ("Ada", "Bly") for d in DATES},
        dates=DATES,
    )


def _spec(**mid: float) -> TripSpec:
    tiers = BudgetTiers(days=(2,), tiers=(Tier("mid", 500, None, **mid),), require_tier=True)
    return TripSpec("Ada", DATES[0], 2, Constraints(budget_tiers=tiers))


def _day(city: str, date: str, hotel: str, lunch: str, sight: str, dinner: str) -> dict:
    return {
        "time": date,
        "city": city,
        "hotel": hotel,
        "afternoon_restaurant": lunch,
        "afternoon_attraction": sight,
        "evening_restaurant": dinner,
    }


DAY1 = _day("Ada", DATES[0], "a-inn", "a-1", "a-park", "a-2")


def test_repair_moves_the_hotel_into_a_tier() -> None:
    out = trip.baselines(_world(), _spec().metadata())
    assert out["greedy"] == [DAY1, _day("Bly", DATES[1], "b-inn", "b-1", "b-park", "b-2")]
    assert out["greedy+repair"] == [DAY1, _day("Bly", DATES[1], "b-grand", "b-1", "b-park", "b-2")]
    assert out["exhaustive"] == out["greedy+repair"]  # the cheapest valid day in Bly
    assert trip.baselines(_world(), _spec().metadata(), bound=0)["exhaustive"] == BEYOND


def test_repair_is_stuck_where_exhaustive_search_is_not() -> None:
    # The mid tier also wants a restaurant rated 4.0+: the better hotel alone breaks that
    # condition (worse), the better restaurant alone leaves the hotel below every tier (no
    # better), so no single change helps; both at once do.
    out = trip.baselines(_world(), _spec(restaurants_any_min_rating=4.0).metadata())
    assert out["greedy+repair"] == out["greedy"]
    assert out["exhaustive"] == [DAY1, _day("Bly", DATES[1], "b-grand", "b-1", "b-park", "b-3")]


def test_a_task_survives_the_trip_through_its_metadata() -> None:
    c = Constraints(
        budget_tiers=_spec(restaurants_total_lt=300, ticket_lt=100).constraints.budget_tiers,
        hotel_min_rating=4.0,
        max_ticket=80,
        total_budget=2000,
        weather=WeatherRule("avoid_rain"),
        transport=TransportRule(("train", "bus"), 3.0, "12:00", 400),
    )
    spec = TripSpec("Ada", DATES[0], 2, c)
    assert trip.spec_from_metadata(spec.metadata()) == spec
    plain = replace(spec, constraints=Constraints())
    assert trip.spec_from_metadata(plain.metadata()) == plain


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database and the bundle's code, enough to run its verifier (no tasks needed)."""
    root = tmp_path_factory.mktemp("trip")
    (root / "state").mkdir()
    write_db(root / "state" / "db.sqlite", seed=0)
    for name in CODE_FILES:
        shutil.copyfile(TEMPLATES / name, root / name)
    return root


def test_a_top_level_draw_a_stronger_baseline_solves_is_redrawn(bundle: Path) -> None:
    world = load_world(bundle / "state" / "db.sqlite")
    with LocalBundle(bundle).episode() as ep:

        def beaten(spec: TripSpec) -> str | None:
            return stronger_solves(ep, world, spec)

        # each seed's first solvable level-5 draw, and the first baseline that solves it
        for seed, solver in ((2, "exhaustive"), (15, "greedy+repair")):
            plain = generate_tasks(world, seed=seed, n_tasks=1, difficulties=(5,))[0]
            assert beaten(plain.spec) == solver, seed
            top = generate_tasks(
                world, seed=seed, n_tasks=1, difficulties=(5,), stronger=beaten, top_levels=(5,)
            )[0]
            assert top.spec != plain.spec and beaten(top.spec) is None, seed
        # Greedy solves level-1 trips (and each is within the search bound): none can be kept.
        with pytest.raises(UnsolvableTask, match=r"greedy.* solved some"):
            generate_tasks(
                world, seed=0, n_tasks=1, difficulties=(1,), stronger=beaten, top_levels=(1,)
            )


def test_built_top_level_tasks_defeat_the_stronger_baselines(tmp_path: Path) -> None:
    # seed 3's level-5 task without the top-level re-draw is one the exhaustive search solves
    assert TOP_LEVELS == (5,)
    out = build_bundle(
        tmp_path / "b", seed=3, n_tasks=1, difficulties=(5,), include_worked_example=False
    )
    world = load_world(out / "state" / "db.sqlite")
    task = json.loads((out / "tasks.jsonl").read_text().splitlines()[0])
    with LocalBundle(out).episode() as ep:
        outcome = judged(lambda sub: ep.verify(sub, task), trip.baselines(world, task["metadata"]))
    assert outcome == {"greedy": False, "greedy+repair": False, "exhaustive": BEYOND}
