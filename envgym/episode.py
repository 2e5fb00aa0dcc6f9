"""One episode's bookkeeping, shared by the chat envs (``BundleEnv``, ``SweEnv``, ``Tau2Env``).

What every env does alike lives here: how the token counters and the context manager are
chosen, how an action is read (parsed, call ids made unique, problems counted), how the calls
of a turn are answered in message order, and the counters ``info`` reports.  What differs (which
tools run, what a submission is, how it is graded) stays in the env.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from envgym.actions import NormalizedAction, read_action
from envgym.context import ContextManager
from envgym.context.view import ContextView
from envgym.core import Action, Message
from envgym.messages import ToolCall, env_message, tool_message
from envgym.parsers import ToolCallParser
from envgym.tokens import ApproxTokenCounter, HFTokenCounter, TokenCounter, load_tokenizer

__all__ = ["Counting", "EpisodeCounters", "answer_calls", "counting"]

S = TypeVar("S")


@dataclass(frozen=True)
class Counting:
    """The token counters of an env and the context manager that uses them."""

    counter: TokenCounter | None  # real tokens (a tokenizer was given): reported in info
    context: ContextManager
    budget: TokenCounter  # what the context-window budget counts with (one counter: it caches)


def counting(context: str | ContextManager, tokenizer: Any, *, window: bool) -> Counting:
    """Choose the counters for ``tokenizer`` (None: approximate) and give the context manager
    one when it must count: a tokenizer is given or a context ``window`` is budgeted."""
    counter = HFTokenCounter(load_tokenizer(tokenizer)) if tokenizer is not None else None
    manager = context if isinstance(context, ContextManager) else ContextManager(policy=context)
    if manager.counter is None and (counter is not None or window):
        manager = manager.with_counter(counter or ApproxTokenCounter())
    return Counting(counter, manager, counter or manager.counter or ApproxTokenCounter())


@dataclass
class EpisodeCounters:
    """The counters of one episode; a new one per ``reset``."""

    turns: int = 0
    tool_calls: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    call_ids: set[str] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)

    def read(self, action: Action, parser: ToolCallParser) -> NormalizedAction:
        """One agent turn read (``actions.read_action``: ``parser`` for raw text, call ids made
        unique within the episode), its problems counted."""
        self.turns += 1
        parsed = read_action(action, parser.parse, self.call_ids, f"t{self.turns}")
        for problem in parsed.problems:
            self.errors[problem.kind] += 1
        return parsed

    def info(self, view: ContextView, components: dict[str, float]) -> dict[str, Any]:
        """The keys every env's ``info`` has (DESIGN.md, Env contract)."""
        return {
            "reward_components": components,
            "tool_calls": self.tool_calls,
            "errors": dict(self.errors),
            "turns": self.turns,
            "context_dropped": view.dropped_now,
            "context_compactions": list(view.compactions),
        }


def answer_calls(
    parsed: NormalizedAction, answer: Callable[[ToolCall, bool], tuple[str, S | None]]
) -> tuple[list[Message], S | None]:
    """The messages that answer a turn's calls, and what its submission gave (None: none).

    ``answer(call, submitted)`` runs one readable call (``submitted``: an earlier call of the
    turn was a valid submission) and returns the reply and, for a valid submission, its result.
    Tool replies come first, in the assistant message's call order: chat templates and
    OpenAI-style APIs reject a user message between tool calls and their results.
    Problems no call can answer follow as env messages.
    """
    messages: list[Message] = []
    result: S | None = None
    if not parsed.problems:  # the common case: every call readable, in message order
        for call in parsed.tool_calls:
            content, got = answer(call, result is not None)
            messages.append(tool_message(call.id, call.name, content))
            if result is None:
                result = got
        return messages, result
    per_call = {p.call_id: p for p in parsed.problems if p.call_id is not None}
    runnable = {call.id: call for call in parsed.tool_calls}
    for entry in parsed.message.get("tool_calls") or ():
        call_id, name = entry["id"], entry["function"]["name"]
        call, problem = runnable.get(call_id), per_call.pop(call_id, None)
        if problem is not None or call is None:
            text = problem.message if problem is not None else "this call could not be read"
            name = (problem.name if problem else None) or name or ""
            messages.append(tool_message(call_id, name, f"Error: {text}"))
            continue
        content, got = answer(call, result is not None)
        messages.append(tool_message(call.id, call.name, content))
        if result is None:
            result = got
    notes = [p for p in parsed.problems if p.call_id is None] + list(per_call.values())
    messages.extend(env_message(f"Error: {problem.message}") for problem in notes)
    return messages, result
