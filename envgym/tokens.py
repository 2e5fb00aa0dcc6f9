"""Token accounting for rendered prompts: how much of the context window a history uses.

:class:`HFTokenCounter` counts what the model's own chat template produces.
:class:`ApproxTokenCounter` is the fallback when no tokenizer is set: about 4 characters per
token, the usual rule of thumb for English text and JSON under BPE vocabularies. It is for
budgets (when to compact, when to truncate), not for training data.

Both count *incrementally*: a prompt is a sum of per-message costs, each
computed once per distinct message and reused, and the sum over the prefix a call shares (by
object identity) with the previous call is reused too.  An env step therefore costs the new
messages, not the whole transcript again; before, step 200 of an episode re-tokenized ~400
messages two or three times.  Counters are thread-safe; treat counted messages as read-only
(a message mutated in place after being counted keeps its old cost).
"""

from __future__ import annotations

import json
import math
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol, runtime_checkable

__all__ = ["ApproxTokenCounter", "HFTokenCounter", "TokenCounter", "render_plain"]

Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]]


@runtime_checkable
class TokenCounter(Protocol):
    def count(self, messages: Messages, tools: Tools = ()) -> int:
        """Tokens of the prompt made of ``messages`` (and the ``tools`` schemas)."""
        ...


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _calls_text(message: Mapping[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    lines = []
    for call in calls:
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        args = fn.get("arguments")
        # Arguments are already JSON text; embedding them raw is what a text-format model writes.
        args_text = args if isinstance(args, str) and args.strip() else _json(args or {})
        lines.append(f'{{"name": {_json(fn.get("name"))}, "arguments": {args_text}}}')
    return "\n".join(lines)


def tools_text(tools: Tools) -> str:
    return "\n".join(_json(tool) for tool in tools)


def _plain_tools(tools: Tools) -> str:
    return "<|system|>\n" + tools_text(tools)


def _plain_message(message: Mapping[str, Any]) -> str:
    body = []
    if message.get("reasoning_content"):
        body.append(f"<think>\n{message['reasoning_content']}\n</think>")
    if message.get("content"):
        body.append(str(message["content"]))
    if message.get("tool_calls"):
        body.append(_calls_text(message))
    return f"<|{message.get('role', '')}|>\n" + "\n".join(body)


def render_plain(messages: Messages, tools: Tools = ()) -> str:
    """A template-free rendering that keeps everything a template would show: role markers,
    reasoning, content, tool calls as JSON and the tool schemas."""
    parts = [_plain_tools(tools)] if tools else []
    parts.extend(_plain_message(m) for m in messages)
    return "\n".join(parts)


def _message_key(message: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What a message's cost depends on, hashable; None when it cannot be (odd content)."""
    try:
        calls = message.get("tool_calls")
        calls_key = (
            tuple((c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls)
            if calls
            else calls
        )
        key = (
            tuple(message),
            message.get("role"),
            message.get("content"),
            message.get("reasoning_content"),
            message.get("name"),
            message.get("tool_call_id"),
            calls_key,
        )
        hash(key)  # strings cache their hash, so this is cheap for the big fields
        return key
    except Exception:  # noqa: BLE001 - any odd shape just goes uncached
        return None


class _Tally:
    """Σ cost(message): the previous call's prefix sums are reused while the messages are the
    same objects, and each distinct message's cost is remembered (bounded)."""

    def __init__(
        self, cost: Callable[[Mapping[str, Any], bool], int], limit: int = 1 << 16
    ) -> None:
        self._cost = cost  # (message, is_first) -> cost
        self._limit = limit
        self._known: dict[tuple[Any, ...], int] = {}
        self._prev: list[Mapping[str, Any]] = []
        self._sums: list[int] = [0]
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # Counters travel with env factories to worker processes (Ray): send the cost
        # function, not the lock or the cache.
        return {"cost": self._cost, "limit": self._limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # unpickling rebuilds the lock and cache; mypy refuses any call of __init__ on self
        self.__init__(state["cost"], state["limit"])  # type: ignore[misc]

    def total(self, messages: Messages) -> int:
        with self._lock:
            prev = self._prev
            if all(map(operator.is_, messages, prev)):  # C loop; stops at the shorter list
                shared = min(len(messages), len(prev))
            else:
                shared = next(i for i, (a, b) in enumerate(zip(messages, prev)) if a is not b)
            sums = self._sums[: shared + 1]
            for i, message in enumerate(islice(messages, shared, None), start=shared):
                sums.append(sums[-1] + self._piece(message, i == 0))
            self._prev, self._sums = list(messages), sums
            return sums[-1]

    def _piece(self, message: Mapping[str, Any], first: bool) -> int:
        key = _message_key(message)
        if key is None:
            return self._cost(message, first)
        key = (first, *key)
        cost = self._known.get(key)
        if cost is None:
            cost = self._cost(message, first)
            if len(self._known) >= self._limit:
                self._known.clear()
            self._known[key] = cost
        return cost


class _ToolsCost:
    """The cost of the tool schemas, remembered for the list object the env passes each time."""

    def __init__(self, cost: Callable[[Tools], int]) -> None:
        self._cost = cost
        self._last: tuple[Tools, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"cost": self._cost}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["cost"])  # type: ignore[misc]  # as above: rebuild on unpickle

    def __call__(self, tools: Tools) -> int:
        last = self._last
        if last is not None and last[0] is tools:
            return last[1]
        cost = self._cost(tools)
        self._last = (tools, cost)
        return cost


def _plain_message_chars(message: Mapping[str, Any], _first: bool) -> int:
    return len(_plain_message(message)) + 1  # + the "\n" joining it to the next part


def _plain_tools_chars(tools: Tools) -> int:
    return len(_plain_tools(tools)) + 1


@dataclass(frozen=True)
class ApproxTokenCounter:
    """``ceil(len(render_plain(...)) / chars_per_token)``; role markers stand in for the
    per-message overhead of real templates.  Counted incrementally, with the same result."""

    chars_per_token: float = 4.0
    _tally: _Tally = field(init=False, repr=False, compare=False)
    _tools: _ToolsCost = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.chars_per_token <= 0:
            raise ValueError("chars_per_token must be positive")
        # Each part costs its length plus the "\n" joining it to the next (one too many, below).
        object.__setattr__(self, "_tally", _Tally(_plain_message_chars))
        object.__setattr__(self, "_tools", _ToolsCost(_plain_tools_chars))

    def count(self, messages: Messages, tools: Tools = ()) -> int:
        chars = self._tally.total(messages) + (self._tools(tools) if tools else 0)
        return math.ceil(max(chars - 1, 0) / self.chars_per_token)


# A tiny conversation with unmistakable strings, rendered once per tokenizer to learn which parts
# the chat template shows.  Templates that silently drop tools, tool calls or reasoning would
# otherwise make the count too low, and an undercount lets a prompt overflow the window.
_PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "envgymprobetool",
        "description": "",
        "parameters": {"type": "object", "properties": {}},
    },
}
_PROBE: list[dict[str, Any]] = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "envgymprobereasoning",
        "tool_calls": [
            {
                "id": "c0",
                "type": "function",
                "function": {"name": "envgymprobecall", "arguments": "{}"},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c0", "name": "t", "content": "ok"},
]


@dataclass(frozen=True)
class _Support:
    template: bool  # the template renders a tool-use conversation at all
    tools: bool  # passes ``tools=`` into the prompt
    tool_calls: bool  # shows assistant tool calls
    reasoning: bool  # shows ``reasoning_content``


_ANCHOR: dict[str, Any] = {"role": "system", "content": "envgymanchor"}


def load_tokenizer(spec: Any) -> Any:
    """An HF tokenizer from what envs accept as ``tokenizer=``: a tokenizer object, ``"smollm2"``
    (the embedded model's) or a local path / hub id."""
    if not isinstance(spec, str):
        return spec
    if spec == "smollm2":
        from envgym.embedded import load_tokenizer as embedded_tokenizer

        return embedded_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec)


class HFTokenCounter:
    """Counts tokens with a Hugging Face tokenizer's chat template.

    Whatever the template would leave out of a tool-use conversation (tool schemas, tool calls,
    reasoning) is added back as plain text, and when there is no chat template or it rejects the
    conversation, the whole prompt is counted in :func:`render_plain` form.

    :meth:`count` is incremental: the first message is rendered alone (so a default system
    prompt the template injects is counted), every later one as the text the template adds
    after a fixed system message, the generation prompt and tool schemas once; each part is
    tokenized once and remembered.  It can differ from tokenizing the whole rendered prompt
    (:meth:`count_exact`) where a template's output for a message depends on its neighbours
    (tested: equal for SmolLM2 on a tool-use episode).
    """

    def __init__(self, tokenizer: Any, *, add_generation_prompt: bool = True) -> None:
        self.tokenizer = tokenizer
        self.add_generation_prompt = add_generation_prompt
        self.support = self._probe()
        self._tally = _Tally(self._message_tokens)
        self._tools = _ToolsCost(self._tools_tokens)
        self._anchor_text: str | None = None
        if self.support.template:
            try:
                self._anchor_text = self._render_alone([], gen=False)
            except Exception:  # noqa: BLE001 - then every message is counted as plain text
                self._anchor_text = None
        self._generation = (
            self._tokens(self._after_anchor(gen=True)) if add_generation_prompt else 0
        )

    def count(self, messages: Messages, tools: Tools = ()) -> int:
        if not messages and not tools:
            return 0
        return self._tally.total(messages) + (self._tools(tools) if tools else 0) + self._generation

    def count_exact(self, messages: Messages, tools: Tools = ()) -> int:
        """Tokens of the whole rendered prompt, tokenized at once (cost grows with the
        transcript: for checks and benchmarks, not for every step)."""
        return self._tokens(self.render(messages, tools))

    def _tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0

    def _render_alone(self, messages: list[dict[str, Any]], *, gen: bool, tools: Tools = ()) -> str:
        return self._apply_with([_ANCHOR, *messages], tools, gen)

    def _after_anchor(
        self, *, gen: bool, messages: Sequence[Mapping[str, Any]] = (), tools: Tools = ()
    ) -> str:
        """The text the template adds after the anchor system message, or "" if it does not
        simply append (then the caller falls back to plain text)."""
        if self._anchor_text is None:
            return ""
        try:
            text = self._render_alone([self._prepare(m) for m in messages], gen=gen, tools=tools)
        except Exception:  # noqa: BLE001 - templates raise anything
            return ""
        return text[len(self._anchor_text) :] if text.startswith(self._anchor_text) else ""

    def _message_tokens(self, message: Mapping[str, Any], first: bool) -> int:
        if not self.support.template:
            return self._tokens(render_plain([message]) + "\n")
        if first:
            try:
                return self._tokens(self._apply_with([self._prepare(message)], (), False))
            except Exception:  # noqa: BLE001 - templates raise anything
                return self._tokens(render_plain([message]) + "\n")
        return self._tokens(
            self._after_anchor(gen=False, messages=[message]) or render_plain([message]) + "\n"
        )

    def _tools_tokens(self, tools: Tools) -> int:
        if self.support.tools and self._anchor_text is not None:
            try:
                with_tools = self._apply_with([_ANCHOR], tools, False)
                return max(self._tokens(with_tools) - self._tokens(self._anchor_text), 0)
            except Exception:  # noqa: BLE001, S110 - then as plain text, like the template-less case
                pass
        return self._tokens("\n" + tools_text(tools))

    def _apply_with(self, messages: list[dict[str, Any]], tools: Tools, gen: bool) -> str:
        text = self.tokenizer.apply_chat_template(
            messages, tools=list(tools) or None, tokenize=False, add_generation_prompt=gen
        )
        if not isinstance(text, str):
            raise TypeError("apply_chat_template(tokenize=False) did not return text")
        return text

    def render(self, messages: Messages, tools: Tools = ()) -> str:
        """The prompt text that :meth:`count_exact` counts."""
        if not self.support.template:
            return render_plain(messages, tools)
        prepared = [self._prepare(m) for m in messages]
        try:
            text = self._apply(prepared, tools if self.support.tools else ())
        except Exception:  # noqa: BLE001 - templates raise anything (jinja errors, KeyError...)
            return render_plain(messages, tools)
        if tools and not self.support.tools:
            text += "\n" + tools_text(tools)
        return text

    def _apply(self, messages: list[dict[str, Any]], tools: Tools) -> str:
        text = self.tokenizer.apply_chat_template(
            messages,
            tools=list(tools) or None,
            tokenize=False,
            add_generation_prompt=self.add_generation_prompt,
        )
        if not isinstance(text, str):
            raise TypeError("apply_chat_template(tokenize=False) did not return text")
        return text

    def _prepare(self, message: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(message)
        # Many templates concatenate content as a string and fail on None.
        content = "" if out.get("content") is None else str(out["content"])
        if out.get("tool_calls") and not self.support.tool_calls:
            content = "\n".join(p for p in (content, _calls_text(out)) if p)
        if out.get("reasoning_content") and not self.support.reasoning:
            content = f"<think>\n{out['reasoning_content']}\n</think>\n{content}"
        out["content"] = content
        return out

    def _probe(self) -> _Support:
        if not getattr(self.tokenizer, "chat_template", None):
            return _Support(False, False, False, False)
        for tools in ([_PROBE_TOOL], []):
            try:
                text = self._apply([dict(m) for m in _PROBE], tools)
            except Exception:  # noqa: BLE001, S112 - any failure means "not supported"
                continue
            return _Support(
                template=True,
                tools=bool(tools) and "envgymprobetool" in text,
                tool_calls="envgymprobecall" in text,
                reasoning="envgymprobereasoning" in text,
            )
        return _Support(False, False, False, False)
