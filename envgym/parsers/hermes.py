"""Hermes / Qwen tool calls: one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
block per call, any number per message."""

from __future__ import annotations

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
    finish,
    safe_json,
    schema_lines,
    split_reasoning,
    tool_functions,
    tools_prompt,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_MARKERS = (OPEN, CLOSE, THINK_OPEN, THINK_CLOSE)
# Non-greedy up to the first close tag, or to the end when the output was cut off.
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)

_FORMAT = (
    f"{OPEN}\n"
    '{"name": "<function name>", "arguments": {<arguments as a JSON object>}}\n'
    f"{CLOSE}\n\n"
    f"Write one {OPEN}…{CLOSE} block per call; a message may hold several. The arguments "
    "must be a JSON object that matches the function's parameters schema."
)


@dataclass(frozen=True)
class HermesParser:
    name: str = "hermes"

    def parse(self, text: str) -> NormalizedAction:
        if (bad := bad_text(text)) is not None:
            return bad
        calls: list[CallResult] = []
        for match in _BLOCK.finditer(text):
            closed = bool(match.group(2))
            calls.append(
                call_from_json_text(len(calls), match.group(1).strip(), text, closed=closed)
            )
        # Calls may sit inside the reasoning (seed Table 8), so cut them out before splitting it.
        reasoning, content = split_reasoning(_BLOCK.sub("", text))
        return finish(content, reasoning, calls)

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> str:
        descriptions = (
            "Each tool is a function described by its JSON schema:\n"
            f"<tools>\n{schema_lines(tool_functions(tools))}\n</tools>"
        )
        return tools_prompt(descriptions, _FORMAT)

    def format_calls(self, tool_calls: Sequence[ToolCall]) -> str:
        blocks = []
        for call in tool_calls:
            if call.parsed:
                body = safe_json({"name": call.name, "arguments": call.arguments}, _MARKERS)
            else:  # unreadable arguments are shown verbatim: the transcript keeps what was written
                body = f'{{"name": {dump_json(call.name)}, "arguments": {call.arguments}}}'
            blocks.append(f"{OPEN}\n{body}\n{CLOSE}")
        return "\n".join(blocks)
