"""Bare JSON tool calls: ``{"name": ..., "arguments": {...}}`` or a list of them, on their own
line(s) or in a fenced ```json block; ``"parameters"`` is accepted for ``"arguments"``.

Unlike markup formats, JSON is also a plausible *answer*, so only JSON shaped like a call counts:
an object whose keys all belong to a call (``name``, ``arguments``, ``parameters``, ``type``,
``id``, ``function``) and that names a function, or a list holding at least one such object.
Calls are looked for only after the reasoning: reasoning often quotes JSON it is planning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envgym.actions import NormalizedAction
from envgym.messages import ToolCall, dump_json

from ._common import (
    THINK_CLOSE,
    THINK_OPEN,
    CallResult,
    bad_text,
    call_from_json_text,
    call_from_value,
    finish,
    safe_json,
    schema_lines,
    split_reasoning,
    tool_functions,
    tools_prompt,
)

_CALL_KEYS = frozenset({"name", "arguments", "parameters", "type", "id", "function"})
_MARKERS = (THINK_OPEN, THINK_CLOSE)
# The closing fence must end its line: JSON strings cannot hold a raw newline, so a ``` inside
# an argument value never ends the block.
_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n(.*?)(```[ \t]*(?=\n|\Z)|\Z)", re.DOTALL)
_LINE_START = re.compile(r"^[ \t]*([\[{])", re.MULTILINE)
_ATTEMPT = re.compile(r'\s*\[?\s*\{\s*"(?:name|function)"\s*:')
_DECODER = json.JSONDecoder()

_FORMAT = (
    '{"name": "<function name>", "arguments": {<arguments as a JSON object>}}\n\n'
    "To make several calls at once, write a JSON list of such objects. The JSON may follow "
    "your text in a ```json fenced block. When you are done, answer in plain text with no such "
    "JSON."
)


def _is_call(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and all(isinstance(k, str) and k in _CALL_KEYS for k in value)
        and ("name" in value or isinstance(value.get("function"), Mapping))
    )


def _are_calls(value: Any) -> bool:
    return _is_call(value) or (isinstance(value, list) and any(_is_call(v) for v in value))


@dataclass(frozen=True)
class _Found:
    start: int
    end: int
    value: Any = None  # decoded call(s), when readable
    text: str = ""  # the raw JSON, for a call that could not be read
    closed: bool = True


def _fenced(content: str) -> list[_Found]:
    found = []
    for m in _FENCE.finditer(content):
        body, closed = m.group(1).strip(), bool(m.group(2))
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            if _ATTEMPT.match(body):
                found.append(_Found(m.start(), m.end(), text=body, closed=closed))
            continue
        if _are_calls(value):
            found.append(_Found(m.start(), m.end(), value=value))
    return found


def _bare(content: str, fences: Sequence[tuple[int, int]]) -> list[_Found]:
    found: list[_Found] = []
    consumed = 0
    for m in _LINE_START.finditer(content):
        start = m.start(1)
        if start < consumed or any(a <= start < b for a, b in fences):
            continue
        try:
            value, end = _DECODER.raw_decode(content, start)
        except (ValueError, RecursionError):
            if _ATTEMPT.match(content, start):
                # Cannot tell where broken JSON ends; it is almost always the cut-off tail, and
                # at the latest it ends where a fenced block begins.
                stop = min((a for a, _ in fences if a > start), default=len(content))
                found.append(_Found(start, stop, text=content[start:stop].strip()))
                break
            continue
        consumed = end  # JSON that is not a call (an answer) is skipped whole, nested lines too
        if _are_calls(value):
            found.append(_Found(start, end, value=value))
    return found


@dataclass(frozen=True)
class JsonParser:
    name: str = "json"

    def parse(self, text: str) -> NormalizedAction:
        if (bad := bad_text(text)) is not None:
            return bad
        reasoning, content = split_reasoning(text)
        fences = [(m.start(), m.end()) for m in _FENCE.finditer(content)]
        found = sorted(_fenced(content) + _bare(content, fences), key=lambda f: f.start)
        calls: list[CallResult] = []
        for f in found:
            if f.text:
                calls.append(call_from_json_text(len(calls), f.text, text, closed=f.closed))
                continue
            for item in f.value if isinstance(f.value, list) else [f.value]:
                calls.append(call_from_value(len(calls), item, text, _raw(item)))
        kept, last = [], 0
        for f in found:
            kept.append(content[last : f.start])
            last = f.end
        kept.append(content[last:])
        return finish("".join(kept), reasoning, calls)

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> str:
        descriptions = "Each tool is a function described by its JSON schema:\n" + schema_lines(
            tool_functions(tools)
        )
        return tools_prompt(descriptions, _FORMAT)

    def format_calls(self, tool_calls: Sequence[ToolCall]) -> str:
        if not tool_calls:
            return ""
        objects = [_as_object(c) for c in tool_calls]
        body = objects[0] if len(objects) == 1 else "[" + ", ".join(objects) + "]"
        return f"```json\n{body}\n```"


def _as_object(call: ToolCall) -> str:
    if call.parsed:
        return safe_json({"name": call.name, "arguments": call.arguments}, _MARKERS)
    return f'{{"name": {dump_json(call.name)}, "arguments": {call.arguments}}}'


def _raw(value: Any) -> str:
    try:
        return dump_json(value)
    except (TypeError, ValueError, RecursionError):
        return repr(value)
