"""Overflow strategies (DeepSeek-V3.2 §4.4): what to do once the prompt passes 80% of the window.

All three act on the *tool-call history*: the units are tool-call groups, an assistant message
that carries ``tool_calls`` together with the ``tool`` messages that follow it.  A group is
always removed whole, so no call loses its result and no result its call.  System and user
messages and assistant messages without tool calls are never removed, except the messages an
earlier compaction wrote (``name == CONTEXT_AUTHOR``): Summary and Discard-all replace those, so
repeated overflows never stack summaries or notices.  Each strategy is a pure function
``history -> Rendered``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from envgym.messages import CONTEXT_AUTHOR, env_message, is_env_message

from .policies import DropKind, Dropped, Message, Rendered

#: Turns an overflowed history into a summary text (usually an LLM call); it sees the whole
#: history, task included, because a useful summary depends on what the task asks.
Summarizer: TypeAlias = Callable[[list[Message]], str]

SUMMARY_PREFIX = (
    "[Context summary] Earlier tool calls and their results were removed to free up context. "
    "Summary of what they established:\n\n"
)
DISCARD_NOTICE = (
    "[Context reset] All earlier tool calls and their results were removed to free up context "
    "(the task above still stands). Call the tools again for anything you still need."
)


def _earlier_compactions(history: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """The messages earlier compactions wrote, as one-message groups."""
    return [[i] for i, m in enumerate(history) if is_env_message(m, CONTEXT_AUTHOR)]


def tool_call_groups(history: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Indices of each tool-call group, oldest first.

    A group is an assistant message with ``tool_calls`` and the run of ``tool`` messages right
    after it.  Tool messages with no such assistant before them belong to no group and stay.
    """
    groups: list[list[int]] = []
    current: list[int] | None = None
    for i, message in enumerate(history):
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            current = [i]
            groups.append(current)
        elif role == "tool" and current is not None:
            current.append(i)
        else:
            current = None
    return groups


def _without(
    history: Sequence[Mapping[str, Any]],
    groups: Sequence[Sequence[int]],
    what: DropKind,
    reason: str,
    insert: Mapping[str, Any] | None = None,  # e.g. a messages.UserMessage (copied)
) -> Rendered:
    """``history`` minus ``groups``; ``insert`` goes right after the last removed message."""
    removed = {i for group in groups for i in group}
    insert_at = max(removed) if removed and insert is not None else -1
    messages: list[Message] = []
    origins: list[int | None] = []
    for i, message in enumerate(history):
        if i not in removed:
            messages.append(dict(message))
            origins.append(i)
        if i == insert_at:
            messages.append(dict(insert or {}))
            origins.append(None)
    dropped = tuple(Dropped(i, what, reason) for i in sorted(removed))
    return Rendered(messages, dropped, tuple(origins))


def discard_fraction(history: Sequence[Mapping[str, Any]], fraction: float = 0.75) -> Rendered:
    """Discard-75% (§4.4): drop the oldest ``fraction`` of the tool-call groups.

    ``floor(fraction * groups)`` of them, but at least one when there are any, so that a
    compaction always frees something (with 8 groups: the first 6).
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], not {fraction}")
    groups = tool_call_groups(history)
    if not groups:
        return _without(history, [], "message", "")
    count = max(1, math.floor(fraction * len(groups) + 1e-9))  # 1e-9: 0.7*10 must give 7, not 6
    reason = (
        f"context passed its overflow threshold: the oldest {count} of {len(groups)} tool-call "
        f"groups were discarded (Discard-{round(fraction * 100)}%, DeepSeek-V3.2 §4.4)"
    )
    return _without(history, groups[:count], "message", reason)


def discard_all(history: Sequence[Mapping[str, Any]]) -> Rendered:
    """Discard-all (§4.4): drop every tool-call group, restarting from the task with a fresh
    context, like a "new context" tool.  A notice (``DISCARD_NOTICE``, replacing any earlier
    one) takes the groups' place, so the model knows why its results are gone instead of
    repeating calls it believes it never made."""
    groups = tool_call_groups(history)
    if not groups:
        return _without(history, [], "message", "")
    reason = (
        "context passed its overflow threshold: all tool-call history was discarded "
        "(Discard-all, DeepSeek-V3.2 §4.4)"
    )
    notice = env_message(DISCARD_NOTICE, CONTEXT_AUTHOR)
    return _without(
        history, groups + _earlier_compactions(history), "message", reason, insert=notice
    )


def summarize(history: Sequence[Mapping[str, Any]], summarizer: Summarizer) -> Rendered:
    """Summary (§4.4): replace the whole tool-call history, and any summary an earlier overflow
    wrote, by one ``user`` message holding a summary of it, placed after the last thing it
    replaces, and let the rollout go on from there.  The summarizer sees the whole history,
    earlier summary included, so nothing it established is lost; summaries never stack.

    The summary is a user message because few chat templates accept a system message
    mid-conversation; under thinking retention it also (rightly) closes the old reasoning.
    """
    groups = tool_call_groups(history)
    if not groups:
        return _without(history, [], "summary", "")
    text = summarizer([dict(m) for m in history])
    if not isinstance(text, str):
        raise TypeError(f"the summarizer must return a str, not {type(text).__name__}")
    reason = (
        f"context passed its overflow threshold: {len(groups)} tool-call groups were replaced "
        "by a summary (Summary, DeepSeek-V3.2 §4.4)"
    )
    summary = env_message(SUMMARY_PREFIX + text, CONTEXT_AUTHOR)
    return _without(
        history, groups + _earlier_compactions(history), "summary", reason, insert=summary
    )


OVERFLOW_STRATEGIES: tuple[str, ...] = ("summary", "discard-75", "discard-all")
