"""Pieces every text parser shares: reasoning split, JSON escaping, the tools prompt."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from envgym.actions import ActionProblem, NormalizedAction, build_action, call_label, normalize_call
from envgym.messages import ProblemKind, ToolCall, dump_json, fallback_call_id, json_error

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

CallResult = tuple[ToolCall, ActionProblem | None]


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``(reasoning, rest)`` from ``<think>…</think>`` (seed Tables 6 and 8).

    A missing ``<think>`` before ``</think>`` is normal: chat templates often put the opening
    tag in the prompt.  An unclosed ``<think>`` means everything after it is reasoning: the turn
    stopped mid-thought, e.g. to wait for a tool called inside the reasoning (Table 8).
    Empty reasoning (``<think></think>`` in non-thinking mode) counts as none.
    """
    if THINK_CLOSE in text:
        head, rest = text.split(THINK_CLOSE, 1)
        before, _, reasoning = head.rpartition(THINK_OPEN) if THINK_OPEN in head else ("", "", head)
        return (reasoning.strip() or None), _join(before, rest)
    if THINK_OPEN in text:
        before, reasoning = text.split(THINK_OPEN, 1)
        return (reasoning.strip() or None), before
    return None, text


def _join(*parts: str) -> str:
    return "\n".join(p.strip() for p in parts if p.strip())


def clean_content(text: str) -> str | None:
    return text.strip() or None


def safe_json(value: Any, markers: Iterable[str]) -> str:
    """JSON for embedding in markup: ``<`` is escaped when the text would contain a marker.

    ``<`` can only occur inside JSON strings, so ``\\u003c`` decodes back to the same value, and
    arguments such as ``"</tool_call>"`` cannot end the block early.
    """
    text = dump_json(value)
    if any(marker in text for marker in markers):
        text = text.replace("<", "\\u003c")
    return text


def arguments_text(call: ToolCall, markers: Iterable[str]) -> str:
    # Unreadable arguments are rendered verbatim: the transcript shows what the model wrote.
    return call.arguments if isinstance(call.arguments, str) else safe_json(call.arguments, markers)


_NAME_GUESS = re.compile(r'"name"\s*:\s*"([^"\\]{1,128})"')


def call_from_json_text(index: int, text: str, seed: str, *, closed: bool = True) -> CallResult:
    """One call written as a JSON object ``{"name": ..., "arguments": {...}}``.

    ``closed=False`` marks a block whose end marker is missing (the output was cut off).
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as err:
        guess = _NAME_GUESS.search(text)
        name = guess.group(1) if guess else ""
        if isinstance(err, json.JSONDecodeError):
            detail = json_error(err)
        else:
            detail = f"cannot be decoded ({type(err).__name__})"
        label = call_label(index, name)
        call_id = fallback_call_id(seed, index)
        kind: ProblemKind
        if closed:
            kind, message = "bad_json", f"{label} is not valid JSON: {detail}"
        else:
            kind, message = "truncated", f"{label} was cut off before its end marker: {detail}"
        return ToolCall(call_id, name, text), ActionProblem(
            kind, message, index, call_id, name or None
        )
    return call_from_value(index, value, seed, text)


def call_from_value(index: int, value: Any, seed: str, text: str) -> CallResult:
    """One call from decoded JSON; ``text`` is what to keep in the transcript if it is junk."""
    if not isinstance(value, Mapping):
        call_id = fallback_call_id(seed, index)
        shape = '{"name": ..., "arguments": {...}}'
        message = f"{call_label(index, None)} must be a JSON object {shape}"
        return ToolCall(call_id, "", text), ActionProblem("not_an_object", message, index, call_id)
    # None of the text formats carries ids; ids come from the turn's text and the call's index.
    value = {k: v for k, v in value.items() if k != "id"}
    return normalize_call(index, value, seed)


def finish(
    content: str | None,
    reasoning: str | None,
    calls: Sequence[CallResult],
    problems: Sequence[ActionProblem] = (),
) -> NormalizedAction:
    return build_action(clean_content(content or ""), reasoning, calls, problems)


def bad_text(text: Any) -> NormalizedAction | None:
    """The action for a non-string input, or None when ``text`` is a string."""
    if isinstance(text, str):
        return None
    problem = ActionProblem(
        "bad_message", f"expected the model's output as text, not {type(text).__name__}"
    )
    return build_action(None, None, (), (problem,))


# -- the tools section of a system prompt ------------------------------------------------------


def tool_functions(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The function objects of OpenAI tool schemas (bare function objects are accepted too)."""
    functions = []
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(
                f"tool {i} is not an OpenAI function schema with a name: {tool!r:.200}"
            )
        functions.append(dict(fn))
    return functions


def tools_prompt(descriptions: str, call_format: str) -> str:
    """The tools section in the shape of the seed's agent system prompts (Appendix B, Tables 7
    and 8): ``{TOOL-DESCRIPTIONS}`` then ``{TOOLCALL-FORMAT}``."""
    return (
        "## Tools\n"
        "You have access to the following tools:\n\n"
        f"{descriptions}\n\n"
        "Important: ALWAYS adhere to this exact format for tool use:\n"
        f"{call_format}"
    )


def schema_lines(functions: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(dump_json({"type": "function", "function": fn}) for fn in functions)
