"""envgym/schema_guard.py and envgym/schema_validator.py through the dispatcher's ToolTable:
which tool schemas the host compiles, and how it runs them (no server needed; the real MCP
server is in tests/test_mcp_hostile_schemas.py)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from envgym import dispatch
from envgym.dispatch import ToolTable
from envgym.sandbox.base import ToolSpec
from envgym.schema_guard import MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, SchemaRefused
from envgym.schema_validator import StrictValidator, tool_validator

pytestmark = pytest.mark.timeout(60)


def _table(schema: dict[str, Any], name: str = "t") -> ToolTable:
    return ToolTable([ToolSpec(name, "a tool", schema)])


def _obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize(("schema", "reason"), [
    (_obj(x={"$ref": "file:///etc/passwd"}), "not a local '#…' reference"),
    (_obj(x={"$ref": "http://127.0.0.1:9/s.json#/x"}), "not a local '#…' reference"),
    (_obj(x={"$ref": "other.json"}), "not a local '#…' reference"),
    (_obj(x={"$dynamicRef": "https://example.com/meta"}), "not a local '#…' reference"),
    (_obj(x={"$ref": 5}), "not a local '#…' reference"),
    ({**_obj(x={"$ref": "#/$defs/a"}), "$defs": {"a": {"$id": "http://x/", "type": "string"}}},
     "$id at /$defs/a"),
    (_obj(x={"$schema": "http://127.0.0.1:9/meta"}), "$schema at /properties/x is not allowed"),
    (_obj(x={"$ref": "#/$defs/missing"}), "does not point at a subschema"),
    (_obj(x={"enum": [{"$ref": "http://x/"}]}, y={"$ref": "#/properties/x/enum/0"}),
     "does not point at a subschema"),
    (_obj(x={"$ref": "#nowhere"}), "names no $anchor"),
    (_obj(x={"type": "string", "pattern": r"^(a)\1$"}), "RE2 cannot compile"),
    ({"type": "object", "patternProperties": {"(?!x)": {}}}, "RE2 cannot compile"),
    (_obj(x={"type": "string", "pattern": "a" * 1001}), "the limit is 1000"),
    (_obj(x={"enum": list(range(MAX_SCHEMA_NODES))}), f"more than {MAX_SCHEMA_NODES} values"),
    (_obj(x={"description": "x" * 300_000}), "more than 200000 characters"),
])  # fmt: skip
def test_refused_schemas_name_the_tool_and_the_reason(schema: dict[str, Any], reason: str) -> None:
    with pytest.raises(SchemaRefused, match="the input schema of tool 'probe' is refused") as err:
        _table(schema, "probe")
    assert reason in str(err.value)


def test_deep_and_invalid_schemas_are_refused() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH):
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaRefused, match=f"nested more than {MAX_SCHEMA_DEPTH} levels deep"):
        _table(_obj(x=deep))
    with pytest.raises(
        SchemaRefused, match="tool 't' is not a valid JSON Schema: at /properties/x/type"
    ):
        _table(
            _obj(x={"type": "strnig"})
        )  # would otherwise raise UnknownType in the middle of a step
    with pytest.raises(SchemaRefused, match="not a valid JSON Schema"):
        _table(_obj(x={"type": "string", "pattern": 5}))


def test_local_references_anchors_and_odd_property_names_are_fine() -> None:
    schema = {
        **_obj(
            a={"$ref": "#/$defs/pos"},
            b={"$ref": "#pos"},
            c={"$ref": "#"},
            **{"$ref": {"type": "string"}, "$id": {"type": "integer"}},
        ),  # property names
        "$defs": {"pos": {"$anchor": "pos", "type": "integer", "minimum": 1}},
    }
    table = _table(schema)
    assert table.check("t", {"a": 1, "b": 2, "$ref": "x", "$id": 3}) is None
    problem = table.check("t", {"a": 0, "$ref": 1})
    assert (
        problem is not None
        and "a: 0 is less than the minimum of 1" in problem
        and "$ref: 1 is not of type" in problem
    )


def test_patterns_run_through_re2() -> None:
    table = _table(_obj(s={"type": "string", "pattern": "^(a+)+$"}))
    problem = table.check("t", {"s": "a" * 40 + "!"})
    assert problem is not None and "does not match '^(a+)+$'" in problem
    assert table.check("t", {"s": "aaaa"}) is None
    keyed = _table({"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}}})
    assert "is not of type 'integer'" in (keyed.check("t", {"aaaa": "x"}) or "")
    assert keyed.check("t", {"a" * 40 + "!": "x"}) is None  # no match: the subschema does not apply


def test_an_exponential_schema_runs_into_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # every level tries both branches (the first fails on maxItems), so nesting n costs 2**n
    branch = {"type": "array", "items": {"$ref": "#/$defs/a"}, "maxItems": 0}
    schema = {**_obj(x={"$ref": "#/$defs/a"}), "$defs": {"a": {"anyOf": [branch, branch]}}}
    table = _table(schema)
    monkeypatch.setattr(dispatch, "VALIDATION_DEADLINE_S", 0.2)
    nested: Any = 1
    for _ in range(40):
        nested = [nested]
    problem = table.check("t", {"x": nested})
    assert problem is not None and "took over 0.2 s; send smaller or simpler arguments" in problem


@pytest.mark.parametrize(("items", "unique"), [
    ([1, 1.0], False), ([True, 1], True), ([False, 0, None, ""], True),
    ([[1, True], [1.0, True]], False), ([{"a": 1, "b": [2]}, {"b": [2], "a": 1}], False),
    ([{"a": 1}, {"a": True}], True), (["1", 1], True),
])  # fmt: skip
def test_unique_items_agrees_with_jsonschema(items: list[Any], unique: bool) -> None:
    schema = {"type": "array", "uniqueItems": True}
    assert jsonschema.Draft202012Validator(schema).is_valid(items) is unique
    assert tool_validator(schema).is_valid(items) is unique


def test_unique_items_is_linear() -> None:
    # 20 000 distinct dicts: jsonschema's pairwise fallback compares 2e8 pairs; a hash set does not
    items = [{"k": i} for i in range(20_000)]
    assert StrictValidator({"uniqueItems": True}).is_valid(items)
    assert not StrictValidator({"uniqueItems": True}).is_valid([*items, {"k": 7}])


def test_schemas_that_passed_are_remembered_and_odd_values_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from envgym import schema_guard

    schema = _obj(memo={"type": "string", "description": "remembered"})
    _table(schema)
    monkeypatch.setattr(schema_guard, "_check_metaschema", lambda *a: pytest.fail("checked twice"))
    _table(dict(schema))  # the same JSON: the verdict is remembered
    with pytest.raises(SchemaRefused, match="it is not plain JSON"):
        _table(_obj(x={"enum": [{1, 2}]}))
    with pytest.raises(SchemaRefused, match="it is not plain JSON"):
        _table(_obj(x={"minimum": float("nan")}))


def test_a_schema_failing_past_the_load_checks_is_an_agent_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from envgym import schema_validator

    table = _table(_obj(s={"type": "string", "pattern": "^a$"}))

    def broken(pattern: str) -> Any:
        raise ValueError("RE2 ran out of memory")

    monkeypatch.setattr(schema_validator, "re2_pattern", broken)
    problem = table.check("t", {"s": "b"})
    assert problem == "invalid arguments for t: the tool's schema cannot check them (ValueError)"
