"""envgym.parsers: raw-text tool calls (hermes, deepseek-v3/v3.1, json), round trips, fuzz."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envgym.actions import NormalizedAction
from envgym.messages import ToolCall, assistant_message
from envgym.parsers import (
    DeepSeekParser,
    HermesParser,
    JsonParser,
    ToolCallParser,
    available_parsers,
    format_message,
    get_parser,
    register_parser,
)

PARSERS = ["hermes", "deepseek-v3", "deepseek-v3.1", "json"]

# Literal DeepSeek tokens (full-width bar U+FF5C, U+2581 in place of spaces), spelled here
# independently of the parser's constants.
B, E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def calls_of(result: NormalizedAction) -> list[tuple[str, object]]:
    return [(c.name, c.arguments) for c in result.tool_calls]


def problems_of(result: NormalizedAction) -> list[tuple[str, str]]:
    return [(p.kind, p.message) for p in result.problems]


# -- registry ----------------------------------------------------------------------------------


def test_registry_knows_the_builtin_parsers() -> None:
    assert available_parsers() == ("deepseek-v3", "deepseek-v3.1", "hermes", "json")
    for name in PARSERS:
        parser = get_parser(name)
        assert isinstance(parser, ToolCallParser)
        assert parser.name == name


def test_unknown_parser_error_lists_known_names() -> None:
    with pytest.raises(
        ValueError,
        match=r"unknown tool-call parser 'qwen9'; known parsers: deepseek-v3, "
        r"deepseek-v3.1, hermes, json",
    ):
        get_parser("qwen9")


def test_register_parser() -> None:
    register_parser("hermes-test-copy", HermesParser(name="hermes-test-copy"))
    assert get_parser("hermes-test-copy").name == "hermes-test-copy"
    with pytest.raises(ValueError, match="already registered"):
        register_parser("hermes-test-copy", HermesParser())
    register_parser("hermes-test-copy", HermesParser(), replace=True)
    with pytest.raises(TypeError):
        register_parser("broken", object())  # type: ignore[arg-type]


# -- hermes ------------------------------------------------------------------------------------


def test_hermes_several_calls_with_reasoning_and_content() -> None:
    text = (
        "<think>\nI need two lookups.\n</think>\n\nChecking both.\n"
        '<tool_call>\n{"name": "get_city", "arguments": {"name": "Oslo"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_all_cities", "arguments": {}}\n</tool_call>'
    )
    result = HermesParser().parse(text)
    assert result.reasoning_content == "I need two lookups."
    assert result.content == "Checking both."
    assert calls_of(result) == [("get_city", {"name": "Oslo"}), ("get_all_cities", {})]
    assert result.problems == ()
    assert len({c.id for c in result.tool_calls}) == 2


def test_hermes_think_opened_by_the_template() -> None:
    result = HermesParser().parse("plan it</think>The answer is 4.")
    assert (result.reasoning_content, result.content, result.tool_calls) == (
        "plan it",
        "The answer is 4.",
        (),
    )


def test_hermes_call_inside_unclosed_reasoning() -> None:
    # Seed Table 8: the model calls a tool in the middle of its reasoning and stops there.
    text = (
        "<think>Let me run code.\n"
        '<tool_call>{"name": "python", "arguments": {"code": "1+1"}}</tool_call>'
    )
    result = HermesParser().parse(text)
    assert result.reasoning_content == "Let me run code."
    assert result.content is None
    assert calls_of(result) == [("python", {"code": "1+1"})]


def test_hermes_stringified_arguments_and_parameters_key() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
        '<tool_call>{"name": "b", "parameters": {"y": 2}}</tool_call>'
    )
    assert calls_of(HermesParser().parse(text)) == [("a", {"x": 1}), ("b", {"y": 2})]


def test_hermes_bad_json_names_the_call_and_position() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "search", "arguments": {"q": "x" "k": 1}}</tool_call>'
    )
    result = HermesParser().parse(text)
    assert calls_of(result) == [("a", {})]
    assert problems_of(result) == [
        ("bad_json", "tool call 2 (search) is not valid JSON: Expecting ',' delimiter at char 42")
    ]
    (problem,) = result.problems
    assert problem.call_id == result.message["tool_calls"][1]["id"]
    assert result.message["tool_calls"][1]["function"]["name"] == "search"


def test_hermes_truncated_call() -> None:
    result = HermesParser().parse('<tool_call>{"name": "search", "arguments": {"q": "par')
    assert problems_of(result) == [
        (
            "truncated",
            (
                "tool call 1 (search) was cut off before its end marker: "
                "Unterminated string starting at char 38"
            ),
        )
    ]
    assert result.tool_calls == ()


def test_hermes_unclosed_but_complete_call_is_accepted() -> None:
    result = HermesParser().parse('<tool_call>{"name": "f", "arguments": {"a": 1}}')
    assert (calls_of(result), result.problems) == ([("f", {"a": 1})], ())


def test_hermes_non_object_and_missing_name() -> None:
    result = HermesParser().parse(
        '<tool_call>[1, 2]</tool_call><tool_call>{"arguments": {}}</tool_call>'
    )
    assert problems_of(result) == [
        ("not_an_object", 'tool call 1 must be a JSON object {"name": ..., "arguments": {...}}'),
        ("missing_name", "tool call 2 has no function name"),
    ]


# -- deepseek ----------------------------------------------------------------------------------


def test_deepseek_tokens_are_the_full_width_ones() -> None:
    from envgym.parsers import deepseek

    assert (deepseek.CALLS_BEGIN, deepseek.CALLS_END) == (B, E)
    assert (deepseek.CALL_BEGIN, deepseek.CALL_END, deepseek.SEP) == (CB, CE, SEP)
    assert B == "<\uff5ctool\u2581calls\u2581begin\uff5c>"


def test_deepseek_v3_form() -> None:
    text = (
        "Let me check.\n"
        f"{B}{CB}function{SEP}get_weather\n```json\n" + '{"city": "Tokyo"}' + f"\n```{CE}\n"
        f"{CB}function{SEP}get_time\n```json\n" + "{}" + f"\n```{CE}{E}<｜end▁of▁sentence｜>"
    )
    result = get_parser("deepseek-v3").parse(text)
    assert result.content == "Let me check."
    assert calls_of(result) == [("get_weather", {"city": "Tokyo"}), ("get_time", {})]
    assert result.problems == ()


def test_deepseek_v31_form_with_thinking() -> None:
    text = f"<think>weather first</think>{B}{CB}get_weather{SEP}" + '{"city": "Paris"}' + f"{CE}{E}"
    result = get_parser("deepseek-v3").parse(text)
    assert result.reasoning_content == "weather first"
    assert result.content is None
    assert calls_of(result) == [("get_weather", {"city": "Paris"})]


def test_deepseek_missing_call_end_between_calls() -> None:
    text = f"{B}{CB}a{SEP}" + '{"x": 1}' + f"{CB}b{SEP}" + "{}" + f"{CE}{E}"
    assert calls_of(get_parser("deepseek-v3.1").parse(text)) == [("a", {"x": 1}), ("b", {})]


def test_deepseek_problems() -> None:
    text = f"{B}{CB}nosep{CE}{CB}f{SEP}" + '{"x": 1,' + f"{CE}{CB}g{SEP}" + '{"y": '
    result = get_parser("deepseek-v3").parse(text)
    assert problems_of(result) == [
        ("bad_call", f"tool call 1 has no {SEP} between the function name and its arguments"),
        (
            "bad_json",
            (
                "tool call 2 (f): arguments are not valid JSON: "
                "Expecting property name enclosed in double quotes at char 8"
            ),
        ),
        (
            "truncated",
            (
                "tool call 3 (g): arguments are not valid JSON: Expecting value at char 5 "
                f"(the call was cut off before {CE})"
            ),
        ),
    ]
    assert result.tool_calls == ()
    assert [c["function"]["name"] for c in result.message["tool_calls"]] == ["", "f", "g"]


def test_deepseek_format_variants() -> None:
    calls = [ToolCall("x", "f", {"a": 1})]
    assert DeepSeekParser(variant="v3").format_calls(calls) == (
        f"{B}{CB}function{SEP}f\n```json\n" + '{"a": 1}' + f"\n```{CE}{E}"
    )
    assert (
        DeepSeekParser(variant="v3.1").format_calls(calls)
        == f"{B}{CB}f{SEP}" + '{"a": 1}' + f"{CE}{E}"
    )


# -- json --------------------------------------------------------------------------------------


def test_json_single_object_list_fence_and_parameters() -> None:
    p = JsonParser()
    assert calls_of(p.parse('{"name": "f", "arguments": {"a": 1}}')) == [("f", {"a": 1})]
    assert calls_of(
        p.parse('[{"name": "f", "arguments": {}}, {"name": "g", "parameters": {"b": 2}}]')
    ) == [
        ("f", {}),
        ("g", {"b": 2}),
    ]
    fenced = p.parse('I will search.\n```json\n{"name": "search", "arguments": {"q": "x"}}\n```')
    assert (fenced.content, calls_of(fenced)) == ("I will search.", [("search", {"q": "x"})])


def test_json_pretty_printed_on_its_own_lines() -> None:
    text = 'Calling now.\n{\n  "name": "f",\n  "arguments": {"a": [1,\n 2]}\n}\n'
    result = JsonParser().parse(text)
    assert (result.content, calls_of(result)) == ("Calling now.", [("f", {"a": [1, 2]})])


def test_json_answers_that_are_not_calls_stay_content() -> None:
    p = JsonParser()
    for text in (
        '{"city": "Oslo", "days": 3}',
        "[1, 2, 3]",
        '```json\n{"total": 7}\n```',
        '{"plan": [\n{"name": "Hotel"}\n]}',
    ):
        result = p.parse(text)
        assert (result.content, result.tool_calls, result.problems) == (text, (), ())


def test_json_ignores_json_in_reasoning() -> None:
    result = JsonParser().parse(
        '<think>maybe {"name": "f", "arguments": {}}\n{"name": "f"}</think>Done.'
    )
    assert (result.content, result.tool_calls) == ("Done.", ())


def test_json_broken_calls() -> None:
    p = JsonParser()
    assert problems_of(p.parse('{"name": "f", "arguments": {"a": 1,}}')) == [
        (
            "bad_json",
            (
                "tool call 1 (f) is not valid JSON: "
                "Expecting property name enclosed in double quotes at char 35"
            ),
        )
    ]
    assert problems_of(p.parse('```json\n{"name": "f", "arguments": {"a": ')) == [
        (
            "truncated",
            "tool call 1 (f) was cut off before its end marker: Expecting value at char 32",
        )
    ]
    after_text = p.parse('Calling:\n{"name": "f", "arguments": {"a": 1')
    assert (after_text.content, problems_of(after_text)) == (
        "Calling:",
        [("bad_json", "tool call 1 (f) is not valid JSON: Expecting ',' delimiter at char 34")],
    )
    # A broken bare call ends at the latest where a fenced block begins.
    both = p.parse('{"name": "f", "arg\n```json\n{"name": "g", "arguments": {}}\n```')
    assert calls_of(both) == [("g", {})]
    assert [(p.kind, p.name) for p in both.problems] == [("bad_json", "f")]
    mixed = p.parse('[{"name": "f", "arguments": {}}, 3]')
    assert calls_of(mixed) == [("f", {})]
    assert [p.kind for p in mixed.problems] == ["not_an_object"]


# -- render_tools --------------------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_city",
            "description": "Look a city up.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        },
    }
]


@pytest.mark.parametrize("name", PARSERS)
def test_render_tools_follows_the_seed_prompt_shape(name: str) -> None:
    text = get_parser(name).render_tools(TOOLS)
    # Seed Appendix B, Table 7: "## Tools / You have access to the following tools:
    # {TOOL-DESCRIPTIONS} Important: ALWAYS adhere to this exact format for tool use:
    # {TOOLCALL-FORMAT}".
    assert text.startswith("## Tools\nYou have access to the following tools:\n\n")
    assert "\n\nImportant: ALWAYS adhere to this exact format for tool use:\n" in text
    assert "get_city" in text and "Look a city up." in text
    assert (
        '{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}'
        in text
    )


def test_render_tools_hermes_exact_descriptions() -> None:
    text = HermesParser().render_tools(TOOLS)
    assert "<tools>\n" + json.dumps(TOOLS[0], ensure_ascii=False) + "\n</tools>" in text
    call = '{"name": "<function name>", "arguments": {<arguments as a JSON object>}}'
    assert f"<tool_call>\n{call}\n</tool_call>" in text


def test_render_tools_rejects_nameless_tools() -> None:
    with pytest.raises(ValueError, match="tool 0 is not an OpenAI function schema"):
        HermesParser().render_tools([{"type": "function", "function": {"description": "x"}}])


# -- round trips (hypothesis) -------------------------------------------------------------------

_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_\-]{0,30}", fullmatch=True)
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=10,
)
_arguments = st.dictionaries(st.text(), _json_values, max_size=4)
# text=None: the calls serialize their arguments (a hypothesis-drawn text would disagree)
_calls = st.lists(st.builds(ToolCall, st.just("c1"), _names, _arguments, st.none()), max_size=4)
# Free text without markup: what the parsers return as content or reasoning.
_prose = (
    st.text(
        st.characters(whitelist_categories=("L", "N", "Zs"), whitelist_characters=".,!?-"),
        max_size=40,
    )
    .map(str.strip)
    .filter(bool)
)

_fast = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", PARSERS)
@_fast
@given(calls=_calls)
def test_format_then_parse_round_trips_calls(name: str, calls: list[ToolCall]) -> None:
    parser = get_parser(name)
    result = parser.parse(parser.format_calls(calls))
    assert result.problems == ()
    assert calls_of(result) == [(c.name, c.arguments) for c in calls]


@pytest.mark.parametrize("name", PARSERS)
@_fast
@given(content=st.none() | _prose, reasoning=st.none() | _prose, calls=_calls)
def test_format_message_then_parse_round_trips(
    name: str, content: str | None, reasoning: str | None, calls: list[ToolCall]
) -> None:
    parser = get_parser(name)
    message = assistant_message(content, reasoning, calls)
    result = parser.parse(format_message(parser, message))
    assert result.problems == ()
    assert (result.content, result.reasoning_content) == (content, reasoning)
    assert calls_of(result) == [(c.name, c.arguments) for c in calls]


# -- never raises (hypothesis) -------------------------------------------------------------------

_fragments = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "</think>",
        B,
        E,
        CB,
        CE,
        SEP,
        "function",
        "```json\n",
        "```",
        "\n",
        "{",
        "}",
        "[",
        "]",
        '"name"',
        '"arguments"',
        '"parameters"',
        ":",
        ",",
        '"f"',
        "1",
        "null",
        " ",
        '{"name": "f", "arguments": {}}',
        "\\",
        '"',
    ]
)
_raw_text = st.lists(_fragments | st.text(max_size=4), max_size=25).map("".join)
_junk = st.recursive(
    st.none() | st.integers() | st.text(max_size=5) | st.binary(max_size=3),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)


@pytest.mark.parametrize("name", PARSERS)
@_fast
@given(text=_raw_text | st.text(max_size=60) | _junk)
def test_parse_never_raises(name: str, text: object) -> None:
    result = get_parser(name).parse(text)  # type: ignore[arg-type]
    assert isinstance(result, NormalizedAction)
    assert result.message["role"] == "assistant"
    json.dumps(result.message, allow_nan=False)
    ids = [c["id"] for c in result.message.get("tool_calls", [])]
    assert len(ids) == len(set(ids))
    assert all(isinstance(c.arguments, dict) for c in result.tool_calls)
    for problem in result.problems:
        assert problem.message and (problem.call_id is None or problem.call_id in ids)


def test_parse_non_text_input() -> None:
    result = HermesParser().parse(None)  # type: ignore[arg-type]
    assert problems_of(result) == [
        ("bad_message", "expected the model's output as text, not NoneType")
    ]


def test_parse_absurd_nesting() -> None:
    for name in PARSERS:
        result = get_parser(name).parse(
            '<tool_call>{"name": "f", "arguments": ' + "[" * 50_000 + "</tool_call>"
        )
        assert isinstance(result, NormalizedAction)
