"""The declarative environment spec (version 1): dataclasses and ``load_spec``.  docs/ENV_SPEC.md.

A spec is hostile input (a user's or a model's JSON): ``load_spec`` bounds its size and nesting
before anything walks it, validates it against ``schema.json``, then checks what a schema cannot
(references, duplicates, cycles, types per role) and raises :class:`SpecError` naming the path
and the reason.  Nothing in a spec is ever executed or pasted into code: names are checked to be
safe identifiers and travel as data (``tools.json``) to fixed code templates.
"""

from __future__ import annotations

import json
import keyword
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from envgym.bundle_limits import json_depth

SPEC_VERSION = 1
MAX_SPEC_BYTES = 256 * 1024  # the JSON text of a spec; the schema bounds counts and lengths
MAX_DEPTH = 12  # nesting of arrays/objects: a real spec nests 5 deep
KINDS = ("lookup", "list", "search", "aggregate", "follow", "action")
NUMERIC = ("int", "number")
ORDERED = ("int", "number", "date")  # types with min/max, bounds and objectives
FILTERABLE = ("category", "bool", "int", "number", "date")
# Names every bundle's fixed tools.py already uses, or that a Python module cannot bind.
RESERVED = frozenset({"submit_result", "page"})
_TYPE_FIELDS = {
    "text": {"prefix", "vocabulary", "words"},
    "category": {"values", "weights"},
    "int": {"min", "max", "unit", "skew"},
    "number": {"min", "max", "unit", "decimals", "skew"},
    "date": {"min", "max"},
    "bool": {"p_true"},
}
_COMMON = {"name", "type", "label"}


class SpecError(ValueError):
    """A spec that cannot be compiled; ``path`` names where (``entities[1].attributes[0].type``)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Attribute:
    name: str
    type: str
    label: str
    unit: str = ""
    prefix: str = ""
    vocabulary: tuple[str, ...] = ()
    words: int = 1
    values: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    min: Any = None
    max: Any = None
    decimals: int = 2
    skew: bool = False
    p_true: float = 0.5


@dataclass(frozen=True)
class Entity:
    name: str
    noun: str
    plural: str
    key: str
    rows: int
    attributes: tuple[Attribute, ...]

    def attribute(self, name: str) -> Attribute | None:
        return next((a for a in self.attributes if a.name == name), None)


@dataclass(frozen=True)
class Relation:
    """Many-to-one: each ``source`` row names one ``target`` row in its column ``name``."""

    name: str
    source: str
    target: str
    label: str


@dataclass(frozen=True)
class Tool:
    name: str
    kind: str
    entity: str = ""
    relation: str = ""
    attribute: str = ""
    filters: tuple[str, ...] = ()
    start: str = ""  # action: the state the row must be in
    end: str = ""  # action: the state it moves to
    verb: str = ""
    description: str = ""


@dataclass(frozen=True)
class Join:
    relation: str
    attribute: str


@dataclass(frozen=True)
class Aggregate:
    child: str
    relation: str
    op: str
    attribute: str = ""


@dataclass(frozen=True)
class Conditional:
    when: str
    then: str


@dataclass(frozen=True)
class TaskTemplate:
    target: str
    filters: tuple[str, ...]
    objectives: tuple[str, ...]
    joins: tuple[Join, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    conditionals: tuple[Conditional, ...] = ()
    budgets: tuple[str, ...] = ()
    reports: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    levels: tuple[int, ...] = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class Spec:
    name: str
    category: str
    description: str
    entities: tuple[Entity, ...]
    relations: tuple[Relation, ...]
    tools: tuple[Tool, ...]
    tasks: tuple[TaskTemplate, ...]
    spec_version: int = SPEC_VERSION

    def entity(self, name: str) -> Entity:
        return next(e for e in self.entities if e.name == name)

    def relation(self, source: str, name: str) -> Relation | None:
        return next((r for r in self.relations if r.source == source and r.name == name), None)

    def tool(self, kind: str, **match: str) -> Tool | None:
        """The first tool of ``kind`` whose fields equal ``match``."""
        return next(
            (
                t
                for t in self.tools
                if t.kind == kind and all(getattr(t, k) == v for k, v in match.items())
            ),
            None,
        )

    def state_attributes(self, entity: str) -> set[str]:
        """Attributes an action changes: never a task's condition (the final state moved them)."""
        return {t.attribute for t in self.tools if t.kind == "action" and t.entity == entity}

    def entity_order(self) -> list[Entity]:
        """Entities parents first (relations are acyclic, so every row's parent exists)."""
        done: list[str] = []
        while len(done) < len(self.entities):
            for e in self.entities:
                parents = {r.target for r in self.relations if r.source == e.name}
                if e.name not in done and parents <= set(done):
                    done.append(e.name)
        return [self.entity(n) for n in done]

    def table(self) -> dict[str, Any]:
        """``tools.json``: what the fixed tools.py and verifier.py read (no task, no gold)."""
        return {
            "spec_version": self.spec_version,
            "name": self.name,
            "entities": [
                {
                    "name": e.name,
                    "noun": e.noun,
                    "plural": e.plural,
                    "key": e.key,
                    "attributes": [
                        {"name": a.name, "type": a.type, "label": a.label, "unit": a.unit}
                        | ({"values": list(a.values)} if a.type == "category" else {})
                        for a in e.attributes
                    ],
                    "relations": [
                        {"name": r.name, "to": r.target, "label": r.label}
                        for r in self.relations
                        if r.source == e.name
                    ],
                }
                for e in self.entities
            ],
            "tools": [
                {
                    "name": t.name,
                    "kind": t.kind,
                    "entity": t.entity,
                    "relation": t.relation,
                    "attribute": t.attribute,
                    "filters": list(t.filters),
                    "from": t.start,
                    "to": t.end,
                    "description": t.description,
                }
                for t in self.tools
            ],
        }


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of spec version 1 (``schema.json`` beside this module)."""
    return json.loads((Path(__file__).with_name("schema.json")).read_text(encoding="utf-8"))


def load_spec_text(text: str | bytes) -> Spec:
    """:func:`load_spec` of JSON text, bounded before it is parsed."""
    if isinstance(text, bytes):
        if len(text) > MAX_SPEC_BYTES:
            raise SpecError("(root)", f"spec is {len(text)} bytes, over {MAX_SPEC_BYTES}")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError("(root)", f"not UTF-8 text: {exc}") from None
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError("(root)", f"spec is {len(text)} characters, over {MAX_SPEC_BYTES}")
    if json_depth(text, stop_above=MAX_DEPTH) > MAX_DEPTH:
        raise SpecError("(root)", f"spec nests deeper than {MAX_DEPTH} levels")
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and integers past Python's digit limit
        raise SpecError("(root)", f"not valid JSON: {exc}") from None
    return load_spec(data)


def load_spec(obj: Any) -> Spec:
    """Validate a parsed spec (schema, then semantics) and return it; :class:`SpecError` if bad."""
    _bounded(obj)
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(obj), key=lambda e: (len(e.absolute_path), e.message))
    if errors:
        err = errors[0]
        raise SpecError(_path(err.absolute_path), _schema_reason(err))
    from envs.procedural_kit.spec.semantics import build  # the cross-reference checks

    return build(obj)


def _bounded(obj: Any) -> None:
    """Refuse an object too big or too deep before jsonschema (which recurses) walks it."""
    if obj is None or (isinstance(obj, (dict, list)) and not obj):
        raise SpecError("(root)", "the spec is empty")
    stack: list[tuple[Any, int]] = [(obj, 0)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            raise SpecError("(root)", f"spec nests deeper than {MAX_DEPTH} levels")
        if count > 50_000:
            raise SpecError("(root)", "spec has more than 50000 values")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str) and len(value) > 10_000:
            raise SpecError("(root)", "spec holds a string over 10000 characters")


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


def _schema_reason(err: jsonschema.ValidationError) -> str:
    if err.validator == "pattern" and isinstance(err.instance, str):
        return f"{err.instance[:60]!r} is not a safe name (lower-case letters, digits, _; ≤ 40)"
    if err.validator == "enum":
        return f"{str(err.instance)[:60]!r} is not one of {err.validator_value}"
    if err.validator == "const" and err.absolute_path and err.absolute_path[-1] == "spec_version":
        return f"unsupported spec_version {str(err.instance)[:20]}; this envgym reads {SPEC_VERSION}"
    # the instance may be huge: say how it is wrong, never echo it whole
    limit = err.validator_value
    if err.validator in ("maxItems", "maxLength"):
        return f"is too long: {len(err.instance)} (at most {limit})"
    if err.validator in ("minItems", "minLength"):
        return f"is too short: {len(err.instance)} (at least {limit})"
    if err.validator in ("maximum", "minimum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{str(err.instance)[:30]} is out of range ({err.validator} {limit})"
    if err.validator == "type":
        return f"must be {limit}, not {type(err.instance).__name__}"
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        return f"unknown field {str(extra[0])[:40]!r}" if extra else "unknown field"
    return err.message[:200]


def check_name(path: str, name: str) -> None:
    if keyword.iskeyword(name) or keyword.issoftkeyword(name) or name in RESERVED:
        raise SpecError(path, f"{name!r} is reserved (a Python keyword or a name tools.py uses)")


def check_type_fields(path: str, raw: dict[str, Any]) -> None:
    extra = set(raw) - _COMMON - _TYPE_FIELDS[raw["type"]]
    if extra:
        raise SpecError(f"{path}.{sorted(extra)[0]}", f"not a field of a {raw['type']} attribute")


def parse_date(path: str, value: Any) -> date:
    try:
        return date.fromisoformat(value)
    except (TypeError, ValueError):
        raise SpecError(path, f"{value!r} is not a YYYY-MM-DD date") from None
