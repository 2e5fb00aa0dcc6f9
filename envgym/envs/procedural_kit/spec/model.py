"""The declarative environment spec (version 1): its dataclasses and :class:`SpecError`.
docs/ENV_SPEC.md.  Loading and validating a spec is ``validate.load_spec``.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from datetime import date
from typing import Any

SPEC_VERSION = 1
MAX_SPEC_BYTES = 256 * 1024  # the JSON text of a spec; the schema bounds counts and lengths
MIN_ROWS = 8  # an entity's table (schema.json)
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
