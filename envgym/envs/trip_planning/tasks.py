"""Seeded task generation over a database, graded 1 (easy) … 5 (hard).

Each draw is proved solvable by :class:`Planner` (a witness plan is constructed from the
database) and re-rolled otherwise.  Trip-wide budgets are set *from* the witness — a little
above the cheapest plan — so they are tight by construction.  Tasks carry every parameter in
``metadata`` (see :meth:`TripSpec.metadata`); the verifier never parses the prompt.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from envgym.envs.procedural_kit.build import UnsolvableTask
from envgym.envs.procedural_kit.task_line import TaskNames
from envgym.envs.trip_planning.constraints import (
    HANGZHOU_3DAY,
    BudgetTiers,
    Constraints,
    Tier,
    TransportRule,
    TripSpec,
    WeatherRule,
)
from envgym.envs.trip_planning.planner import Plan, Planner
from envgym.envs.trip_planning.prompts import render_prompt, seed_prompt
from envgym.envs.trip_planning.world import World

WORKED_EXAMPLE_ID = "hangzhou-3day"
# solution.py's greedy baseline (greedy_trip) is run and tabulated by `envgym check`
TASK_NAMES = TaskNames(
    "trip", solution="solve_trip", verifier="verify_trip", baseline="greedy_trip"
)
MAX_DRAWS = 200
# spec -> the name of a stronger baseline whose answer the task's verifier accepts, or None
Stronger = Callable[[TripSpec], "str | None"]
DAYS_BY_DIFFICULTY = {1: 2, 2: 3, 3: 3, 4: 4, 5: 5}


@dataclass(frozen=True)
class GeneratedTask:
    spec: TripSpec
    witness: Plan  # proof of solvability; never written into the bundle
    task: dict[str, Any]  # one line of tasks.jsonl


def worked_example(world: World) -> GeneratedTask:
    """The seed's Hangzhou example (§3.2.3), exactly as stated there."""
    witness = Planner(world, HANGZHOU_3DAY).witness()
    if witness is None:
        raise UnsolvableTask(
            f"{WORKED_EXAMPLE_ID} has no solution on this database; build with "
            "include_worked_example=False or another seed"
        )
    return GeneratedTask(
        HANGZHOU_3DAY,
        witness,
        replace(TASK_NAMES, solution="solve_hangzhou_3day").line(
            0, 3, seed_prompt(HANGZHOU_3DAY), HANGZHOU_3DAY.metadata(), task_id=WORKED_EXAMPLE_ID
        ),
    )


def generate_tasks(
    world: World,
    *,
    seed: int,
    n_tasks: int,
    difficulties: tuple[int, ...] = (1, 2, 3, 4, 5),
    accept: Callable[[TripSpec, Plan], bool] | None = None,
    stronger: Stronger | None = None,
    top_levels: tuple[int, ...] = (),
) -> list[GeneratedTask]:
    """``n_tasks`` tasks, difficulties cycling through ``difficulties``.

    ``accept`` may veto a solvable draw (the build vetoes tasks whose every rule cannot be
    given a per-rule witness); a vetoed draw is re-rolled like an unsolvable one.  At
    ``top_levels``, a solvable draw that ``stronger`` names a baseline for (one whose answer
    the verifier accepts) is re-rolled too, before ``accept`` (the cheap reason first).
    """
    if not difficulties or any(d not in DAYS_BY_DIFFICULTY for d in difficulties):
        raise ValueError(f"difficulties must be a non-empty subset of 1..5, got {difficulties!r}")
    rng = random.Random(f"trip-planning-tasks:{seed}")
    out = []
    for i in range(n_tasks):
        difficulty = difficulties[i % len(difficulties)]
        beaten = stronger if difficulty in top_levels else None
        spec, witness = _draw_solvable(world, rng, difficulty, accept, beaten)
        line = TASK_NAMES.line(i, difficulty, render_prompt(spec), spec.metadata())
        out.append(GeneratedTask(spec, witness, line))
    return out


def _draw_solvable(
    world: World,
    rng: random.Random,
    difficulty: int,
    accept: Callable[[TripSpec, Plan], bool] | None = None,
    stronger: Stronger | None = None,
) -> tuple[TripSpec, Plan]:
    beaten: set[str] = set()
    for _ in range(MAX_DRAWS):
        spec = _draw(world, rng, difficulty)
        if spec is None:
            continue
        witness = _with_budgets(world, spec, rng, difficulty)
        if witness is None:
            continue
        solver = stronger(witness[0]) if stronger is not None else None
        if solver is not None:
            beaten.add(solver)
            continue
        if accept is None or accept(*witness):
            return witness
    solved = f" ({', '.join(sorted(beaten))} solved some)" if beaten else ""
    raise UnsolvableTask(
        f"no solvable difficulty-{difficulty} task in {MAX_DRAWS} draws{solved}; "
        "the database is too small for this difficulty"
    )


def _draw(world: World, rng: random.Random, difficulty: int) -> TripSpec | None:
    days = DAYS_BY_DIFFICULTY[difficulty]
    start_city = rng.choice(world.cities)
    latest = len(world.dates) - days
    if latest < 0:
        return None
    # Stay inside the holiday fortnight that the weather table covers.
    start_date = world.dates[rng.randint(0, latest)]
    tight = (difficulty - 1) / 4  # 0 … 1: higher difficulty draws from the stricter end
    c = Constraints()
    floors = ["hotel_min_rating", "restaurant_min_rating", "attraction_min_rating", "max_ticket"]
    n_floors = {1: 1, 2: 1, 3: 1, 4: 2, 5: 2}[difficulty]
    for key in rng.sample(floors, n_floors):
        c = replace(c, **{key: _floor(rng, key, tight)})
    if difficulty >= 2:
        tier_days = tuple(range(2, {2: 3, 3: 3, 4: 4, 5: 6}[difficulty]))
        c = replace(c, budget_tiers=_tiers(rng, tier_days, tight))
    if difficulty >= 3:
        c = replace(c, weather=WeatherRule(rng.choice(["rain_indoor", "avoid_rain"])))
    if difficulty >= 4:
        modes = (
            ("train",)
            if difficulty == 4
            else rng.choice([("train",), ("train", "bus"), ("train", "flight")])
        )
        c = replace(
            c,
            transport=TransportRule(
                modes=modes,
                max_hours=rng.choice([3.0, 4.0, 5.0] if difficulty == 4 else [2.5, 3.0, 4.0]),
                arrive_by=rng.choice(["12:00", "13:00"]) if difficulty == 5 else None,
            ),
        )
    spec = TripSpec(start_city, start_date, days, c)
    if c.weather is not None and not _weather_binds(world, spec):
        return None
    return spec


def _floor(rng: random.Random, key: str, tight: float) -> float | int:
    options: dict[str, list[Any]] = {
        "hotel_min_rating": [3.5, 3.8, 4.0, 4.2],
        "restaurant_min_rating": [3.4, 3.6, 3.8, 4.0],
        "attraction_min_rating": [3.8, 4.0, 4.2, 4.4],
        "max_ticket": [150, 120, 100, 80, 60],
    }
    return _pick(rng, options[key], tight)


def _pick(rng: random.Random, options: list[Any], tight: float) -> Any:
    """One of the options (ordered lenient → strict), centred on the strictness ``tight``."""
    centre = round(tight * (len(options) - 1))
    return options[min(len(options) - 1, max(0, centre + rng.choice([-1, 0, 0, 1])))]


def _tiers(rng: random.Random, days: tuple[int, ...], tight: float) -> BudgetTiers:
    """The seed's three tiers with jittered thresholds."""
    low, mid, lux = (
        rng.choice([150, 200, 250]),
        rng.choice([450, 500, 550]),
        rng.choice([750, 800, 900]),
    )
    return BudgetTiers(
        days=days,
        require_tier=True,
        tiers=(
            Tier(
                "luxury",
                lux,
                None,
                restaurants_total_lt=_pick(rng, [450, 400, 350, 300, 250], tight),
                restaurants_all_min_rating=_pick(rng, [3.6, 3.8, 4.0, 4.2], tight),
                ticket_lt=_pick(rng, [160, 140, 120, 100, 80], tight),
            ),
            Tier(
                "mid-to-high",
                mid,
                lux,
                restaurants_any_min_rating=_pick(rng, [3.8, 4.0, 4.2, 4.4], tight),
                ticket_lt=_pick(rng, [200, 180, 150, 120], tight),
            ),
            Tier(
                "affordable",
                low,
                mid,
                restaurants_any_min_rating=_pick(rng, [3.0, 3.2, 3.5, 3.8], tight),
            ),
        ),
    )


def _weather_binds(world: World, spec: TripSpec) -> bool:
    """A weather rule only means something if it rains somewhere during the trip."""
    assert spec.constraints.weather is not None
    rainy = spec.constraints.weather.rainy_conditions
    wet = sum(world.weather[(c, d)] in rainy for c in world.cities for d in spec.dates[1:])
    return wet >= 2


def _with_budgets(
    world: World, spec: TripSpec, rng: random.Random, difficulty: int
) -> tuple[TripSpec, Plan] | None:
    """Solve without trip-wide budgets; at difficulty 5, then set budgets that bind.

    The trip budget sits at a low quantile of what the otherwise-valid plans cost, and the
    fare budget at a quantile of the fares among the plans within that budget, so only a
    small, known share of city sequences survives both (never none: the quantile is a plan).
    """
    planner = Planner(world, spec)
    if difficulty < 5:
        witness = planner.witness()
        return None if witness is None else (spec, witness)
    plans = list(planner.plans())
    if not plans:
        return None
    costs = sorted(p.cost for p in plans)
    total = _round_up(costs[int(rng.choice([0.2, 0.3, 0.5]) * (len(costs) - 1))], 10)
    fares = sorted(p.transport_cost for p in plans if p.cost <= total)
    fare = _round_up(fares[int(rng.choice([0.5, 0.7]) * (len(fares) - 1))], 10)
    c = spec.constraints
    assert c.transport is not None
    spec = replace(
        spec,
        constraints=replace(c, total_budget=total, transport=replace(c.transport, budget=fare)),
    )
    witness = Planner(world, spec).witness()  # re-proved under the final spec
    return None if witness is None else (spec, witness)


def _round_up(x: float, step: int) -> int:
    return int(math.ceil(x / step) * step)
