"""Chat messages and tool calls in the OpenAI chat-completions shape.

Observations are lists of plain dicts (so they serialize as-is); the TypedDicts below name
their shapes.  Reading an agent's action into them is actions.py's job; the JSON and text
helpers here are shared with it and with the parsers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, NotRequired, TypeAlias, TypedDict

__all__ = [
    "CONTEXT_AUTHOR",
    "ENV_AUTHOR",
    "STRICT_JSON",
    "AssistantMessage",
    "FunctionCallDict",
    "MessageDict",
    "ProblemKind",
    "SystemMessage",
    "ToolCall",
    "ToolCallDict",
    "ToolMessage",
    "UserMessage",
    "assistant_message",
    "decode_arguments",
    "describe_type",
    "dump_json",
    "env_message",
    "fallback_call_id",
    "is_env_message",
    "json_error",
    "safe_text",
    "shorten",
    "system_message",
    "tool_message",
    "user_message",
]

#: ``name`` of the user messages the env writes itself (nudges, notes on a malformed turn).
#: ``name`` is the chat-completions field for a participant's name, so APIs and templates
#: accept it; thinking retention reads it to tell the env's nudges from a real new user turn.
ENV_AUTHOR = "envgym"
#: ``name`` of the messages the context manager writes when it compacts (summary, notice).
CONTEXT_AUTHOR = "envgym-context"


class FunctionCallDict(TypedDict):
    name: str
    arguments: str  # a JSON object, serialized


class ToolCallDict(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCallDict


class SystemMessage(TypedDict):
    role: Literal["system"]
    content: str


class UserMessage(TypedDict):
    role: Literal["user"]
    content: str
    name: NotRequired[str]  # ENV_AUTHOR / CONTEXT_AUTHOR on messages the env wrote


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: NotRequired[str]
    tool_calls: NotRequired[list[ToolCallDict]]


class ToolMessage(TypedDict):
    role: Literal["tool"]
    tool_call_id: str
    name: str
    content: str


MessageDict: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage

ProblemKind: TypeAlias = Literal[
    "bad_message",  # the action itself (or one of its fields) has the wrong shape
    "bad_call",  # a tool_calls entry is not a call object, or not of type "function"
    "missing_name",  # a call without a function name
    "bad_json",  # arguments (or the whole call, for text parsers) are not valid JSON
    "not_an_object",  # valid JSON, but not a JSON object
    "truncated",  # a call's markup was opened but never closed and cannot be read
]


# -- JSON helpers shared with the parsers ------------------------------------------------------


def dump_json(value: Any) -> str:
    """Compact-ish JSON as models write it; raises ValueError/TypeError when not serializable.

    ``allow_nan=False`` because NaN/Infinity are not JSON and strict consumers reject them.
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def json_error(err: json.JSONDecodeError) -> str:
    """``"Expecting ',' delimiter at char 41"``: the stock text says "line 1 column 42 (char
    41)", but a char offset is what an agent can act on for the one-line JSON it writes."""
    joiner = " " if err.msg.endswith(" at") else " at "  # "Unterminated string starting at"
    return f"{err.msg}{joiner}char {err.pos}"


def decode_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None, ProblemKind | None]:
    """Read call arguments given as a JSON string or a mapping.

    Returns ``(arguments, detail, kind)``: on success a clean JSON object and two Nones; on
    failure None, a short readable detail (e.g. ``"Expecting ',' delimiter at char 41"``) and
    the problem kind.  Empty or missing arguments mean ``{}``: models often emit ``""`` for
    tools without parameters.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None, None
    if isinstance(raw, str):
        try:
            value = STRICT_JSON.decode(raw)
        except json.JSONDecodeError as err:
            return None, json_error(err), "bad_json"
        except (RecursionError, ValueError) as err:  # absurd nesting; int-size limits; NaN
            return (
                None,
                f"cannot be decoded ({shorten(str(err)) or type(err).__name__})",
                "bad_json",
            )
        if isinstance(value, dict):
            return value, None, None  # json.loads already gives plain JSON: no round trip
    else:
        value = raw
    if not isinstance(value, Mapping):
        return None, describe_type(value), "not_an_object"
    try:
        # The round trip makes the arguments plain JSON: str keys, lists not tuples, no NaN.
        return json.loads(dump_json(dict(value))), None, None
    except (TypeError, ValueError, RecursionError) as err:
        return None, f"not JSON-serializable ({shorten(str(err))})", "bad_json"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: JSON without NaN/Infinity (not JSON; strict consumers reject them); built once, as json.loads
#: would rebuild it per call.
STRICT_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def describe_type(value: Any) -> str:
    """'a number', 'an array', 'null'... for problem messages."""
    kind = _json_type(value)
    if kind == "null":
        return "null"
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def shorten(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def safe_text(value: Any) -> str:
    """A transcript-safe string for junk that must still appear in the message."""
    if isinstance(value, str):
        return value
    try:
        return dump_json(value)
    except (TypeError, ValueError, RecursionError):
        try:
            return repr(value)
        except Exception:  # noqa: BLE001 - a hostile __repr__ must not break normalization
            return f"<unprintable {type(value).__name__}>"


def fallback_call_id(seed: str, index: int) -> str:
    """A deterministic id for a call that came without one.

    Derived from the turn's text so the same output always gets the same id (reproducible
    trajectories) while different turns rarely collide.
    """
    digest = hashlib.sha256(seed.encode("utf-8", "replace")).hexdigest()[:8]
    return f"call_{digest}_{index}"


# -- tool calls and messages --------------------------------------------------------------------


class ToolCall(NamedTuple):
    """One function call: ``arguments`` is the decoded object, or the raw text when unreadable.

    A named tuple, not a frozen dataclass: every step reads one or more, and building a frozen
    dataclass (one ``object.__setattr__`` per field) was 1.3 µs of an in-process step of ~12.
    Equality and hashing leave ``text`` out, as the agent's spelling of the same call.
    """

    id: str
    name: str
    arguments: dict[str, Any] | str
    # The agent's own JSON text for parsed arguments, kept so the transcript shows exactly
    # what was sampled (token-in/token-out) and so it need not be re-serialized.
    text: str | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolCall):
            return NotImplemented
        return self[:3] == other[:3]

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self[:3])

    def __repr__(self) -> str:
        return f"ToolCall(id={self.id!r}, name={self.name!r}, arguments={self.arguments!r})"

    @property
    def parsed(self) -> bool:
        return isinstance(self.arguments, dict)

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        if self.text is not None:
            return self.text
        return dump_json(self.arguments)

    def to_openai(self) -> ToolCallDict:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_json},
        }

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ToolCall:
        """Read a well-formed OpenAI tool call; unreadable arguments stay a raw string.

        Raises ValueError on a structurally broken dict; use :func:`envgym.actions.normalize_action` for
        agent output, which never raises.
        """
        fn = data.get("function") if isinstance(data, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ValueError(f"not an OpenAI tool call: {shorten(safe_text(data))}")
        call_id = data.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise ValueError("an OpenAI tool call needs a string id")
        args, _, problem = decode_arguments(fn.get("arguments"))
        if problem is not None or args is None:
            return cls(call_id, fn["name"], safe_text(fn.get("arguments")))
        return cls(call_id, fn["name"], args)


def system_message(content: str) -> SystemMessage:
    return {"role": "system", "content": content}


def user_message(content: str) -> UserMessage:
    return {"role": "user", "content": content}


def env_message(content: str, author: str = ENV_AUTHOR) -> UserMessage:
    """A user-role message written by the env (or, with CONTEXT_AUTHOR, its context manager)."""
    return {"role": "user", "content": content, "name": author}


def is_env_message(message: Mapping[str, Any], author: str = ENV_AUTHOR) -> bool:
    return message.get("role") == "user" and message.get("name") == author


def assistant_message(
    content: str | None,
    reasoning_content: str | None = None,
    tool_calls: Sequence[ToolCall] = (),
) -> AssistantMessage:
    """An assistant message; optional keys are left out rather than set to None or [],
    because several chat templates test for presence, not truthiness."""
    message: AssistantMessage = {"role": "assistant", "content": content}
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    if tool_calls:
        message["tool_calls"] = [call.to_openai() for call in tool_calls]
    return message


def tool_message(call_id: str, name: str, content: Any) -> ToolMessage:
    """A tool result; non-string content is serialized as JSON (or its repr)."""
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": safe_text(content)}
