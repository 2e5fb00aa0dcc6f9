"""Reading an agent's action: whatever it sent becomes a clean assistant turn plus problems.

:func:`read_action` is the one way in (``EpisodeCounters.read`` calls it): raw text through the
env's tool-call parser, anything else through :func:`normalize_action`, then call ids made unique
over the episode.  Reading runs top-down through this module in that order and only calls
*down* into messages.py (message shapes, builders, JSON/text primitives), which never calls
back.  It never raises: every mistake comes back as an :class:`ActionProblem` the env turns
into a message the agent can read (DESIGN.md, Env contract).  The raw-text parsers build the
same :class:`NormalizedAction` from these pieces (``normalize_call``, ``build_action``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, NamedTuple

from envgym.messages import (
    STRICT_JSON,
    AssistantMessage,
    ProblemKind,
    ToolCall,
    ToolCallDict,
    assistant_message,
    decode_arguments,
    describe_type,
    fallback_call_id,
    safe_text,
    shorten,
)

__all__ = [
    "ActionProblem",
    "NormalizedAction",
    "build_action",
    "call_label",
    "normalize_action",
    "normalize_call",
    "read_action",
    "unique_call_ids",
]


@dataclass(frozen=True)
class ActionProblem:
    """Something wrong with an action, written for the agent to read.

    ``index`` is the 0-based position of the call in the turn (None for message-level problems);
    ``call_id`` is the id the env should answer with a tool message (None for message-level
    problems, which the env reports in a user message instead). Messages count calls from 1.
    """

    kind: ProblemKind
    message: str
    index: int | None = None
    call_id: str | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class NormalizedAction(NamedTuple):
    """A clean assistant turn (a named tuple: one per step, immutable without a frozen
    dataclass's per-field ``__setattr__``).

    ``message`` is what goes into the transcript: its ``tool_calls`` hold every call the agent
    made, broken ones included, so each per-call problem has an id to answer.
    ``tool_calls`` holds only the calls that can run.  Parsers return the same type
    (``envgym.parsers.ParsedAction``).
    """

    message: AssistantMessage
    tool_calls: tuple[ToolCall, ...] = ()
    problems: tuple[ActionProblem, ...] = ()

    @property
    def content(self) -> str | None:
        return self.message.get("content")

    @property
    def reasoning_content(self) -> str | None:
        return self.message.get("reasoning_content")

    @property
    def ok(self) -> bool:
        return not self.problems


def read_action(
    action: Any, parse: Callable[[str], NormalizedAction], taken: set[str], suffix: str
) -> NormalizedAction:
    """One agent turn read: raw text through ``parse`` (the env's tool-call parser), anything
    else through :func:`normalize_action`; then ids already in ``taken`` renamed with
    ``suffix`` (:func:`unique_call_ids`).  Never raises."""
    parsed = parse(action) if isinstance(action, str) else normalize_action(action)
    return unique_call_ids(parsed, taken, suffix)


def build_action(
    content: str | None,
    reasoning_content: str | None,
    calls: Sequence[tuple[ToolCall, ActionProblem | None]],
    problems: Sequence[ActionProblem] = (),
) -> NormalizedAction:
    """Assemble a :class:`NormalizedAction` from calls paired with their problem (if any)."""
    message = assistant_message(content, reasoning_content, [call for call, _ in calls])
    runnable = tuple(call for call, problem in calls if problem is None)
    call_problems = tuple(problem for _, problem in calls if problem is not None)
    return NormalizedAction(message, runnable, tuple(problems) + call_problems)


def call_label(index: int, name: str | None) -> str:
    return f"tool call {index + 1}" + (f" ({name})" if name else "")


def normalize_action(action: Any) -> NormalizedAction:
    """Turn whatever an agent sent as its assistant turn into a clean message plus problems.

    Lenient where the intent is clear (``arguments`` given as a dict, missing ids or ``type``,
    a call flattened to ``{"name", "arguments"}``, content as a list of text parts); a string
    action is taken as plain content (raw model text goes through a parser instead).
    Never raises.
    """
    try:
        fast = _well_formed(action)  # the common case, without the repairs
        return fast if fast is not None else _repair(action)
    except Exception as err:  # noqa: BLE001 - the contract is "never raises"; this is the net
        problem = ActionProblem(
            "bad_message", f"the action could not be read ({type(err).__name__})"
        )
        return NormalizedAction(assistant_message(None), (), (problem,))


_SCAN_JSON = STRICT_JSON.scan_once


def _well_formed(action: Any) -> NormalizedAction | None:
    """The common case — a plain dict exactly as the OpenAI format has it — read without the
    general path's repairs; None whenever anything is unusual (the general path decides).
    Must give the same result as :func:`_repair` on every input it accepts (tested)."""
    if type(action) is not dict or action.get("role", "assistant") != "assistant":
        return None
    content, reasoning = action.get("content"), action.get("reasoning_content")
    if (content is not None and type(content) is not str) or (
        reasoning is not None and type(reasoning) is not str
    ):
        return None
    raw_calls = action.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    elif type(raw_calls) is not list:
        return None
    calls: list[ToolCall] = []
    entries: list[ToolCallDict] = []  # the transcript's calls: ToolCall.to_openai() of each
    seen: set[str] = set()
    for raw in raw_calls:
        if type(raw) is not dict or raw.get("type", "function") != "function":
            return None
        call_id, fn = raw.get("id"), raw.get("function")
        if type(call_id) is not str or not call_id or call_id in seen or type(fn) is not dict:
            return None
        name, text = fn.get("name"), fn.get("arguments")
        if type(name) is not str or not name or name != name.strip() or type(text) is not str:
            return None
        try:
            # The decoder's scanner itself (what raw_decode calls, minus its frame), not decode:
            # no whitespace scans around the object.  Text with whitespace or anything after
            # the object is left to the general path; StopIteration is "no value at 0".
            arguments, end = _SCAN_JSON(text, 0)
        except (StopIteration, ValueError, RecursionError):
            return None
        if end != len(text) or type(arguments) is not dict:
            return None
        seen.add(call_id)
        calls.append(ToolCall(call_id, name, arguments, text))
        entries.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
        )
    message: AssistantMessage = {"role": "assistant", "content": content}  # as assistant_message
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if entries:
        message["tool_calls"] = entries
    return NormalizedAction(message, tuple(calls))


def _repair(action: Any) -> NormalizedAction:
    """The general path: lenient where the intent is clear, problems for everything else."""
    if isinstance(action, str):
        return NormalizedAction(assistant_message(action))
    if not isinstance(action, Mapping):
        problem = ActionProblem(
            "bad_message",
            "the action must be an assistant message object with 'content' and/or "
            f"'tool_calls', not {describe_type(action)}",
        )
        return NormalizedAction(assistant_message(None), (), (problem,))

    problems: list[ActionProblem] = []
    role = action.get("role", "assistant")
    if role != "assistant":
        problems.append(
            ActionProblem(
                "bad_message",
                f"the action's role must be 'assistant', not {shorten(safe_text(role))}",
            )
        )
    content = _text_field(action.get("content"), "content", problems)
    reasoning = _text_field(action.get("reasoning_content"), "reasoning_content", problems)

    raw_calls = action.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    elif isinstance(raw_calls, (str, bytes)) or not isinstance(raw_calls, Sequence):
        problems.append(
            ActionProblem(
                "bad_message",
                f"'tool_calls' must be a list of calls, not {describe_type(raw_calls)}",
            )
        )
        raw_calls = []

    seed = _Lazy(action)  # the turn's text is only needed for calls without ids
    seen: set[str] = set()
    calls = [normalize_call(i, raw, seed, seen) for i, raw in enumerate(raw_calls)]
    return build_action(content, reasoning, calls, problems)


class _Lazy:
    """``safe_text(value)``, computed on first call (serializing a turn is not free)."""

    __slots__ = ("value", "text")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.text: str | None = None

    def __call__(self) -> str:
        if self.text is None:
            self.text = safe_text(self.value)
        return self.text


def _text_field(value: Any, field: str, problems: list[ActionProblem]) -> str | None:
    if value is None or isinstance(value, str):
        return value
    # OpenAI also allows content as a list of parts; only text parts mean anything here.
    if (
        isinstance(value, Sequence)
        and not isinstance(value, bytes)
        and all(
            isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in value
        )
    ):
        return "".join(p["text"] for p in value)
    problems.append(
        ActionProblem(
            "bad_message", f"'{field}' must be a string or null, not {describe_type(value)}"
        )
    )
    return None


def normalize_call(
    index: int, raw: Any, seed: str | Callable[[], str], seen: set[str] | None = None
) -> tuple[ToolCall, ActionProblem | None]:
    """Read one call (OpenAI-shaped or flattened ``{"name", "arguments"}``) and its problem.

    ``seed`` feeds :func:`fallback_call_id`; ``seen`` collects ids so duplicates get fresh ones.
    """
    seen = set() if seen is None else seen
    call_id = raw.get("id") if isinstance(raw, Mapping) else None
    if isinstance(call_id, int) and not isinstance(call_id, bool):
        call_id = str(call_id)
    if not isinstance(call_id, str) or not call_id or call_id in seen:
        call_id = fallback_call_id(seed if isinstance(seed, str) else seed(), index)
        while call_id in seen:  # an agent may have sent an id that looks like ours
            call_id += "_"
    seen.add(call_id)

    if not isinstance(raw, Mapping):
        problem = ActionProblem(
            "bad_call",
            f"{call_label(index, None)} must be an object like "
            '{"type": "function", "function": {"name": ..., "arguments": "{...}"}}, '
            f"not {describe_type(raw)}",
            index,
            call_id,
        )
        return ToolCall(call_id, "", safe_text(raw)), problem

    fn = raw.get("function")
    if fn is None and ("name" in raw or "arguments" in raw):
        fn = raw  # a flattened call; the intent is unambiguous
    if not isinstance(fn, Mapping):
        problem = ActionProblem(
            "bad_call",
            f"{call_label(index, None)} has no function name and arguments "
            '(expected {"name": ..., "arguments": {...}})',
            index,
            call_id,
        )
        return ToolCall(call_id, "", safe_text(fn) if fn is not None else ""), problem

    name = fn.get("name")
    name = name.strip() if isinstance(name, str) else ""
    raw_args = fn.get("arguments", fn.get("parameters"))
    label = call_label(index, name)

    def fail(kind: ProblemKind, text: str) -> tuple[ToolCall, ActionProblem]:
        kept = raw_args if isinstance(raw_args, str) else safe_text(raw_args)
        return ToolCall(call_id, name, kept), ActionProblem(
            kind, text, index, call_id, name or None
        )

    call_type = raw.get("type", "function")
    if call_type != "function":
        return fail(
            "bad_call",
            f"{label} has type {shorten(safe_text(call_type))}; only 'function' calls are "
            "supported",
        )
    if not name:
        return fail("missing_name", f"{label} has no function name")
    args, detail, kind = decode_arguments(raw_args)
    if kind == "bad_json":
        return fail(kind, f"{label}: arguments are not valid JSON: {detail}")
    if kind is not None or args is None:
        return fail("not_an_object", f"{label}: arguments must be a JSON object, got {detail}")
    return ToolCall(
        call_id, name, args, raw_args if isinstance(raw_args, str) and raw_args.strip() else None
    ), None


def unique_call_ids(action: NormalizedAction, taken: set[str], suffix: str) -> NormalizedAction:
    """``action`` with every call id already in ``taken`` renamed ``<id>_<suffix>``; the ids of
    the result are added to ``taken``.

    Ids must be unique over an episode, not only within a turn: a tool reply names its call by
    id, and fallback ids are derived from the turn's text, so a model repeating a turn (or
    reusing ``"call_0"``) would otherwise produce the same ids twice.  A
    fresh ``suffix`` per turn keeps the renaming deterministic.
    """
    calls = action.message.get("tool_calls") or []
    ids = [c["id"] for c in calls]
    if taken.isdisjoint(ids):
        taken.update(ids)
        return action
    rename: dict[str, str] = {}
    used = taken | set(ids)
    for old in ids:
        if old in taken and old not in rename:
            new = f"{old}_{suffix}"
            while new in used:
                new += "_"
            used.add(new)
            rename[old] = new
    message: AssistantMessage = dict(action.message)  # type: ignore[assignment]
    message["tool_calls"] = [{**c, "id": rename.get(c["id"], c["id"])} for c in calls]
    tool_calls = tuple(c._replace(id=rename.get(c.id, c.id)) for c in action.tool_calls)
    problems = tuple(
        replace(p, call_id=rename[p.call_id]) if p.call_id in rename else p for p in action.problems
    )
    taken.update(c["id"] for c in message["tool_calls"])
    return NormalizedAction(message, tool_calls, problems)
