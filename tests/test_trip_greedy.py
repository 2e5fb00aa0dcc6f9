"""The bundle's greedy baseline (`greedy_trip` in solution.py) runs on tasks with a transport
rule: services are keyed by code, not name (it raised KeyError on every such task, so its
solve share at the levels with transport rules was a crash, not a measurement)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

SOLUTION = (
    Path(__file__).resolve().parents[1] / "envgym/envs/trip_planning/bundle_files/solution.py"
)
pytestmark = pytest.mark.timeout(30)


def _solution() -> Any:
    spec = importlib.util.spec_from_file_location("_trip_solution_under_test", SOLUTION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Tools:
    """Two cities, two trains from A to B at one price (the sort must break the tie by code)."""

    def __init__(self) -> None:
        self.submitted: list[dict] | None = None

    def get_all_cities(self) -> list[str]:
        return ["A", "B"]

    def get_inter_city_transport(self, from_city: str, to_city: str) -> list[dict]:
        if (from_city, to_city) != ("A", "B"):
            return []
        train = {"mode": "train", "price": 50, "duration_minutes": 90, "arrival_time": "10:00"}
        return [{**train, "code": "T2"}, {**train, "code": "T1"}]

    def get_all_hotels_by_city(self, city: str) -> list[dict]:
        return [{"name": f"{city} Inn", "price_per_night": 100, "rating": 4.0}]

    def get_all_restaurants_by_city(self, city: str) -> list[dict]:
        return [
            {"name": f"{city} Noodles", "avg_price_per_person": 20, "rating": 4.0},
            {"name": f"{city} Dumplings", "avg_price_per_person": 30, "rating": 4.0},
        ]

    def get_all_attractions_by_city(self, city: str) -> list[dict]:
        return [{"name": f"{city} Park", "ticket_price": 0, "rating": 4.0}]

    def submit_result(self, answer_text: str) -> None:
        self.submitted = json.loads(answer_text)


def test_greedy_takes_the_cheapest_service_on_a_task_with_a_transport_rule() -> None:
    tools = _Tools()
    task = {
        "metadata": {
            "start_city": "A",
            "dates": ["2025-10-01", "2025-10-02"],
            "constraints": {"transport": {"modes": ["train"]}},
        }
    }
    _solution().greedy_trip(tools, task)
    assert tools.submitted is not None
    assert [d["city"] for d in tools.submitted] == ["A", "B"]
    assert [d.get("transport") for d in tools.submitted] == [None, "T1"]
