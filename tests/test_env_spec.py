"""The declarative environment spec: a spec is hostile input, and each bad one is refused with a
:class:`SpecError` naming where (path) and what (reason) — docs/ENV_SPEC.md."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envgym.envs.procedural_kit.spec.validate import SpecError, load_spec, load_spec_text, schema

EXAMPLES = (
    Path(__file__).resolve().parents[1] / "envgym" / "envs" / "procedural_kit" / "spec" / "examples"
)


def _library() -> dict[str, Any]:
    return json.loads((EXAMPLES / "library_loans.json").read_text())


def _refused(obj: Any, path: str, reason: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(obj)
    assert info.value.path == path, str(info.value)
    assert reason in info.value.reason, str(info.value)
    return info.value


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.json")))
def test_every_example_spec_loads_and_matches_the_published_schema(name: str) -> None:
    raw = json.loads((EXAMPLES / f"{name}.json").read_text())
    jsonschema.Draft202012Validator(schema()).validate(raw)
    spec = load_spec(raw)
    assert spec.name == name and spec.spec_version == 1
    kinds = {t.kind for t in spec.tools}
    assert kinds == {"lookup", "list", "search", "aggregate", "follow", "action"}


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())


@pytest.mark.parametrize("empty", [None, {}, []])
def test_an_empty_spec_is_refused(empty: Any) -> None:
    _refused(empty, "(root)", "the spec is empty")


def test_an_unsupported_version_is_named() -> None:
    raw = _library() | {"spec_version": 2}
    _refused(raw, "spec_version", "unsupported spec_version 2")


def test_an_unknown_attribute_type_is_named() -> None:
    raw = _library()
    raw["entities"][2]["attributes"][4]["type"] = "money"
    _refused(raw, "entities[2].attributes[4].type", "'money' is not one of")


def test_a_field_of_another_type_is_named() -> None:
    raw = _library()
    raw["entities"][2]["attributes"][2]["min"] = 3  # genre is a category
    _refused(raw, "entities[2].attributes[2].min", "not a field of a category attribute")


@pytest.mark.parametrize(
    ("edit", "path", "reason"),
    [
        (lambda r: r["relations"][0].update({"to": "publisher"}), "relations[0].to",
         "unknown entity 'publisher'"),
        (lambda r: r["tasks"][0]["filters"].append("colour"), "tasks[0].filters[5]",
         "unknown attribute 'colour' of book"),
        (lambda r: r["tasks"][0]["joins"].append({"relation": "shelf", "attribute": "x"}),
         "tasks[0].joins[2].relation", "unknown relation 'shelf' of book"),
        (lambda r: r["tools"][0].update({"entity": "dvd"}), "tools[0].entity",
         "unknown entity 'dvd'"),
        (lambda r: r["tasks"][0]["actions"].append("burn_book"), "tasks[0].actions[2]",
         "no action tool 'burn_book' on book"),
        (lambda r: r["entities"][2].update({"key": "barcode"}), "entities[2].key",
         "unknown attribute 'barcode' of book"),
    ],
)  # fmt: skip
def test_an_unknown_reference_is_named(edit: Any, path: str, reason: str) -> None:
    raw = _library()
    edit(raw)
    _refused(raw, path, reason)


def test_a_cyclic_relation_is_refused_with_the_cycle() -> None:
    raw = _library()
    raw["relations"].append({"name": "favourite", "from": "author", "to": "book"})
    err = _refused(raw, "relations", "cyclic relation: ")
    assert "author -> book -> author" in err.reason or "book -> author -> book" in err.reason


def test_a_self_relation_is_a_cycle() -> None:
    raw = _library()
    raw["relations"].append({"name": "mentor", "from": "author", "to": "author"})
    _refused(raw, "relations", "cyclic relation: author -> author")


@pytest.mark.parametrize(
    ("edit", "path", "reason"),
    [
        (lambda r: r["entities"][0].update({"name": 'author"; DROP TABLE x; --'}),
         "entities[0].name", "is not a safe name"),
        (lambda r: r["tools"][0].update({"name": "__import__"}), "tools[0].name",
         "is not a safe name"),
        (lambda r: r["tools"][0].update({"name": "submit_result"}), "tools[0].name", "is reserved"),
        (lambda r: r["tools"][0].update({"name": "class"}), "tools[0].name", "is reserved"),
        (lambda r: r["entities"][2]["attributes"][1].update({"name": "Title"}),
         "entities[2].attributes[1].name", "is not a safe name"),
    ],
)  # fmt: skip
def test_an_unsafe_name_is_refused(edit: Any, path: str, reason: str) -> None:
    raw = _library()
    edit(raw)
    _refused(raw, path, reason)


def test_duplicate_names_are_named() -> None:
    raw = _library()
    raw["entities"][2]["attributes"].append(copy.deepcopy(raw["entities"][2]["attributes"][2]))
    _refused(raw, "entities[2].attributes[8].name", "duplicate name 'genre'")
    raw = _library()
    raw["tools"].append(copy.deepcopy(raw["tools"][0]))
    _refused(raw, "tools[12].name", "duplicate name 'get_book'")


def test_a_task_condition_on_a_state_an_action_changes_is_refused() -> None:
    raw = _library()
    raw["tasks"][0]["filters"].append("status")
    _refused(raw, "tasks[0].filters[5]", "changed by an action")


def test_a_missing_tool_for_a_building_block_is_named() -> None:
    raw = _library()
    raw["tools"] = [t for t in raw["tools"] if t["name"] != "get_book_author"]
    _refused(raw, "tasks[0].joins[0].relation", "no follow tool for relation 'author'")


@pytest.mark.parametrize(
    ("edit", "path", "reason"),
    [
        (lambda r: r["entities"][2].update({"rows": 10_000}), "entities[2].rows",
         "10000 is out of range (maximum 300)"),
        (lambda r: r["entities"][2]["attributes"][1].update({"vocabulary": ["w"] * 500}),
         "entities[2].attributes[1].vocabulary", "is too long: 500 (at most 200)"),
        (lambda r: r.update({"tools": r["tools"] * 5}), "tools", "is too long: 60 (at most 40)"),
        (lambda r: r.update({"category": "x" * 5000}), "category", "is too long: 5000 (at most 80)"),
        (lambda r: r.update({"colour": "red"}), "(root)", "unknown field 'colour'"),
        (lambda r: r["entities"][2].update({"noun": "book\nArgs:\n    isbn: x"}), "entities[2].noun",
         "holds a control character"),
    ],
)  # fmt: skip
def test_an_oversize_spec_is_refused(edit: Any, path: str, reason: str) -> None:
    raw = _library()
    edit(raw)
    _refused(raw, path, reason)


def test_oversize_and_deep_text_is_refused_before_parsing() -> None:
    with pytest.raises(SpecError, match="over 262144"):
        load_spec_text(" " * 300_000)
    with pytest.raises(SpecError, match="nests deeper than 12"):
        load_spec_text("[" * 5000 + "]" * 5000)
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec_text("{'spec_version': 1}")
    deep: Any = {}
    for _ in range(50):
        deep = {"x": deep}
    _refused(_library() | {"description": deep}, "(root)", "nests deeper than 12")
    assert load_spec_text(json.dumps(_library())).name == "library_loans"
