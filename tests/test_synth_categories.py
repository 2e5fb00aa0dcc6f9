"""Procedural category names: lenient matching, clear errors for empty or unknown names."""

from __future__ import annotations

import pytest

from envgym.synth_agents.categories import UnknownCategory, find_category, known_names, normalize
from envgym.synth_agents.llm_agent import category_problem


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("trip planning", "trip planning"),
        ("Trip Planning", "trip planning"),
        ("trip-planning", "trip planning"),
        ("TRIP_PLANNING", "trip planning"),
        ("tripPlanning", "trip planning"),
        ("  travel  ", "trip planning"),
        ("Retail-Orders", "retail orders"),
        ("retail orders and returns", "retail orders"),
        ("meeting_scheduling", "meeting scheduling"),
        ("Calendars", "meeting scheduling"),
        ("shipment logistics", "shipment logistics"),
        ("Logistics", "shipment logistics"),
    ],
)
def test_lenient_names(name: str, expected: str) -> None:
    assert find_category(name).name == expected


def test_normalize() -> None:
    assert normalize(" Trip-Planning_v2 ") == "trip planning v2"
    assert normalize("meetingScheduling") == "meeting scheduling"


@pytest.mark.parametrize("name", ["", "   ", "quantum chromodynamics", "tripp planning"])
def test_unknown_or_empty_names_list_the_known_categories(name: str) -> None:
    with pytest.raises(UnknownCategory) as info:
        find_category(name)
    message = str(info.value)
    assert all(repr(known) in message for known in known_names())
    assert ("empty" in message) == (not name.strip())


def test_llm_agent_category_screen() -> None:
    assert category_problem("library loans") is None
    assert category_problem("") == "the category is empty"
    assert category_problem("   ") == "the category is empty"
    assert "no word" in (category_problem("!!! 42 ###") or "")
    assert "control characters" in (category_problem("books\x00") or "")
    assert "characters long" in (category_problem("a" * 200) or "")
