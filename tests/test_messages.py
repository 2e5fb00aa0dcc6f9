"""envgym.messages (message helpers, ToolCall) and envgym.actions (normalize_action, which never raises)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envgym.actions import ActionProblem, NormalizedAction, normalize_action
from envgym.messages import (
    ToolCall,
    assistant_message,
    decode_arguments,
    fallback_call_id,
    system_message,
    tool_message,
    user_message,
)


def call(name: str, arguments: object, call_id: str | None = "c1") -> dict:
    out: dict = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        out["id"] = call_id
    return out


# -- builders -----------------------------------------------------------------------------------


def test_builders_make_openai_shapes() -> None:
    assert system_message("s") == {"role": "system", "content": "s"}
    assert user_message("u") == {"role": "user", "content": "u"}
    assert tool_message("c1", "search", "found") == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "search",
        "content": "found",
    }
    assert tool_message("c1", "search", {"n": 2})["content"] == '{"n": 2}'


def test_assistant_message_omits_empty_optional_keys() -> None:
    assert assistant_message("hi") == {"role": "assistant", "content": "hi"}
    assert assistant_message(None, "why", [ToolCall("c1", "f", {"x": 1})]) == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "why",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
        ],
    }


def test_tool_call_openai_round_trip() -> None:
    tc = ToolCall("c9", "get_city", {"name": "Zürich", "days": [1, 2]})
    data = tc.to_openai()
    assert data == {
        "id": "c9",
        "type": "function",
        "function": {"name": "get_city", "arguments": '{"name": "Zürich", "days": [1, 2]}'},
    }
    assert ToolCall.from_openai(data) == tc


def test_tool_call_from_openai_keeps_unreadable_arguments_raw() -> None:
    tc = ToolCall.from_openai(call("f", '{"x": ', "c1"))
    assert tc == ToolCall("c1", "f", '{"x": ')
    assert not tc.parsed
    assert tc.to_openai()["function"]["arguments"] == '{"x": '


def test_tool_call_from_openai_rejects_broken_structure() -> None:
    with pytest.raises(ValueError, match="not an OpenAI tool call"):
        ToolCall.from_openai({"id": "c1"})
    with pytest.raises(ValueError, match="string id"):
        ToolCall.from_openai({"function": {"name": "f", "arguments": "{}"}})


def test_decode_arguments() -> None:
    assert decode_arguments('{"a": [1, 2]}') == ({"a": [1, 2]}, None, None)
    assert decode_arguments({"a": (1, 2), 3: "x"}) == ({"a": [1, 2], "3": "x"}, None, None)
    assert decode_arguments("") == ({}, None, None)
    assert decode_arguments(None) == ({}, None, None)
    assert decode_arguments('{"a": 1,}') == (
        None,
        "Expecting property name enclosed in double quotes at char 8",
        "bad_json",
    )
    assert decode_arguments("[1, 2]") == (None, "an array", "not_an_object")
    assert decode_arguments("7") == (None, "a number", "not_an_object")
    assert decode_arguments({"x": math.nan})[2] == "bad_json"
    assert decode_arguments({"x": object()})[2] == "bad_json"


def test_fallback_call_id_is_deterministic() -> None:
    assert fallback_call_id("same text", 0) == fallback_call_id("same text", 0)
    assert fallback_call_id("same text", 0) != fallback_call_id("same text", 1)
    assert fallback_call_id("same text", 0) != fallback_call_id("other text", 0)
    assert fallback_call_id("x", 3).startswith("call_") and fallback_call_id("x", 3).endswith("_3")


# -- normalize_action: exact expectations ---------------------------------------------------------


def test_clean_action_passes_through() -> None:
    action = {
        "role": "assistant",
        "content": "Looking it up.",
        "reasoning_content": "need the city list",
        "tool_calls": [call("get_all_cities", "{}")],
    }
    result = normalize_action(action)
    assert result.problems == ()
    assert result.ok
    assert result.message == action
    assert result.tool_calls == (ToolCall("c1", "get_all_cities", {}),)
    assert result.content == "Looking it up."
    assert result.reasoning_content == "need the city list"


def test_arguments_given_as_dict_are_serialized() -> None:
    result = normalize_action({"content": None, "tool_calls": [call("f", {"x": 1})]})
    assert result.problems == ()
    assert result.message["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    assert result.tool_calls == (ToolCall("c1", "f", {"x": 1}),)


def test_flattened_call_and_parameters_key_are_accepted() -> None:
    result = normalize_action({"tool_calls": [{"id": "a", "name": "f", "parameters": {"k": "v"}}]})
    assert result.problems == ()
    assert result.tool_calls == (ToolCall("a", "f", {"k": "v"}),)


def test_bad_json_becomes_a_problem_and_the_call_stays_in_the_message() -> None:
    action = {"tool_calls": [call("ok", "{}", "c1"), call("search", '{"q": "x",, }', "c2")]}
    result = normalize_action(action)
    assert result.tool_calls == (ToolCall("c1", "ok", {}),)
    assert result.problems == (
        ActionProblem(
            kind="bad_json",
            message="tool call 2 (search): arguments are not valid JSON: "
            "Expecting property name enclosed in double quotes at char 10",
            index=1,
            call_id="c2",
            name="search",
        ),
    )
    assert [c["id"] for c in result.message["tool_calls"]] == ["c1", "c2"]
    assert result.message["tool_calls"][1]["function"]["arguments"] == '{"q": "x",, }'


def test_non_object_arguments() -> None:
    (problem,) = normalize_action({"tool_calls": [call("f", "[1, 2]")]}).problems
    assert problem.kind == "not_an_object"
    assert problem.message == "tool call 1 (f): arguments must be a JSON object, got an array"


def test_missing_name() -> None:
    (problem,) = normalize_action({"tool_calls": [call("", "{}")]}).problems
    assert (problem.kind, problem.message, problem.name) == (
        "missing_name",
        "tool call 1 has no function name",
        None,
    )


def test_non_dict_call_entry_gets_an_id_to_answer() -> None:
    result = normalize_action({"tool_calls": [5]})
    (problem,) = result.problems
    assert problem.kind == "bad_call"
    assert problem.call_id == result.message["tool_calls"][0]["id"]
    assert result.tool_calls == ()


def test_wrong_call_type() -> None:
    raw = {"id": "c1", "type": "retrieval", "function": {"name": "f", "arguments": "{}"}}
    (problem,) = normalize_action({"tool_calls": [raw]}).problems
    assert problem.kind == "bad_call"
    assert "only 'function' calls are supported" in problem.message


def test_missing_and_duplicate_ids_are_replaced_deterministically() -> None:
    action = {"tool_calls": [call("f", "{}", None), call("g", "{}", "dup"), call("h", "{}", "dup")]}
    first, second = normalize_action(action), normalize_action(action)
    ids = [c.id for c in first.tool_calls]
    assert ids == [c.id for c in second.tool_calls]
    assert ids[1] == "dup" and len(set(ids)) == 3


NOT_A_MESSAGE = "the action must be an assistant message object with 'content' and/or 'tool_calls'"


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (None, NOT_A_MESSAGE + ", not null"),
        (3, NOT_A_MESSAGE + ", not a number"),
        ({"content": 3}, "'content' must be a string or null, not a number"),
        ({"role": "user", "content": "x"}, "the action's role must be 'assistant', not user"),
        ({"tool_calls": "f()"}, "'tool_calls' must be a list of calls, not a string"),
        (
            {"reasoning_content": ["a"]},
            "'reasoning_content' must be a string or null, not an array",
        ),
    ],
)
def test_message_level_problems(action: object, message: str) -> None:
    result = normalize_action(action)
    assert [(p.kind, p.message, p.call_id) for p in result.problems] == [
        ("bad_message", message, None)
    ]
    assert result.message["role"] == "assistant"


def test_string_action_is_plain_content() -> None:
    assert normalize_action("hello") == NormalizedAction({"role": "assistant", "content": "hello"})


def test_content_parts_are_joined() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert normalize_action({"content": parts}).message == {"role": "assistant", "content": "ab"}


def test_problem_to_dict() -> None:
    problem = ActionProblem("bad_json", "m", 0, "c1", "f")
    assert problem.to_dict() == {
        "kind": "bad_json",
        "message": "m",
        "index": 0,
        "call_id": "c1",
        "name": "f",
    }


# -- normalize_action: never raises ---------------------------------------------------------------

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_junk = st.recursive(
    _scalars | st.binary(max_size=5),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=4)
    ),
    max_leaves=20,
)
_keys = st.sampled_from(
    [
        "role",
        "content",
        "reasoning_content",
        "tool_calls",
        "id",
        "type",
        "function",
        "name",
        "arguments",
        "parameters",
    ]
)
_call_like = st.dictionaries(_keys, _junk | st.dictionaries(_keys, _junk, max_size=4), max_size=5)
_action_like = st.fixed_dictionaries(
    {},
    optional={
        "role": _junk | st.just("assistant"),
        "content": _junk,
        "reasoning_content": _junk,
        "tool_calls": st.lists(_call_like | _junk, max_size=4) | _junk,
    },
)


def _check_invariants(result: NormalizedAction) -> None:
    assert isinstance(result, NormalizedAction)
    message = result.message
    assert message["role"] == "assistant"
    assert message["content"] is None or isinstance(message["content"], str)
    json.dumps(message, allow_nan=False)  # always serializable
    ids = [c["id"] for c in message.get("tool_calls", [])]
    assert len(ids) == len(set(ids))
    runnable = {c.id for c in result.tool_calls}
    for problem in result.problems:
        assert problem.message
        if problem.call_id is not None:
            assert problem.call_id in ids and problem.call_id not in runnable
    for tc in result.tool_calls:
        assert isinstance(tc.arguments, dict) and tc.name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_action_like | _junk)
def test_normalize_action_never_raises(action: object) -> None:
    _check_invariants(normalize_action(action))


def test_normalize_action_survives_hostile_objects() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    circular: dict = {"content": "x"}
    circular["tool_calls"] = [{"id": "c", "function": {"name": "f", "arguments": circular}}]
    deep: object = {}
    for _ in range(5000):
        deep = {"a": deep}
    for action in (
        {"tool_calls": [{"function": {"name": "f", "arguments": {"x": Hostile()}}}]},
        circular,
        {"tool_calls": [{"function": {"name": "f", "arguments": deep}}]},
        {"tool_calls": [{"function": {"name": "f", "arguments": "[" * 100_000}}]},
    ):
        _check_invariants(normalize_action(action))


# -- the fast path for well-formed actions agrees with the general path ---------------------

from hypothesis import given as _given  # noqa: E402
from hypothesis import settings as _settings  # noqa: E402
from hypothesis import strategies as _st  # noqa: E402

from envgym.actions import _repair, _well_formed  # noqa: E402

_args_text = _st.one_of(
    _st.dictionaries(_st.text(max_size=5), _st.integers() | _st.text(max_size=5), max_size=3).map(
        json.dumps
    ),
    _st.sampled_from(["", " ", "{}", "[]", "1", '{"a": NaN}', "{bad", '{"a": 1} ', "null"]),
)
_wf_call = _st.fixed_dictionaries(
    {
        "id": _st.sampled_from(["c1", "c2", "", " c3"]),
        "type": _st.just("function"),
        "function": _st.fixed_dictionaries(
            {"name": _st.sampled_from(["f", " g ", "", "h"]), "arguments": _args_text}
        ),
    }
)
_wf_action = _st.fixed_dictionaries(
    {"role": _st.just("assistant")},
    optional={
        "content": _st.none() | _st.text(max_size=10),
        "reasoning_content": _st.none() | _st.text(max_size=10),
        "tool_calls": _st.none() | _st.lists(_wf_call, max_size=3),
    },
)


@_settings(max_examples=400, deadline=None)
@_given(_wf_action)
def test_fast_path_matches_general_path(action: dict) -> None:
    fast = _well_formed(action)
    if fast is None:
        return
    slow = _repair(action)
    assert fast == slow
    assert fast.message == slow.message


def test_unique_call_ids_renames_only_ids_used_before() -> None:
    from envgym.actions import unique_call_ids

    taken: set[str] = set()
    turn = {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "f", "arguments": "{}"}},
        {"function": {"name": "g", "arguments": "[1]"}},
    ]}  # fmt: skip
    first = unique_call_ids(normalize_action(turn), taken, "t1")
    assert first == normalize_action(turn)  # nothing taken yet: unchanged
    second = unique_call_ids(normalize_action(turn), taken, "t2")
    ids = [c["id"] for c in second.message["tool_calls"]]
    assert ids == [f"{c['id']}_t2" for c in first.message["tool_calls"]]
    assert [c.id for c in second.tool_calls] == ids[:1]  # the runnable call follows
    assert [p.call_id for p in second.problems] == ids[1:]  # so does the problem's reply id
    assert taken == {c["id"] for m in (first, second) for c in m.message["tool_calls"]}
