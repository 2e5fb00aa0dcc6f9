"""Load-time checks of a tool's argument schema that comes from outside envgym.

An MCP server's ``inputSchema`` (and a bundle worker's schemas) is compiled and run on the host
by jsonschema, which would otherwise fetch any ``$ref`` it cannot resolve locally (``http://``,
``file://``: the host reads its own files or calls a service on the server's behalf) and run
every ``pattern`` with Python's backtracking ``re``.  :func:`check_schema` refuses, before
anything compiles the schema:

* a ``$ref`` / ``$dynamicRef`` that is not a local ``#…`` reference, or one that points anywhere
  but at a subschema of the same document (a pointer into ``enum`` data would turn data into a
  schema no one checked);
* ``$id`` / ``$schema`` / ``$vocabulary`` inside the schema (they change the base URI a ``$ref``
  resolves against, or name a remote metaschema);
* a ``pattern`` or ``patternProperties`` key RE2 cannot compile (validation runs them through
  RE2, linear time: :mod:`envgym.schema_validator`);
* a schema larger than :data:`MAX_SCHEMA_NODES` values, :data:`MAX_SCHEMA_CHARS` characters of
  strings, or nested deeper than :data:`MAX_SCHEMA_DEPTH`;
* anything the JSON Schema metaschema rejects (``"type": "strnig"`` would otherwise raise in the
  middle of a step).

The walk is iterative and bounded, so a hostile schema cannot exhaust the stack or the memory of
the check itself.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

from envgym.re2_compile import compile_re2

MAX_SCHEMA_NODES = 10_000  # every dict, list and scalar; real tool schemas have a few hundred
MAX_SCHEMA_DEPTH = 32  # JSON nesting of the schema document
MAX_SCHEMA_CHARS = 200_000  # characters of all strings (descriptions, names, patterns) together

# Keywords whose value is one subschema, a list of them, or a map of names to them (2020-12).
_ONE = frozenset(
    {
        "additionalProperties",
        "contains",
        "propertyNames",
        "if",
        "then",
        "else",
        "not",
        "unevaluatedItems",
        "unevaluatedProperties",
        "items",
    }
)
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_REFS = frozenset({"$ref", "$dynamicRef"})
_FORBIDDEN = frozenset({"$id", "$schema", "$vocabulary", "$recursiveRef", "$recursiveAnchor"})


class SchemaRefused(ValueError):
    """A tool's schema envgym will not compile; the message names the tool and the reason."""


def check_schema(schema: Any, *, tool: str) -> None:
    """Raise :class:`SchemaRefused` naming ``tool`` when ``schema`` may not be compiled.

    Schemas that passed are remembered (by a digest of their JSON): the metaschema check costs
    milliseconds, and every env built from the same bundle or server brings the same schemas."""
    try:
        _check_size(schema)
        key = _digest(schema)
        with _PASSED_LOCK:
            if key in _PASSED:
                _PASSED.move_to_end(key)
                return
        targets, anchors, refs = _walk(schema)
        for where, ref in refs:
            _check_target(ref, targets, anchors, where)
    except ValueError as err:
        raise SchemaRefused(f"the input schema of tool {tool!r} is refused: {err}") from None
    _check_metaschema(schema, tool)
    with _PASSED_LOCK:
        _PASSED[key] = None
        while len(_PASSED) > _MAX_PASSED:
            _PASSED.popitem(last=False)


_PASSED: OrderedDict[bytes, None] = OrderedDict()  # digests of schemas that passed, oldest first
_PASSED_LOCK = threading.Lock()  # envs are built from several threads (rollout pools)
_MAX_PASSED = 4096


def _digest(schema: Any) -> bytes:
    try:
        text = json.dumps(schema, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        raise ValueError("it is not plain JSON") from None
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).digest()


def _check_size(schema: Any) -> None:
    nodes, chars = 0, 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise ValueError(f"it has more than {MAX_SCHEMA_NODES} values")
        if depth > MAX_SCHEMA_DEPTH:
            raise ValueError(f"it is nested more than {MAX_SCHEMA_DEPTH} levels deep")
        if isinstance(value, str):
            chars += len(value)
        elif isinstance(value, dict):
            chars += sum(len(k) if isinstance(k, str) else 0 for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        if chars > MAX_SCHEMA_CHARS:
            raise ValueError(f"its strings have more than {MAX_SCHEMA_CHARS} characters")


def _subschemas(key: str, value: Any, pointer: str) -> Iterator[tuple[str, Any]]:
    """(pointer, subschema) of one keyword of a schema object."""
    if key in _ONE and isinstance(value, (dict, bool)):
        yield f"{pointer}/{key}", value
    elif key in _LIST and isinstance(value, list):
        for i, sub in enumerate(value):
            yield f"{pointer}/{key}/{i}", sub
    elif key in _MAP and isinstance(value, dict):
        for name, sub in value.items():
            yield f"{pointer}/{key}/{_escape(str(name))}", sub


def _walk(schema: Any) -> tuple[set[str], set[str], list[tuple[str, str]]]:
    """Every subschema's JSON pointer, every anchor, and every (where, $ref); refuses what the
    module docstring lists.  Keywords holding data (``enum``, ``const``, ``default``…) and unknown
    keywords are not schemas: jsonschema never evaluates them unless a ``$ref`` points there, and
    :func:`_check_target` refuses such a ``$ref``."""
    targets: set[str] = set()
    anchors: set[str] = set()
    refs: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [("", schema)]
    while stack:
        pointer, node = stack.pop()
        targets.add(pointer)
        if not isinstance(node, dict):
            continue  # a boolean schema (true/false); the metaschema refuses other values
        where = pointer or "/"
        for key, value in node.items():
            if key in _FORBIDDEN:
                raise ValueError(
                    f"{key} at {where} is not allowed (only local '#…' references are)"
                )
            if key in _REFS:
                if not isinstance(value, str) or not value.startswith("#"):
                    raise ValueError(
                        f"{key} {_show(value)} at {where} is not a local '#…' reference; "
                        "remote and file references are never fetched"
                    )
                refs.append((where, value))
            elif key in ("$anchor", "$dynamicAnchor") and isinstance(value, str):
                anchors.add(value)
            elif key == "pattern" and isinstance(value, str):
                _pattern(value, where)
            elif key == "patternProperties" and isinstance(value, dict):
                for name in value:
                    _pattern(str(name), f"{pointer}/patternProperties")
            stack.extend(_subschemas(key, value, pointer))
    return targets, anchors, refs


def _check_target(ref: str, targets: set[str], anchors: set[str], where: str) -> None:
    fragment = unquote(ref[1:])
    if fragment == "" or fragment.startswith("/"):
        if fragment in targets:
            return
        raise ValueError(
            f"$ref {_show(ref)} at {where} does not point at a subschema of the same schema"
        )
    if fragment not in anchors:
        raise ValueError(f"$ref {_show(ref)} at {where} names no $anchor of the schema")


def _pattern(pattern: str, where: str) -> None:
    try:
        compile_re2(pattern)
    except ValueError as err:
        raise ValueError(f"pattern at {where}: {err}") from None


def _check_metaschema(schema: Any, tool: str) -> None:
    import jsonschema

    from envgym.schema_validator import StrictValidator, tool_validator

    error = jsonschema.exceptions.best_match(
        tool_validator(StrictValidator.META_SCHEMA).iter_errors(schema)
    )
    if error is not None:
        where = "/" + "/".join(str(p) for p in error.absolute_path)
        raise SchemaRefused(
            f"the input schema of tool {tool!r} is not a valid JSON Schema: "
            f"at {where}: {_show(error.message, 200)}"
        )


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _show(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
