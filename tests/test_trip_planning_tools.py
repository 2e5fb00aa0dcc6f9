"""The 15 trip-planning tools of DeepSeek-V3.2 §3.2.3: names, documentation, behaviour, errors."""

from __future__ import annotations

import ast
import inspect
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgym.bundle import load_bundle
from envgym.envs.procedural_kit.local import Episode, LocalBundle
from envgym.envs.trip_planning.build import build_bundle

pytestmark = pytest.mark.timeout(60)

SEED_TOOLS = {
    "get_all_attractions_by_city": ["city"],
    "get_all_cities": [],
    "get_all_hotels_by_city": ["city"],
    "get_all_restaurants_by_city": ["city"],
    "get_city_by_attraction": ["attraction"],
    "get_city_by_hotel": ["hotel"],
    "get_city_by_restaurant": ["restaurant"],
    "get_city_transport": ["city"],
    "get_infos_by_attraction": ["info_keywords", "attraction"],
    "get_infos_by_city": ["info_keywords", "city"],
    "get_infos_by_hotel": ["info_keywords", "hotel"],
    "get_infos_by_restaurant": ["info_keywords", "restaurant"],
    "get_inter_city_transport": ["from_city", "to_city"],
    "get_weather_by_city_date": ["city", "date"],
    "submit_result": ["answer_text"],
}
DAY = {
    "time": "2025-10-01",
    "city": "Hangzhou",
    "hotel": "h",
    "afternoon_restaurant": "r1",
    "afternoon_attraction": "a",
    "evening_restaurant": "r2",
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> LocalBundle:
    root = build_bundle(tmp_path_factory.mktemp("b") / "trip", seed=0, n_tasks=2)
    return LocalBundle(root)


@pytest.fixture()
def ep(bundle: LocalBundle) -> Iterator[Episode]:
    with bundle.episode() as episode:
        yield episode


def test_exactly_the_seed_tools_with_the_seed_arguments(bundle: LocalBundle) -> None:
    assert set(bundle.tool_functions) == set(SEED_TOOLS)
    for name, fn in bundle.tool_functions.items():
        params = inspect.signature(fn).parameters
        assert list(params) == SEED_TOOLS[name], name


def test_tools_are_typed_and_documented(bundle: LocalBundle) -> None:
    for name, fn in bundle.tool_functions.items():
        doc = inspect.getdoc(fn) or ""
        assert doc.split("\n\n")[0].strip(), f"{name} has no description"
        for param in inspect.signature(fn).parameters.values():
            assert param.annotation is not inspect.Parameter.empty, (name, param.name)
            assert f"    {param.name}: " in inspect.getdoc(fn).split("Args:")[1], (name, param.name)


def test_info_keywords_docs_list_the_valid_keywords(bundle: LocalBundle) -> None:
    infos = bundle.tools_module._INFOS
    for tool, table in (
        ("get_infos_by_hotel", "hotels"),
        ("get_infos_by_restaurant", "restaurants"),
        ("get_infos_by_attraction", "attractions"),
        ("get_infos_by_city", "cities"),
    ):
        doc = " ".join(inspect.getdoc(bundle.tool_functions[tool]).split())
        for keyword in infos[table]:
            assert keyword in doc, (tool, keyword)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_bundle_code_imports_only_what_sandboxes_have(bundle: LocalBundle) -> None:
    for name in ("tools.py", "verifier.py"):
        for module in _imports(bundle.root / name):
            top = module.split(".")[0]
            assert (
                module == "envgym.runtime" or top in sys.stdlib_module_names or top == "__future__"
            ), (name, module)
    # The seed's rule for solutions: tools and plain computation only.
    assert _imports(bundle.root / "solution.py") <= {"__future__", "json", "itertools"}


def test_bundle_loads_and_validates(bundle: LocalBundle) -> None:
    loaded = load_bundle(bundle.root)
    assert loaded.manifest.category == "trip planning"
    assert loaded.tasks[0].id == "hangzhou-3day"


def test_listing_and_lookup_tools(ep: Episode) -> None:
    cities = ep.call_tool("get_all_cities")
    assert cities == sorted(cities) and "Hangzhou" in cities
    hotels = ep.call_tool("get_all_hotels_by_city", city="Hangzhou")
    assert hotels and set(hotels[0]) == {"name", "price_per_night", "rating"}
    restaurants = ep.call_tool("get_all_restaurants_by_city", city="Hangzhou")
    assert set(restaurants[0]) == {"name", "avg_price_per_person", "rating"}
    attractions = ep.call_tool("get_all_attractions_by_city", city="Hangzhou")
    assert set(attractions[0]) == {"name", "ticket_price", "rating"}
    for h in hotels:
        assert ep.call_tool("get_city_by_hotel", hotel=h["name"]) == "Hangzhou"
    assert ep.call_tool("get_city_by_restaurant", restaurant=restaurants[0]["name"]) == "Hangzhou"
    assert ep.call_tool("get_city_by_attraction", attraction=attractions[0]["name"]) == "Hangzhou"


def test_info_tools(ep: Episode) -> None:
    hotel = ep.call_tool("get_all_hotels_by_city", city="Suzhou")[0]
    info = ep.call_tool(
        "get_infos_by_hotel",
        info_keywords=["price_per_night", "rating", "city"],
        hotel=hotel["name"],
    )
    assert info == {
        "name": hotel["name"],
        "price_per_night": hotel["price_per_night"],
        "rating": hotel["rating"],
        "city": "Suzhou",
    }
    sight = ep.call_tool("get_all_attractions_by_city", city="Suzhou")[0]
    info = ep.call_tool(
        "get_infos_by_attraction", info_keywords=["indoor", "kind"], attraction=sight["name"]
    )
    assert isinstance(info["indoor"], bool) and info["kind"]
    food = ep.call_tool("get_all_restaurants_by_city", city="Suzhou")[0]
    assert ep.call_tool(
        "get_infos_by_restaurant", info_keywords=["cuisine"], restaurant=food["name"]
    )["cuisine"]
    city = ep.call_tool(
        "get_infos_by_city", info_keywords=["province", "latitude"], city="Hangzhou"
    )
    assert city["province"] == "Zhejiang" and 29 < city["latitude"] < 31
    everything = ep.call_tool("get_infos_by_city", info_keywords=[], city="Nanjing")
    assert {"province", "region", "description"} <= set(everything)


def test_transport_and_weather_tools(ep: Episode) -> None:
    modes = {t["mode"] for t in ep.call_tool("get_city_transport", city="Hangzhou")}
    assert {"bus", "taxi"} <= modes
    services = ep.call_tool("get_inter_city_transport", from_city="Hangzhou", to_city="Shanghai")
    assert services and {
        "code",
        "mode",
        "departure_time",
        "arrival_time",
        "duration_minutes",
        "price",
    } == set(services[0])
    assert [s["departure_time"] for s in services] == sorted(s["departure_time"] for s in services)
    weather = ep.call_tool("get_weather_by_city_date", city="Hangzhou", date="2025-10-01")
    assert weather["date"] == "2025-10-01" and isinstance(weather["rainy"], bool)
    assert weather["temp_low"] <= weather["temp_high"]


@pytest.mark.parametrize(
    ("tool", "kwargs", "expected"),
    [
        (
            "get_all_hotels_by_city",
            {"city": "Hangzhuo"},
            ["no city named 'Hangzhuo'", "'Hangzhou'", "get_all_cities()"],
        ),
        (
            "get_all_restaurants_by_city",
            {"city": "Atlantis"},
            ["no city named 'Atlantis'", "get_all_cities()"],
        ),
        ("get_all_attractions_by_city", {"city": "hangzhou"}, ["'Hangzhou'"]),
        (
            "get_city_by_hotel",
            {"hotel": "Nowhere Inn"},
            ["no hotel named 'Nowhere Inn'", "get_all_hotels_by_city(city)"],
        ),
        (
            "get_city_by_restaurant",
            {"restaurant": "X"},
            ["no restaurant named 'X'", "get_all_restaurants_by_city(city)"],
        ),
        (
            "get_city_by_attraction",
            {"attraction": "X"},
            ["no attraction named 'X'", "get_all_attractions_by_city(city)"],
        ),
        (
            "get_infos_by_hotel",
            {"info_keywords": ["price"], "hotel": "X"},
            ["unknown info keyword(s) 'price'", "price_per_night"],
        ),
        (
            "get_infos_by_restaurant",
            {"info_keywords": ["rating"], "restaurant": "X"},
            ["no restaurant named 'X'"],
        ),
        (
            "get_infos_by_attraction",
            {"info_keywords": ["rating"], "attraction": "X"},
            ["no attraction named 'X'"],
        ),
        (
            "get_infos_by_city",
            {"info_keywords": ["mayor"], "city": "Hangzhou"},
            ["'mayor'", "province"],
        ),
        ("get_city_transport", {"city": "X"}, ["no city named 'X'"]),
        (
            "get_inter_city_transport",
            {"from_city": "Hangzhou", "to_city": "X"},
            ["no city named 'X'"],
        ),
        (
            "get_inter_city_transport",
            {"from_city": "Hangzhou", "to_city": "Hangzhou"},
            ["two different cities"],
        ),
        ("get_weather_by_city_date", {"city": "Hangzhou", "date": "Oct 1"}, ["YYYY-MM-DD"]),
        (
            "get_weather_by_city_date",
            {"city": "Hangzhou", "date": "2024-10-01"},
            ["forecasts cover 2025-09-25 to 2025-10-14"],
        ),
        ("get_weather_by_city_date", {"city": "X", "date": "2025-10-01"}, ["no city named 'X'"]),
        ("submit_result", {"answer_text": "not json"}, ["not valid JSON"]),
        ("submit_result", {"answer_text": "{}"}, ["non-empty JSON array"]),
        (
            "submit_result",
            {"answer_text": json.dumps([{"time": "2025-10-01"}])},
            ["day 1 is missing city"],
        ),
        (
            "submit_result",
            {"answer_text": json.dumps([{**DAY, "notes": "x"}])},
            ["unknown keys notes"],
        ),
        (
            "submit_result",
            {"answer_text": json.dumps([{**DAY, "time": "1 Oct"}])},
            ["time must be a date"],
        ),
        (
            "submit_result",
            {"answer_text": json.dumps([{**DAY, "hotel": ""}])},
            ["hotel must be non-empty"],
        ),
    ],
)
def test_errors_are_helpful(ep: Episode, tool: str, kwargs: dict, expected: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        ep.call_tool(tool, **kwargs)
    for fragment in expected:
        assert fragment in str(err.value), str(err.value)


def test_submit_result_acknowledges_valid_answers(ep: Episode) -> None:
    days = [DAY, {**DAY, "time": "2025-10-02", "transport": "G1"}]
    ack = ep.call_tool("submit_result", answer_text=json.dumps(days))
    assert "2 day(s)" in ack and "2025-10-01 to 2025-10-02" in ack
    fenced = "```json\n" + json.dumps([DAY]) + "\n```"
    assert "1 day(s)" in ep.call_tool("submit_result", answer_text=fenced)
