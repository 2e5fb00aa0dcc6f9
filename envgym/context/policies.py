"""Reasoning policies: which ``reasoning_content`` of earlier assistant turns the model sees again.

Each policy is a pure function ``history -> Rendered``; the history is never modified.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, NamedTuple, TypeAlias

from envgym.core import Message
from envgym.messages import is_env_message

DropKind: TypeAlias = Literal["reasoning", "message", "summary"]


@dataclass(frozen=True)
class Dropped:
    """One thing left out of the rendered context.

    ``index`` is the message's position in the history that was given; ``what`` says how it
    went: its ``reasoning`` was stripped, the whole ``message`` was discarded, or the message was
    folded into a ``summary``.
    """

    index: int
    what: DropKind
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Rendered(NamedTuple):
    """The messages to show the model, and what was left out to get them.

    ``origins[i]`` is the history index ``messages[i]`` came from (None for a message the
    context manager wrote, such as a summary).  Built without ``mapped_origins`` it is one
    message per history index, in order (what a reasoning policy renders), spelled out only
    when read.  A named tuple: every step renders, and a frozen dataclass plus a tuple of the
    whole history's length were most of a cheap render's cost.
    """

    messages: list[Message]
    dropped: tuple[Dropped, ...] = ()
    mapped_origins: tuple[int | None, ...] | None = None

    @property
    def origins(self) -> tuple[int | None, ...]:
        if self.mapped_origins is None:
            return tuple(range(len(self.messages)))
        return self.mapped_origins


ReasoningPolicy: TypeAlias = Callable[[Sequence[Mapping[str, Any]]], Rendered]

RETENTION_REASON = (
    "a newer user message started a new turn; reasoning is kept only across tool calls "
    "(thinking retention, DeepSeek-V3.2 §3.2.1)"
)
R1_REASON = "a newer message arrived; reasoning is kept only on the latest turn (DeepSeek-R1)"


def _strip_reasoning(
    history: Sequence[Mapping[str, Any]], drop_before: int, reason: str
) -> Rendered:
    """``history`` with reasoning removed from assistant messages before ``drop_before``.

    Messages that lose nothing are passed through as the same dict objects (rendering runs on
    every step, so copying the whole history each time would dominate a cheap tool call):
    treat rendered messages as read-only.
    """
    messages: list[Message] = list(history)  # type: ignore[arg-type]  # as given: not copied
    dropped: list[Dropped] = []
    for i in range(min(max(drop_before, 0), len(history))):
        original = messages[i]
        if "reasoning_content" in original and original.get("role") == "assistant":
            message = dict(original)
            # Only non-empty reasoning is worth a record; an empty key is just tidied away.
            if message.pop("reasoning_content", None):
                dropped.append(Dropped(i, "reasoning", reason))
            messages[i] = message  # a copy, the key taken out
    return Rendered(messages, tuple(dropped) if dropped else ())


def keep_all(history: Sequence[Mapping[str, Any]]) -> Rendered:
    """Everything, reasoning included."""
    return _strip_reasoning(history, 0, "")


def thinking_retention(
    history: Sequence[Mapping[str, Any]],
    *,
    env_messages_end_turn: bool = False,
    last_user: int | None = None,
) -> Rendered:
    """DeepSeek-V3.2 §3.2.1: earlier reasoning is dropped only once a new *user* message follows
    it; while only tool results are appended, the current chain keeps its reasoning so the model
    does not re-derive it on every call.  Tool calls and results are always kept.

    The env's own user-role nudges (``name == ENV_AUTHOR``: "no tool call was found…") are not
    a new user turn: §3.2.1 warns that simulating tool interactions through user messages loses
    the retention benefit.  ``env_messages_end_turn=True`` counts them anyway.  ``last_user``
    (from :func:`last_user_turn`) skips the search when the caller already knows it.
    """
    if last_user is None:
        last_user = last_user_turn(history, env_messages_end_turn=env_messages_end_turn)
    return _strip_reasoning(history, last_user, RETENTION_REASON)


def last_user_turn(
    history: Sequence[Mapping[str, Any]], *, env_messages_end_turn: bool = False, start: int = 0
) -> int:
    """Index of the latest user message that starts a turn, searching ``history[start:]``
    backwards; -1 when there is none there."""
    for i in range(len(history) - 1, start - 1, -1):  # backwards: the latest is near the end
        message = history[i]
        if message.get("role") == "user" and (env_messages_end_turn or not is_env_message(message)):
            return i
    return -1


def discard_reasoning(history: Sequence[Mapping[str, Any]]) -> Rendered:
    """DeepSeek-R1: an assistant turn's reasoning is dropped as soon as *any* message (tool
    result or user) follows it.  Only a trailing assistant message keeps its reasoning, so in a
    prompt for the next turn, which ends with a tool or user message, no reasoning remains."""
    return _strip_reasoning(history, len(history) - 1, R1_REASON)


POLICIES: Mapping[str, ReasoningPolicy] = {
    "thinking-retention": thinking_retention,
    "discard-reasoning": discard_reasoning,
    "keep-all": keep_all,
}
