"""``load_spec``: a spec (hostile input: a user's or a model's JSON) validated, or refused.

Its size and nesting are bounded before anything walks it; then it is validated against the
published ``schema.json``; then what a schema cannot say is checked (``semantics``: references,
duplicates, cycles, types per role).  Every refusal is one :class:`SpecError` naming the path and
the reason.  Nothing in a spec is ever executed or pasted into code: names are checked to be
safe identifiers and travel as data (``tools.json``) to fixed code templates.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from envgym.bundle_limits import json_depth
from envgym.envs.procedural_kit.spec.model import (
    MAX_DEPTH,
    MAX_SPEC_BYTES,
    SPEC_VERSION,
    Spec,
    SpecError,
)
from envgym.envs.procedural_kit.spec.semantics import build

__all__ = ["SpecError", "load_spec", "load_spec_text", "schema"]


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
        if "u0000" in str(err.validator_value):
            return f"{err.instance[:60]!r} holds a control character (a line break, a tab, …)"
        return f"{err.instance[:60]!r} is not a safe name (lower-case letters, digits, _; ≤ 40)"
    if err.validator == "enum":
        return f"{str(err.instance)[:60]!r} is not one of {err.validator_value}"
    if err.validator == "const" and err.absolute_path and err.absolute_path[-1] == "spec_version":
        return (
            f"unsupported spec_version {str(err.instance)[:20]}; this envgym reads {SPEC_VERSION}"
        )
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
