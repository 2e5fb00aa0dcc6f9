"""Running a tool's argument schema on the host: RE2 patterns, no remote references, a deadline.

jsonschema's stock keywords run ``pattern`` and ``patternProperties`` with Python's backtracking
``re`` (``^(a+)+$`` against forty ``a`` and a ``!`` runs for hours), compare ``uniqueItems``
pairwise (quadratic) and fetch any ``$ref`` they cannot resolve locally.  The validator here
swaps those keywords for linear-time ones (RE2; a hash set), resolves references only inside
the schema document (:data:`NO_REMOTE`: a retrieval is refused, never attempted) and checks a
per-validation deadline before every keyword that descends, so a schema that branches
exponentially through local references (``anyOf`` of ``$ref`` to itself under ``items``) ends
with :class:`ValidationTimeout` instead of blocking the step.  :mod:`envgym.schema_guard` refuses at
load time what would fail here.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError
from referencing import Registry
from referencing.exceptions import NoSuchResource

from envgym.re2_compile import compile_re2

#: Seconds one argument check may take on jsonschema's path (the exact fast path needs none).
VALIDATION_DEADLINE_S = 2.0
_MAX_SHOWN = 200  # characters of an argument quoted in a validation message


class ValidationTimeout(Exception):
    """The arguments' check ran past its deadline."""


_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "envgym_schema_deadline", default=None
)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Within this block, validation raises :class:`ValidationTimeout` after ``seconds``."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _tick() -> None:
    end = _DEADLINE.get()
    if end is not None and time.monotonic() > end:
        raise ValidationTimeout


def _refuse(uri: str) -> Any:
    # referencing builds it with its own attrs wrapper, whose __init__ mypy's attrs plugin misses
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


#: References resolve inside the schema (and the bundled metaschemas), never by a fetch.
NO_REMOTE: Registry = Registry(retrieve=_refuse)  # type: ignore[call-arg]  # as above


@lru_cache(maxsize=1024)
def re2_pattern(pattern: str) -> Any:
    """The RE2 program of a schema's ``pattern`` (compiled once; ValueError if RE2 cannot)."""
    return compile_re2(pattern)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not re2_pattern(pattern).search(instance):
        yield ValidationError(f"{_shown(instance)} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = re2_pattern(pattern)
        for key, value in instance.items():
            if compiled.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _canonical(value: Any) -> Any:
    """A hashable key equal for JSON-equal values: ``1 == 1.0``, ``true != 1``, key order ignored
    (recursion is bounded: arguments deeper than the dispatcher's limit never get here)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", value)
    if isinstance(value, list):
        return ("list", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, str) or value is None:
        return value
    return ("object", id(value))


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield ValidationError(f"{_shown(instance)} has non-unique elements")
            return
        seen.add(key)


def _timed(keyword: Callable[..., Any]) -> Callable[..., Iterator[ValidationError]]:
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        _tick()
        errors = keyword(validator, value, instance, schema)
        if errors:
            yield from errors

    return run


#: Keywords that descend into the instance or follow a reference: only they can multiply the
#: work (a ``$ref`` cycle under ``anyOf`` doubles it per level), so only they check the deadline;
#: the leaf keywords (``type``, ``enum``, ``pattern``…) are linear in the value they look at.
_DESCENDING = frozenset({
    "$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "not", "if", "items", "prefixItems",
    "contains", "properties", "patternProperties", "additionalProperties", "propertyNames",
    "dependentSchemas", "unevaluatedItems", "unevaluatedProperties",
})  # fmt: skip

_BASE = jsonschema.Draft202012Validator
_KEYWORDS = {
    **_BASE.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "uniqueItems": _unique_items,
}

#: JSON Schema 2020-12 as the host runs it.  JSON Schema counts 2.0 as an integer, but the tool
#: is Python: ``"ab" * 2.0`` raises, and an ``int`` parameter must receive an int.  Integers are
#: therefore ints here, as in the dispatcher's fast path.
StrictValidator = jsonschema.validators.extend(
    _BASE,
    validators={
        name: _timed(keyword) if name in _DESCENDING else keyword
        for name, keyword in _KEYWORDS.items()
    },
    type_checker=_BASE.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


def tool_validator(schema: Any) -> Any:
    """A validator of ``schema`` that resolves references only inside it."""
    return StrictValidator(schema, registry=NO_REMOTE)
