"""A *domain note*: what the procedural spec writer (``writer.py``) needs to know about one
domain — entities with typed attributes, many-to-one relations, the domain's verbs, its
state-changing actions and one or two rules.  docs/ENV_SPEC.md, "Domain notes".

A note is hostile input like a spec: its size and shape are bounded and every field is checked
here, so the writer only ever sees a :class:`DomainNote`.  Attributes are written compactly,
because a corpus of a hundred notes is written by hand::

    "pages|page_count": "int 60..1100 pages skew"     # names after the first are synonyms
    "price":            "number 4..95 USD"
    "published":        "date 1950-01-01..2025-06-30"
    "genre":            "category fiction|history|science"
    "status":           "state available|on_loan|reserved"   # what actions move
    "returned":         "bool 0.8"
    "title":            "text 3 Silent|River|Glass|Winter"    # or "text person" / "text place"
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass
from typing import Any

MAX_NOTE_BYTES = 32 * 1024
IDENT = re.compile(r"^[a-z][a-z0-9_]{0,27}$")  # room left for verb_ and _id in tool names
_NUM = r"(\d{1,9}(?:\.\d{1,2})?)"
_RANGE = re.compile(rf"^{_NUM}\.\.{_NUM}(?: ([A-Za-z0-9%$/]{{1,12}}))?( skew)?$")
_DATES = re.compile(r"^(\d{4}-\d{2}-\d{2})\.\.(\d{4}-\d{2}-\d{2})$")
_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f|]{1,40}$")
TYPES = ("text", "category", "state", "int", "number", "date", "bool")
POOLS = ("person", "place")  # shared vocabularies the writer holds
KINDS = ("lookup", "list", "search", "aggregate", "follow")
# Argument names the fixed tools.py gives every tool of a kind; an attribute may not take them.
KEY_SUFFIXES = ("id", "code", "ref", "no", "number")  # the writer names keys <entity>_<suffix>
TAKEN = frozenset({"op", "attribute", "query", "page", "answer_text"})


class NoteError(ValueError):
    """A domain note the writer cannot use; ``where`` names the field."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


@dataclass(frozen=True)
class NoteAttribute:
    names: tuple[str, ...]  # the canonical name first, then synonyms
    type: str
    values: tuple[str, ...] = ()  # category/state values, or a text vocabulary
    pool: str = ""  # text drawn from a shared vocabulary
    words: int = 1
    low: Any = None
    high: Any = None
    unit: str = ""
    skew: bool = False
    p_true: float = 0.5

    @property
    def name(self) -> str:
        return self.names[0]


@dataclass(frozen=True)
class NoteEntity:
    name: str
    plural: str
    prefix: str
    rows: tuple[int, int]
    attributes: tuple[NoteAttribute, ...]

    def attribute(self, name: str) -> NoteAttribute | None:
        return next((a for a in self.attributes if a.name == name), None)


@dataclass(frozen=True)
class NoteAction:
    verb: str
    synonyms: tuple[str, ...]
    entity: str
    attribute: str
    start: str
    end: str


@dataclass(frozen=True)
class NoteRelation:
    source: str  # the "many" side
    target: str
    name: str


@dataclass(frozen=True)
class NoteRule:
    when: str  # a category or bool attribute of the main entity
    then: str  # an ordered attribute bounded when it holds
    why: str


@dataclass(frozen=True)
class DomainNote:
    domain: str
    aliases: tuple[str, ...]
    about: str
    main: str
    entities: tuple[NoteEntity, ...]
    relations: tuple[NoteRelation, ...]
    verbs: dict[str, tuple[str, ...]]
    actions: tuple[NoteAction, ...]
    rules: tuple[NoteRule, ...]

    def entity(self, name: str) -> NoteEntity:
        return next(e for e in self.entities if e.name == name)

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "_", self.domain.lower()).strip("_")[:40] or "domain"


def load_note_text(text: str | bytes) -> DomainNote:
    """A note from JSON text, size-bounded before parsing."""
    if len(text) > MAX_NOTE_BYTES:
        raise NoteError("note", f"is {len(text)} bytes (at most {MAX_NOTE_BYTES})")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NoteError("note", f"not JSON ({type(exc).__name__})") from None
    return parse_note(obj)


def parse_note(obj: Any) -> DomainNote:
    """A checked :class:`DomainNote`, or the first :class:`NoteError`."""
    if not isinstance(obj, dict):
        raise NoteError("note", "must be a JSON object")
    known = {"domain", "aliases", "about", "main", "entities", "relations", "verbs", "actions"}
    extra = set(obj) - known - {"rules"}
    if extra:
        raise NoteError(sorted(extra)[0], "not a field of a domain note")
    domain = _text("domain", obj.get("domain"), 80)
    aliases = tuple(_text(f"aliases[{i}]", a, 80) for i, a in enumerate(_list("aliases", obj, 12)))
    about = _text("about", obj.get("about"), 500)
    raw_entities = _list("entities", obj, 6, 2)
    entities = tuple(_entity(f"entities[{i}]", e) for i, e in enumerate(raw_entities))
    names = [e.name for e in entities]
    if len(set(names)) < len(names):
        raise NoteError("entities", "duplicate entity name")
    by_name = {e.name: e for e in entities}
    main = obj.get("main")
    if main not in by_name:
        raise NoteError("main", f"{main!r} is not an entity of the note")
    relations = tuple(
        _relation(f"relations[{i}]", r, by_name)
        for i, r in enumerate(_list("relations", obj, 10, 1))
    )
    if len({(r.source, r.name) for r in relations}) < len(relations):
        raise NoteError("relations", "duplicate relation")
    if not any(main in (r.source, r.target) for r in relations):
        raise NoteError("main", "the main entity needs a relation (levels 3-5 join or aggregate)")
    verbs = _verbs(obj.get("verbs", {}))
    actions = tuple(
        _action(f"actions[{i}]", a, by_name) for i, a in enumerate(_list("actions", obj, 6))
    )
    rules = tuple(
        _rule(f"rules[{i}]", r, by_name[main]) for i, r in enumerate(_list("rules", obj, 4))
    )
    _main_is_taskable(by_name[main], {a.attribute for a in actions if a.entity == main})
    return DomainNote(domain, aliases, about, main, entities, relations, verbs, actions, rules)


def _text(where: str, value: Any, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise NoteError(where, "must be a non-empty string")
    if len(value) > limit or re.search(r"[\x00-\x1f\x7f]", value):
        raise NoteError(where, f"at most {limit} characters, no control characters")
    return value.strip()


def _list(key: str, obj: dict[str, Any], most: int, least: int = 0) -> list[Any]:
    value = obj.get(key, [])
    if not isinstance(value, list) or not least <= len(value) <= most:
        raise NoteError(key, f"must be a list of {least}..{most} items")
    return value


def _ident(where: str, value: Any) -> str:
    if not isinstance(value, str) or not IDENT.match(value) or _reserved(value):
        raise NoteError(where, "must be a lower-case identifier of at most 28 characters")
    return value


def _entity(where: str, raw: Any) -> NoteEntity:
    if not isinstance(raw, dict) or set(raw) - {"name", "plural", "prefix", "rows", "attributes"}:
        raise NoteError(where, "an entity has name, plural, prefix, rows, attributes")
    name = _ident(f"{where}.name", raw.get("name"))
    plural = _ident(f"{where}.plural", raw.get("plural", name + "s"))
    prefix = raw.get("prefix")
    if not isinstance(prefix, str) or not re.match(r"^[A-Z]{1,4}$", prefix):
        raise NoteError(f"{where}.prefix", "must be 1-4 capital letters")
    rows = raw.get("rows", [20, 80])
    if (
        not isinstance(rows, list)
        or len(rows) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in rows)
        or not 8 <= rows[0] <= rows[1] <= 300
    ):
        raise NoteError(f"{where}.rows", "must be [low, high] with 8 <= low <= high <= 300")
    attrs = raw.get("attributes")
    if not isinstance(attrs, dict) or not 1 <= len(attrs) <= 12:
        raise NoteError(f"{where}.attributes", "must be an object of 1..12 attributes")
    parsed = tuple(_attribute(f"{where}.attributes.{k}", k, v) for k, v in attrs.items())
    every = [n for a in parsed for n in a.names]
    if len(set(every)) < len(every) or any(f"{name}_{k}" in every for k in KEY_SUFFIXES):
        raise NoteError(f"{where}.attributes", "duplicate names, or one that looks like the key")
    if all(a.type == "text" for a in parsed):
        raise NoteError(f"{where}.attributes", "needs an attribute besides text")
    return NoteEntity(name, plural, prefix, (rows[0], rows[1]), parsed)


def _attribute(where: str, key: str, dsl: Any) -> NoteAttribute:
    names = tuple(_ident(where, n) for n in key.split("|"))
    if len(names) > 4 or any(n in TAKEN or n.startswith(("min_", "max_")) for n in names):
        raise NoteError(where, f"at most 4 names, none of {sorted(TAKEN)} or min_/max_")
    if not isinstance(dsl, str) or len(dsl) > 2000:
        raise NoteError(where, "must be a string such as 'int 1..10 days'")
    kind, _, rest = dsl.partition(" ")
    if kind not in TYPES:
        raise NoteError(where, f"unknown type {kind!r}; one of {list(TYPES)}")
    if kind in ("category", "state"):
        values = _values(where, rest, 2, 30)
        return NoteAttribute(names, kind, values=values)
    if kind == "text":
        if rest in POOLS:
            return NoteAttribute(names, kind, pool=rest, words=2)
        count, _, vocab = rest.partition(" ")
        if count not in ("1", "2", "3"):
            raise NoteError(where, "text needs a pool name or 'N word|word|...' with N in 1..3")
        return NoteAttribute(names, kind, values=_values(where, vocab, 4, 200), words=int(count))
    if kind == "bool":
        try:
            p = float(rest)
        except ValueError:
            raise NoteError(where, "bool needs a probability, e.g. 'bool 0.3'") from None
        if not 0.05 <= p <= 0.95:
            raise NoteError(where, "the probability must lie in 0.05..0.95")
        return NoteAttribute(names, kind, p_true=p)
    if kind == "date":
        m = _DATES.match(rest)
        if not m or m.group(1) >= m.group(2):
            raise NoteError(where, "date needs 'YYYY-MM-DD..YYYY-MM-DD', low before high")
        return NoteAttribute(names, kind, low=m.group(1), high=m.group(2))
    m = _RANGE.match(rest)
    if not m:
        raise NoteError(where, f"{kind} needs 'low..high [unit] [skew]'")
    low, high = float(m.group(1)), float(m.group(2))
    if kind == "int":
        if not (low.is_integer() and high.is_integer()):
            raise NoteError(where, "int bounds must be whole numbers")
        low, high = int(low), int(high)
    if high - low < 4:
        raise NoteError(where, "high must exceed low by at least 4")
    return NoteAttribute(
        names, kind, low=low, high=high, unit=m.group(3) or "", skew=bool(m.group(4))
    )


def _values(where: str, text: str, least: int, most: int) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split("|"))
    if not least <= len(values) <= most or not all(_PRINTABLE.match(v) for v in values):
        raise NoteError(where, f"needs {least}..{most} '|'-separated values of 1..40 characters")
    if len(set(values)) < len(values):
        raise NoteError(where, "duplicate value")
    return values


def _relation(where: str, raw: Any, entities: dict[str, NoteEntity]) -> NoteRelation:
    m = re.match(
        r"^([a-z0-9_]+)>([a-z0-9_]+)(?::([a-z0-9_]+))?$", raw if isinstance(raw, str) else ""
    )
    if not m:
        raise NoteError(where, "must be 'child>parent' or 'child>parent:name'")
    source, target = m.group(1), m.group(2)
    name = _ident(where, m.group(3) or target)
    for end in (source, target):
        if end not in entities:
            raise NoteError(where, f"unknown entity {end!r}")
    if source == target:
        raise NoteError(where, "a relation joins two different entities")
    if any(name in a.names for a in entities[source].attributes):
        raise NoteError(where, f"{name!r} is also an attribute of {source}")
    return NoteRelation(source, target, name)


def _verbs(raw: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, dict) or set(raw) - set(KINDS):
        raise NoteError("verbs", f"must be an object with keys among {list(KINDS)}")
    out: dict[str, tuple[str, ...]] = {}
    for kind, words in raw.items():
        if not isinstance(words, list) or len(words) > 8:
            raise NoteError(f"verbs.{kind}", "must be a list of at most 8 verbs")
        out[kind] = tuple(_ident(f"verbs.{kind}", w) for w in words)
    return out


def _action(where: str, raw: Any, entities: dict[str, NoteEntity]) -> NoteAction:
    fields = {"verb", "synonyms", "entity", "attribute", "from", "to"}
    if not isinstance(raw, dict) or set(raw) - fields:
        raise NoteError(where, f"an action has {sorted(fields)}")
    verb = _ident(f"{where}.verb", raw.get("verb"))
    synonyms = raw.get("synonyms", [])
    if not isinstance(synonyms, list) or len(synonyms) > 4:
        raise NoteError(f"{where}.synonyms", "must be a list of at most 4 verbs")
    entity = entities.get(raw.get("entity"))  # type: ignore[arg-type]  # checked just below
    if entity is None:
        raise NoteError(f"{where}.entity", "unknown entity")
    attr = entity.attribute(raw.get("attribute"))  # type: ignore[arg-type]  # None if absent
    if attr is None or attr.type != "state":
        raise NoteError(f"{where}.attribute", f"needs a state attribute of {entity.name}")
    start, end = raw.get("from"), raw.get("to")
    if start not in attr.values or end not in attr.values or start == end:
        raise NoteError(f"{where}.to", "from and to are two different values of the state")
    syn = tuple(_ident(f"{where}.synonyms", s) for s in synonyms)
    return NoteAction(verb, syn, entity.name, attr.name, start, end)


def _rule(where: str, raw: Any, main: NoteEntity) -> NoteRule:
    if not isinstance(raw, dict) or set(raw) - {"if", "then", "why"}:
        raise NoteError(where, "a rule has if, then, why")
    when, then = main.attribute(raw.get("if")), main.attribute(raw.get("then"))  # type: ignore[arg-type]
    if when is None or when.type not in ("category", "bool"):
        raise NoteError(f"{where}.if", f"needs a category or bool attribute of {main.name}")
    if then is None or then.type not in ("int", "number", "date"):
        raise NoteError(f"{where}.then", f"needs an int, number or date attribute of {main.name}")
    return NoteRule(when.name, then.name, _text(f"{where}.why", raw.get("why", "-"), 200))


def _main_is_taskable(main: NoteEntity, moved: set[str]) -> None:
    """Level 5 composes three filters and a budget and reports a number: the main entity needs
    enough conditions of its own, besides what its actions move."""
    conds = [a for a in main.attributes if a.type not in ("text",) and a.name not in moved]
    if len(conds) < 5:
        raise NoteError("main", f"{main.name} needs 5 condition attributes (not text or moved)")
    if not any(a.type in ("int", "number") for a in conds):
        raise NoteError("main", f"{main.name} needs an int or number attribute")


def _reserved(name: str) -> bool:
    """Python keywords, soft ones too (``match``): spec names must be able to bind in tools.py."""
    return keyword.iskeyword(name) or keyword.issoftkeyword(name)
