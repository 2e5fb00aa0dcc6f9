"""Every tool is callable with its documented schema.

Each tool is called with arguments that are valid under its JSON schema: the arguments the gold
solution actually used (recorded by the sandbox), and, for tools the gold never called, sample
arguments built from the schema (defaults, enum members, strings the gold's calls used for a
parameter of the same name).  A tool *may* raise for a value it does not know (a ``KeyError``
for a city that does not exist is an answer an agent learns from); what fails the probe is a
call that cannot even be made or cannot be answered: a ``TypeError`` (the signature disagrees
with the schema), a result that is not JSON, a hang, a crash or running out of memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from envgym.sandbox import CallError, Sandbox, ToolSpec

_FATAL = {
    CallError.TIMEOUT,
    CallError.CRASH,
    CallError.MEMORY,
    CallError.PROTOCOL,
    CallError.OUTPUT_TOO_LARGE,
}


@dataclass(frozen=True)
class ProbeFailure:
    tool: str
    arguments: dict[str, Any]
    why: str

    def __str__(self) -> str:
        return f"{self.tool}({self.arguments}) {self.why}"


def sample_arguments(spec: ToolSpec, seen: dict[str, list[Any]]) -> dict[str, Any]:
    """Schema-valid arguments for ``spec``: required parameters only, from ``seen`` when possible."""
    params = spec.parameters.get("properties", {})
    out = {}
    for name in spec.parameters.get("required", []):
        out[name] = _sample(params.get(name, {}), seen.get(name, []))
    return out


def _sample(schema: dict[str, Any], seen: list[Any]) -> Any:
    for value in seen:
        if _matches(schema, value):
            return value
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    if "anyOf" in schema:
        return _sample(schema["anyOf"][0], seen)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    return {
        "string": "sample",
        "integer": 1,
        "number": 1.0,
        "boolean": False,
        "array": [],
        "object": {},
        "null": None,
    }.get(kind, "sample")


def _matches(schema: dict[str, Any], value: Any) -> bool:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "enum" in schema:
        return value in schema["enum"]
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
        "null": lambda v: v is None,
    }
    return any(checks[k](value) for k in kinds if k in checks)


def probe_tools(
    box: Sandbox, specs: Sequence[ToolSpec], gold_calls: Iterable[tuple[str, dict[str, Any]]]
) -> list[ProbeFailure]:
    """Call every tool (on the box's current state); the calls that show a broken tool."""
    recorded: dict[str, dict[str, Any]] = {}
    seen: dict[str, list[Any]] = {}
    for name, args in gold_calls:
        recorded.setdefault(name, args)
        for key, value in args.items():
            seen.setdefault(key, []).append(value)
    failures = []
    for spec in specs:
        args = recorded.get(spec.name)
        if args is None:
            args = sample_arguments(spec, seen)
        outcome = box.call_tool(spec.name, args)
        if outcome.ok:
            continue
        last = outcome.message.strip().splitlines()[-1] if outcome.message.strip() else ""
        if outcome.error in _FATAL:
            failures.append(ProbeFailure(spec.name, args, f"{outcome.error.value}: {last[:200]}"))
        elif (
            outcome.error is CallError.NOT_FOUND
            or last.startswith("TypeError")
            or "not JSON-compatible" in last
        ):
            failures.append(
                ProbeFailure(spec.name, args, f"does not accept its schema: {last[:200]}")
            )
    return failures
