from __future__ import annotations

import enum
import types
from typing import Annotated, Literal, Optional, Union

import pytest

from envgym.sandbox.base import ToolSpec
from envgym.tool_schema import (
    ToolSchemaError,
    argument_coercer,
    function_schema,
    parse_docstring,
    public_tools,
)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def search_hotels(
    city: str,
    nights: int,
    budget: float | None = None,
    tags: list[str] | None = None,
    sort: Literal["price", "rating"] = "price",
    breakfast: bool = False,
) -> list[dict]:
    """Search hotels in a city.

    Results are sorted; this second paragraph is not part of the description.

    Args:
        city: the city's name.
        nights: how many nights, at
            least one.
        budget (float): the most to pay per night.
        tags: amenities that must all be present.
        sort: the order of results.

    Returns:
        A list of hotels.
    """
    return []


def test_full_schema_is_exact() -> None:
    spec = function_schema(search_hotels)
    assert spec == ToolSpec(
        name="search_hotels",
        description="Search hotels in a city.",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "the city's name."},
                "nights": {"type": "integer", "description": "how many nights, at least one."},
                "budget": {
                    "type": ["number", "null"],
                    "default": None,
                    "description": "the most to pay per night.",
                },
                "tags": {
                    "type": ["array", "null"],
                    "items": {"type": "string"},
                    "default": None,
                    "description": "amenities that must all be present.",
                },
                "sort": {
                    "type": "string",
                    "enum": ["price", "rating"],
                    "default": "price",
                    "description": "the order of results.",
                },
                "breakfast": {"type": "boolean", "default": False},
            },
            "required": ["city", "nights"],
            "additionalProperties": False,
        },
    )
    assert spec.openai()["function"]["name"] == "search_hotels"


def test_no_parameters_and_no_docstring() -> None:
    def ping():  # type: ignore[no-untyped-def]
        return "pong"

    assert function_schema(ping) == ToolSpec(
        name="ping",
        description="",
        parameters={
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": False,
        },
    )


@pytest.mark.parametrize(
    ("annotation", "schema"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (list, {"type": "array"}),
        (dict, {"type": "object"}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (
            dict[str, list[str]],
            {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "string"}},
            },
        ),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[str, int],
            {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (Literal[1, 2, 3], {"type": "integer", "enum": [1, 2, 3]}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045 - the old spelling is the input
        (Union[int, None], {"type": ["integer", "null"]}),  # noqa: UP007
        (int | None, {"type": ["integer", "null"]}),
        (
            Literal["x", "y"] | None,
            {"anyOf": [{"type": "string", "enum": ["x", "y"]}, {"type": "null"}]},
        ),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (Color, {"type": "string", "enum": ["red", "blue"]}),
        (Level, {"type": "integer", "enum": [1, 2]}),
        (Annotated[str, "an id"], {"type": "string", "description": "an id"}),
    ],
)
def test_type_mapping(annotation: object, schema: dict) -> None:
    def tool(x):  # type: ignore[no-untyped-def]
        """T."""

    tool.__annotations__ = {"x": annotation}
    assert function_schema(tool).parameters["properties"]["x"] == schema


def test_enum_default_is_recorded_as_its_value() -> None:
    def paint(color: Color = Color.BLUE, size: tuple[int, int] = (1, 2)) -> None:
        """Paint."""

    props = function_schema(paint).parameters["properties"]
    assert props["color"]["default"] == "blue"
    assert props["size"]["default"] == [1, 2]


def test_string_annotations_resolve() -> None:
    ns: dict = {}
    exec(
        "from __future__ import annotations\ndef f(a: list[int], b: str | None = None) -> None:\n    'F.'\n",
        ns,
    )
    params = function_schema(ns["f"]).parameters
    assert params["properties"]["a"] == {"type": "array", "items": {"type": "integer"}}
    assert params["required"] == ["a"]


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("def f(x): pass", "tool f, parameter 'x': missing type hint"),
        ("def f(x: set): pass", "tool f, parameter 'x': unsupported type set"),
        ("def f(x: dict[int, str]): pass", "tool f, parameter 'x': dict keys must be str"),
        ("def f(*args: int): pass", "tool f, parameter 'args': *args"),
        ("def f(**kw: int): pass", "tool f, parameter 'kw': *args"),
        ("def f(x: int, /): pass", "tool f, parameter 'x': *args, **kwargs and positional-only"),
        ("def f(x: object = None): pass", "tool f, parameter 'x': unsupported type object"),
        ("def f(x: int = object()): pass", "tool f, parameter 'x': default"),
        ("def f(x: 'Nope'): pass", "tool f: cannot read its signature"),
    ],
)
def test_errors_name_function_and_parameter(source: str, needle: str) -> None:
    ns: dict = {}
    exec(source, ns)
    with pytest.raises(ToolSchemaError) as err:
        function_schema(ns["f"])
    assert needle in str(err.value)


def test_docstring_sections() -> None:
    summary, params = parse_docstring(
        """Line one
        continues here.

        Args:
            a: first
               more.
            b (int): second.
        Raises:
            ValueError: never.
        """
    )
    assert summary == "Line one continues here."
    assert params == {"a": "first more.", "b": "second."}
    assert parse_docstring("Args:\n    x: only args.") == ("", {"x": "only args."})
    assert parse_docstring(None) == ("", {})


def test_public_tools_only_defined_public_functions() -> None:
    module = types.ModuleType("fake_tools")
    exec(
        "from os.path import join\n"
        "import json\n"
        "def b_tool(x: int) -> int:\n    return x\n"
        "def _helper() -> None: ...\n"
        "def a_tool() -> str:\n    return ''\n"
        "alias = a_tool\n"
        "class Thing: ...\n"
        "CONSTANT = 3\n"
        "lam = lambda: 1\n",
        module.__dict__,
    )
    assert [f.__name__ for f in public_tools(module)] == ["b_tool", "a_tool"]


def test_argument_coercer() -> None:
    def f(color: Color, pair: tuple[int, int], maybe: Color | None = None, n: int = 0) -> None: ...

    coerce = argument_coercer(f)
    assert coerce is not None
    assert coerce({"color": "red", "pair": [1, 2], "maybe": None, "n": 3}) == {
        "color": Color.RED,
        "pair": (1, 2),
        "maybe": None,
        "n": 3,
    }

    def g(a: int, b: list[str]) -> None: ...

    assert argument_coercer(g) is None
