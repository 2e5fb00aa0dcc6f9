"""Token-in/token-out bookkeeping for one episode (envgym.policy).

A :class:`TokenSession` remembers the ids the model has seen and sampled so far, and the
messages that produced its last prompt.  :func:`next_prompt` decides how the next prompt is
built:

* **extension** — the new messages are the last prompt's messages, then one assistant message
  (the turn this session sampled), then only ``tool``/``user`` messages; the tools are the same;
  the context policy did not strip reasoning from that assistant turn; and the chat template
  renders the conversation as an extension of its prefix.  Then the prompt is the old ids + the
  sampled ids + the template's end-of-turn text (minus the end-of-turn token the model already
  sampled) + the newly rendered messages.  The sampled turn is never re-rendered: the assistant
  message's content is taken to be what the model sampled (token-in/token-out).
* otherwise (first turn, a context policy dropped something, an overflow summary, a different
  tool list) — a **new sequence**: the whole conversation rendered and tokenized afresh.  An
  engine with a prefix cache still reuses the longest common prefix with what it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envgym.models.chat import ChatFormat
from envgym.policy import PolicyError, Turn

CONTINUE_ROLES = ("tool", "user")


@dataclass
class TokenSession:
    ids: list[int] = field(default_factory=list)  # prompt + sampled ids of the last turn
    messages: list[dict[str, Any]] | None = None  # the last prompt's messages (None: unknown)
    tools: list[dict[str, Any]] | None = None
    sampled_reasoning: bool = False  # the last sampled turn held reasoning

    def record_turn(
        self,
        prompt_ids: Sequence[int],
        sampled_ids: Sequence[int],
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        sampled_reasoning: bool,
    ) -> None:
        self.ids = [*prompt_ids, *sampled_ids]
        self.messages = [dict(m) for m in messages]
        self.tools = [dict(t) for t in tools]
        self.sampled_reasoning = sampled_reasoning

    def forget_messages(self) -> None:
        """After an interrupted turn: keep the ids (a prefix cache may reuse them), but the
        next prompt must be rendered afresh."""
        self.messages = None


@dataclass(frozen=True)
class NextPrompt:
    ids: list[int]
    extends: bool  # ids start with the session's previous prompt + sampled ids


def forced_turn(
    fmt: ChatFormat,
    session: TokenSession,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    end_tokens: frozenset[int],
    text: str,
    *,
    end_id: int | None,
    finish_reason: str,
    where: str,
) -> Turn:
    """A teacher-forced turn: ``text`` as if the model had sampled it (+ ``end_id`` when the
    engine would sample one), the prompt built by :func:`next_prompt`, the session advanced.
    For cold-start data (gold replays, scripted roles): what the model is trained to write is
    exactly what the engine would have given it and parsed from it."""
    ids = fmt.encode(text)
    if fmt.tokenizer.decode(ids) != text:
        raise PolicyError(
            f"{where}: the tokenizer does not decode its own encoding of {text!r:.80}"
        )
    written = ids if end_id is None else [*ids, end_id]
    prompt = next_prompt(fmt, session, messages, tools, end_tokens).ids
    session.record_turn(prompt, written, messages, tools, False)
    return Turn(text=text, prompt_ids=prompt, token_ids=written, logprobs=[0.0] * len(written),
                finish_reason=finish_reason)  # fmt: skip


def next_prompt(
    fmt: ChatFormat,
    session: TokenSession,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    end_tokens: frozenset[int],
) -> NextPrompt:
    tail = _extension_text(fmt, session, messages, tools, end_tokens)
    if tail is None:
        return NextPrompt(fmt.prompt_ids(messages, tools), extends=False)
    return NextPrompt([*session.ids, *fmt.encode(tail)], extends=True)


def _extension_text(
    fmt: ChatFormat,
    session: TokenSession,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    end_tokens: frozenset[int],
) -> str | None:
    before = session.messages
    if before is None or not session.ids or [dict(t) for t in tools] != session.tools:
        return None
    n = len(before)
    if len(messages) < n + 2 or [dict(m) for m in messages[:n]] != before:
        return None
    assistant = messages[n]
    if assistant.get("role") != "assistant":
        return None
    if any(m.get("role") not in CONTINUE_ROLES for m in messages[n + 1 :]):
        return None
    if session.sampled_reasoning and not assistant.get("reasoning_content"):
        return None  # a context policy stripped this turn's reasoning: the model must not see it
    suffix = fmt.continuation(messages, tools, n)
    if suffix is None:
        return None
    closing = fmt.closing
    last = session.ids[-1]
    if last in end_tokens:
        sampled_end = fmt.tokenizer.decode([last])
        if closing.startswith(sampled_end):
            closing = closing[len(sampled_end) :]
    return closing + suffix


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    import numpy as np

    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n
