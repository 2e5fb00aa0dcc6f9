"""Argument validation: the fast path accepts exactly what JSON Schema accepts."""

from __future__ import annotations

import jsonschema
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from envgym.dispatch import MAX_ARGUMENT_DEPTH, StrictValidator, ToolTable
from envgym.sandbox.base import ToolSpec

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "a city"},
        "n": {"type": "integer"},
        "x": {"type": ["number", "null"]},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "n"],
    "additionalProperties": False,
}
TABLE = ToolTable(
    [
        ToolSpec("t", "a tool", SCHEMA),
        ToolSpec("e", "enum", {**SCHEMA, "properties": {"c": {"enum": [1]}}, "required": []}),
    ]
)
VALIDATOR = StrictValidator(SCHEMA)  # JSON Schema, except that an integer must be an int

values = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.lists(st.text(max_size=3) | st.integers(), max_size=3)
)


@settings(max_examples=500, deadline=None)
@example({"city": "a", "n": 2.0})
@given(
    st.dictionaries(
        st.sampled_from(["city", "n", "x", "flag", "tags", "other"]), values, max_size=6
    )
)
def test_fast_check_agrees_with_jsonschema(arguments: dict) -> None:
    assert (TABLE.check("t", arguments) is None) == VALIDATOR.is_valid(arguments)


def test_messages() -> None:
    assert TABLE.check("t", {"city": "a", "n": 1}) is None
    assert (
        TABLE.check("t", {"city": "a", "n": True})
        == "invalid arguments for t: n: True is not of type 'integer'"
    )
    assert TABLE.check("t", []) == "arguments of t must be a JSON object, got list"
    assert TABLE.check("zz", {}) == "unknown tool 'zz'. Available tools: e, t"
    assert (
        TABLE.check("e", {"c": 2}) == "invalid arguments for e: c: 2 is not one of [1]"
    )  # slow path


def test_integral_float_is_not_an_integer() -> None:
    # Plain JSON Schema accepts 2.0 as an integer; the tool would then get a float.
    assert jsonschema.Draft202012Validator(SCHEMA).is_valid({"city": "a", "n": 2.0})
    assert (
        TABLE.check("t", {"city": "a", "n": 2.0})
        == "invalid arguments for t: n: 2.0 is not of type 'integer'"
    )


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH + 1, 400, 800])
def test_deep_arguments_are_refused_without_recursion(depth: int) -> None:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    assert (
        TABLE.check("t", {"city": value, "n": 1})
        == f"arguments of t are nested more than {MAX_ARGUMENT_DEPTH} levels deep"
    )
    shallow: object = []
    for _ in range(MAX_ARGUMENT_DEPTH - 1):
        shallow = [shallow]
    assert TABLE.check("t", {"city": "a", "n": 1, "tags": shallow}).startswith(
        "invalid arguments for t: tags.0"
    )


def test_problems_are_short_and_at_most_five() -> None:
    problem = TABLE.check(
        "t", {"city": "x" * 10_000, "n": "y" * 10_000, "flag": 1, "tags": [1, 2, 3, 4], "x": "s"}
    )
    assert problem is not None and problem.count(";") == 4 and len(problem) < 5 * 320
