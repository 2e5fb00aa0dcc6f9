"""Tool-call parsers for models that write their calls as text.

A parser reads one raw assistant turn (``parse``), describes the tools and the call format for a
system prompt (``render_tools``, seed Appendix B Tables 7-8), and writes calls back as text
(``format_calls``) so ``parse(format_calls(calls))`` gives the same calls back.

``parse`` never raises: unreadable calls come back as problems (see
:class:`envgym.actions.ActionProblem`) and stay in the message with their raw text, so the env
can answer each one by id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

from envgym.actions import NormalizedAction
from envgym.messages import ToolCall

from ._common import THINK_CLOSE, THINK_OPEN
from .deepseek import DeepSeekParser
from .hermes import HermesParser
from .json_calls import JsonParser

__all__ = [
    "DeepSeekParser",
    "HermesParser",
    "JsonParser",
    "ParsedAction",
    "ToolCallParser",
    "available_parsers",
    "format_message",
    "get_parser",
    "register_parser",
]

#: What ``parse`` returns: the same type as :func:`envgym.actions.normalize_action`
#: (``message``, runnable ``tool_calls``, ``problems``, and ``content``/``reasoning_content``).
ParsedAction: TypeAlias = NormalizedAction


@runtime_checkable
class ToolCallParser(Protocol):
    @property
    def name(self) -> str: ...

    def parse(self, text: str) -> ParsedAction: ...

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> str: ...

    def format_calls(self, tool_calls: Sequence[ToolCall]) -> str: ...


_REGISTRY: dict[str, ToolCallParser] = {
    "hermes": HermesParser(),
    "deepseek-v3": DeepSeekParser(name="deepseek-v3", variant="v3"),
    "deepseek-v3.1": DeepSeekParser(name="deepseek-v3.1", variant="v3.1"),
    "json": JsonParser(),
}


def available_parsers() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def get_parser(name: str) -> ToolCallParser:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        known = ", ".join(available_parsers())
        raise ValueError(f"unknown tool-call parser {name!r}; known parsers: {known}") from None


def register_parser(name: str, parser: ToolCallParser, *, replace: bool = False) -> None:
    """Add a parser under ``name``; re-registering a name needs ``replace=True``."""
    if not isinstance(parser, ToolCallParser):
        raise TypeError(f"{parser!r} lacks parse/render_tools/format_calls or a name")
    if name in _REGISTRY and not replace:
        raise ValueError(f"a tool-call parser named {name!r} is already registered")
    _REGISTRY[name] = parser


def format_message(parser: ToolCallParser, message: Mapping[str, Any]) -> str:
    """An assistant message written back as the raw text the model would have produced:
    ``<think>reasoning</think>``, then the content, then the calls in ``parser``'s format."""
    parts = []
    reasoning = message.get("reasoning_content")
    if reasoning:
        parts.append(f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}")
    if message.get("content"):
        parts.append(str(message["content"]))
    calls = [ToolCall.from_openai(c) for c in message.get("tool_calls") or ()]
    if calls:
        parts.append(parser.format_calls(calls))
    return "\n\n".join(parts)
