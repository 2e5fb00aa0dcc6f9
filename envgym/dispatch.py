"""Running one tool call for an agent: validate, call the sandbox, turn the outcome into text.

Everything an agent can get wrong ends here as a :class:`ToolResult` with ``error`` set and a
message written for the agent — never as an exception.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, NamedTuple

from jsonschema.exceptions import UnknownType
from referencing.exceptions import Unresolvable

from envgym.sandbox.base import CallOutcome, Sandbox, ToolSpec
from envgym.schema_guard import check_schema
from envgym.schema_validator import (
    VALIDATION_DEADLINE_S,
    StrictValidator,
    ValidationTimeout,
    deadline,
    tool_validator,
)

__all__ = ["StrictValidator", "ToolResult", "ToolTable", "outcome_to_result", "run_tool"]

#: Deepest argument nesting accepted.  Real tool arguments are a few levels deep; far deeper
#: values crash recursive code on the way (jsonschema's error formatting, pprint, json) with a
#: RecursionError, so they are refused up front with a message instead.
MAX_ARGUMENT_DEPTH = 64
_MAX_PROBLEM_CHARS = 300  # one validation problem, as shown to the agent

DEFAULT_OUTPUT_CAP = 16_384  # characters of a tool result shown to the agent


class ToolResult(NamedTuple):
    """What the agent sees for one call, plus bookkeeping for ``info`` (a named tuple, as
    ``CallOutcome``: one per call, and immutable without a frozen dataclass's cost)."""

    content: str
    error: str | None = None  # error kind, counted in info["errors"]
    value: Any = None  # the raw return value when the call succeeded


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
_PLAIN_KEYS = frozenset({"type", "description", "default", "title"})


def _type_check(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """An exact checker for ``{"type": ...}`` (and arrays of such items), else None."""
    if not set(schema) <= _PLAIN_KEYS | {"items"} or "type" not in schema:
        return None
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if not all(k in _JSON_TYPES for k in kinds):
        return None
    checks = [_JSON_TYPES[k] for k in kinds]
    if "items" not in schema:
        return lambda v: any(c(v) for c in checks)
    if kinds != ["array"] or not isinstance(schema["items"], Mapping):
        return None
    item = _type_check(schema["items"])
    if item is None:
        return None
    return lambda v: isinstance(v, list) and all(item(x) for x in v)


#: Exact Python types of decoded JSON per JSON type: ``type(v) in ...`` is one C-level test,
#: and ``type(True) is bool`` keeps booleans out of integer/number for free.
_EXACT: dict[str, frozenset[type]] = {
    "string": frozenset({str}),
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "boolean": frozenset({bool}),
    "null": frozenset({type(None)}),
    "array": frozenset({list}),
    "object": frozenset({dict}),
}


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _exact_types(schema: Mapping[str, Any]) -> frozenset[type] | None:
    """The exact types a plain ``{"type": ...}`` schema accepts, or None for anything else."""
    if not set(schema) <= _PLAIN_KEYS or "type" not in schema:
        return None
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if not all(isinstance(k, str) and k in _EXACT for k in kinds):
        return None
    return frozenset().union(*(_EXACT[k] for k in kinds))


@dataclass(frozen=True)
class _FastCheck:
    """Accepts only what the JSON Schema accepts, for the simple schemas tools mostly have;
    anything it cannot decide (or rejects, or a subclass of a JSON type) goes to jsonschema,
    which also words the error."""

    required: frozenset[str]
    types: Mapping[str, frozenset[type]]  # plain properties: exact types
    checks: Mapping[str, Callable[[Any], bool]]  # arrays with item schemas
    # Every property a JSON scalar: what ``ok`` accepts nests nothing (no depth check needed).
    flat: bool = False

    @classmethod
    def build(cls, schema: Mapping[str, Any]) -> _FastCheck | None:
        if set(schema) - {
            "type",
            "properties",
            "required",
            "additionalProperties",
            "title",
            "description",
        }:
            return None
        if schema.get("type") != "object" or schema.get("additionalProperties", True) is not False:
            return None
        types: dict[str, frozenset[type]] = {}
        checks: dict[str, Callable[[Any], bool]] = {}
        for name, sub in (schema.get("properties") or {}).items():
            exact = _exact_types(sub) if isinstance(sub, Mapping) else None
            if exact is not None:
                types[name] = exact
                continue
            check = _type_check(sub) if isinstance(sub, Mapping) else None
            if check is None:
                return None
            checks[name] = check
        flat = not checks and all(t <= _SCALARS for t in types.values())
        return cls(frozenset(schema.get("required", ())), types, checks, flat)

    def ok(self, arguments: Mapping[str, Any]) -> bool:
        if not self.required <= arguments.keys():
            return False
        types, checks = self.types, self.checks
        for key, value in arguments.items():
            allowed = types.get(key)
            if allowed is None:
                check = checks.get(key)
                if check is None or not check(value):
                    return False
            elif type(value) not in allowed:
                return False
        return True


class ToolTable:
    """The tools of one bundle, with a compiled argument validator per tool."""

    def __init__(self, specs: list[ToolSpec]) -> None:
        """Raises :class:`~envgym.schema_guard.SchemaRefused` (a ValueError naming the tool) for
        a schema the host will not compile: remote references, patterns RE2 cannot run, too big."""
        for spec in specs:
            check_schema(spec.parameters, tool=spec.name)
        self.specs = {s.name: s for s in specs}
        self._validators = {s.name: tool_validator(s.parameters) for s in specs}
        self._fast = {s.name: _FastCheck.build(s.parameters) for s in specs}
        self._schemas = [s.openai() for s in specs]

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI function schemas (one shared list: treat it as read-only)."""
        return self._schemas

    def check(self, name: str, arguments: Any) -> str | None:
        """A readable problem with this call, or None when it may run."""
        if name not in self.specs:
            known = ", ".join(sorted(self.specs))
            return f"unknown tool {name!r}. Available tools: {known}"
        # type() first: isinstance against the Mapping ABC costs a step ~0.3 µs
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            return f"arguments of {name} must be a JSON object, got {type(arguments).__name__}"
        fast = self._fast[name]
        accepted = fast is not None and fast.ok(arguments)
        if accepted and fast is not None and fast.flat:
            return None  # every value a JSON scalar: there is no nesting to measure
        if _too_deep(arguments.values()):
            return f"arguments of {name} are nested more than {MAX_ARGUMENT_DEPTH} levels deep"
        if accepted:
            return None
        try:
            # islice: a huge argument can have thousands of errors; five are shown.
            with deadline(VALIDATION_DEADLINE_S):
                problems = list(islice(self._validators[name].iter_errors(dict(arguments)), 50))
        except RecursionError:  # a schema recursing on itself; depth alone is checked above
            return f"invalid arguments for {name}: they could not be checked (too deeply nested)"
        except ValidationTimeout:  # a schema that branches exponentially through its own $refs
            return (
                f"invalid arguments for {name}: checking them against the tool's schema took "
                f"over {VALIDATION_DEADLINE_S:g} s; send smaller or simpler arguments"
            )
        except (Unresolvable, UnknownType, TypeError, ValueError) as err:  # past the load's checks
            kind = type(err).__name__
            return f"invalid arguments for {name}: the tool's schema cannot check them ({kind})"
        if not problems:
            return None
        # Sorted by where and what, never by str(error): that pretty-prints the whole instance.
        problems.sort(
            key=lambda e: ([str(p) for p in e.absolute_path], str(e.validator), e.message)
        )
        lines = []
        for problem in problems[:5]:
            where = ".".join(str(p) for p in problem.absolute_path)
            lines.append(_short(f"{where}: {problem.message}" if where else problem.message))
        return f"invalid arguments for {name}: " + "; ".join(lines)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_PROBLEM_CHARS else text[: _MAX_PROBLEM_CHARS - 1] + "…"


def _too_deep(values: Any) -> bool:
    """Whether any value nests lists/objects more than MAX_ARGUMENT_DEPTH deep (iterative:
    the point is to not recurse).  Flat arguments cost one isinstance check each."""
    stack = [(v, 1) for v in values if isinstance(v, (list, dict))]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack.extend((c, depth + 1) for c in children if isinstance(c, (list, dict)))
    return False


def render_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def run_tool(
    sandbox: Sandbox,
    table: ToolTable,
    name: str,
    arguments: Any,
    *,
    output_cap: int,
    timeout_s: float | None = None,
) -> ToolResult:
    """Check one call's arguments and run it; ``timeout_s`` bounds this call (None: the
    sandbox's own limit)."""
    problem = table.check(name, arguments)
    if problem is not None:
        kind = "unknown_tool" if name not in table.specs else "bad_arguments"
        return ToolResult(content=f"Error: {problem}", error=kind)
    outcome = sandbox.call_tool(name, dict(arguments), timeout_s=timeout_s)
    return outcome_to_result(name, outcome, output_cap=output_cap)


def outcome_to_result(name: str, outcome: CallOutcome, *, output_cap: int) -> ToolResult:
    if not outcome.ok:
        kind = outcome.error.value if outcome.error else "tool_error"
        return ToolResult(content=f"Error: {name} failed ({kind}): {outcome.message}", error=kind)
    text = outcome.rendered if outcome.rendered is not None else render_value(outcome.value)
    if len(text) > output_cap:
        return ToolResult(
            content=(
                f"Error: the result of {name} is {len(text)} characters, over the {output_cap}-character "
                "limit; narrow the request. Beginning of the result:\n"
                + text[: min(1000, output_cap)]
            ),
            error="output_too_large",
        )
    return ToolResult(content=text, value=outcome.value)
