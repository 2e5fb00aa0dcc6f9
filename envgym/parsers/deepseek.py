"""DeepSeek tool calls; the special tokens use the full-width ``｜`` and ``▁``.

DeepSeek-V3::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {...}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

DeepSeek-V3.1 (and V3.2's V3.1-compatible template)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Both parsers read both forms; they differ only in the form ``format_calls`` writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from envgym.actions import ActionProblem, NormalizedAction, normalize_call
from envgym.messages import ToolCall, dump_json, fallback_call_id

from ._common import (
    THINK_CLOSE,
    THINK_OPEN,
    CallResult,
    arguments_text,
    bad_text,
    finish,
    split_reasoning,
    tool_functions,
    tools_prompt,
)

# Spelled with escapes so no editor or linter "fixes" them to ASCII: U+FF5C FULLWIDTH VERTICAL
# LINE and U+2581 LOWER ONE EIGHTH BLOCK are part of the tokens.
BAR, SPACE = "\uff5c", "\u2581"


def _token(*words: str) -> str:
    return f"<{BAR}{SPACE.join(words)}{BAR}>"


CALLS_BEGIN = _token("tool", "calls", "begin")
CALLS_END = _token("tool", "calls", "end")
CALL_BEGIN = _token("tool", "call", "begin")
CALL_END = _token("tool", "call", "end")
SEP = _token("tool", "sep")
EOS = _token("end", "of", "sentence")

_MARKERS = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP, EOS, THINK_OPEN, THINK_CLOSE)
# A call ends at its end token, or, when that is missing, where the next call or the section
# ends, or at the end of the output (cut off).
_BLOCK = re.compile(
    re.escape(CALL_BEGIN)
    + r"(.*?)("
    + re.escape(CALL_END)
    + r"|(?="
    + re.escape(CALL_BEGIN)
    + r")|(?="
    + re.escape(CALLS_END)
    + r")|\Z)",
    re.DOTALL,
)
_FENCE_OPEN = re.compile(r"\A```[^\n]*\n?")
_FENCE_CLOSE = re.compile(r"\n?```\Z")

Variant = Literal["v3", "v3.1"]


def _strip_fence(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = _FENCE_CLOSE.sub("", _FENCE_OPEN.sub("", text))
    return text.strip()


def _read_call(index: int, body: str, seed: str, closed: bool) -> CallResult:
    if SEP not in body:
        call_id = fallback_call_id(seed, index)
        missing = ActionProblem(
            "truncated" if not closed else "bad_call",
            f"tool call {index + 1} has no {SEP} between the function name and its arguments",
            index,
            call_id,
        )
        return ToolCall(call_id, "", body), missing
    left, right = body.split(SEP, 1)
    first_line, _, rest = right.partition("\n")
    if left.strip() == "function" and first_line.strip() and first_line.lstrip()[:1] not in "{[`":
        name, raw_args = first_line.strip(), rest  # V3: the call type, then NAME and a fenced body
    else:
        name, raw_args = left.strip(), right  # V3.1: NAME, then the JSON
    call, problem = normalize_call(index, {"name": name, "arguments": _strip_fence(raw_args)}, seed)
    if problem is not None and not closed and problem.kind == "bad_json":
        message = f"{problem.message} (the call was cut off before {CALL_END})"
        problem = replace(problem, kind="truncated", message=message)
    return call, problem


@dataclass(frozen=True)
class DeepSeekParser:
    """``variant`` picks the form written by :meth:`format_calls` and described to the model."""

    name: str = "deepseek-v3"
    variant: Variant = "v3"

    def parse(self, text: str) -> NormalizedAction:
        if (bad := bad_text(text)) is not None:
            return bad
        text = text.replace(EOS, "")
        calls: list[CallResult] = []
        for match in _BLOCK.finditer(text):
            closed = bool(match.group(2))
            calls.append(_read_call(len(calls), match.group(1), text, closed=closed))
        rest = _BLOCK.sub("", text).replace(CALLS_BEGIN, "").replace(CALLS_END, "")
        reasoning, content = split_reasoning(rest)
        return finish(content, reasoning, calls)

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> str:
        sections = []
        for fn in tool_functions(tools):
            params = dump_json(fn.get("parameters", {"type": "object", "properties": {}}))
            sections.append(
                f"### {fn['name']}\nDescription: {fn.get('description', '')}\n\nParameters: {params}"
            )
        return tools_prompt("\n\n".join(sections), self._format_help())

    def format_calls(self, tool_calls: Sequence[ToolCall]) -> str:
        if not tool_calls:
            return ""
        args = [arguments_text(c, _MARKERS) for c in tool_calls]
        if self.variant == "v3":
            blocks = "\n".join(
                f"{CALL_BEGIN}function{SEP}{c.name}\n```json\n{a}\n```{CALL_END}"
                for c, a in zip(tool_calls, args, strict=True)
            )
        else:
            blocks = "".join(
                f"{CALL_BEGIN}{c.name}{SEP}{a}{CALL_END}"
                for c, a in zip(tool_calls, args, strict=True)
            )
        return f"{CALLS_BEGIN}{blocks}{CALLS_END}"

    def _format_help(self) -> str:
        if self.variant == "v3":
            one = f"{CALL_BEGIN}function{SEP}FUNCTION_NAME\n```json\nARGUMENTS\n```{CALL_END}"
            join = "on its own line"
        else:
            one = f"{CALL_BEGIN}FUNCTION_NAME{SEP}ARGUMENTS{CALL_END}"
            join = "right after the previous one"
        return (
            f"{CALLS_BEGIN}{one}{CALLS_END}\n\n"
            f"For several calls, write each {CALL_BEGIN}…{CALL_END} {join}, all inside one "
            f"{CALLS_BEGIN}…{CALLS_END}. FUNCTION_NAME must be exactly one of the tool names "
            "above and ARGUMENTS a JSON object that matches its parameters."
        )
