"""envgym.episode: the bookkeeping BundleEnv, SweEnv and Tau2Env share (exact values, no sandbox)."""

from __future__ import annotations

from typing import Any

import pytest

from envgym.actions import normalize_action
from envgym.context import ContextManager
from envgym.context.view import ContextView
from envgym.episode import EpisodeCounters, answer_calls, counting
from envgym.messages import ToolCall
from envgym.parsers import get_parser
from envgym.tokens import ApproxTokenCounter

pytestmark = pytest.mark.timeout(30)


def call(name: str, arguments: Any, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def turn(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


class Recorder:
    """An ``answer`` callback: echoes, and treats ``submit`` as a valid submission."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def __call__(self, c: ToolCall, submitted: bool) -> tuple[str, str | None]:
        self.seen.append((c.name, submitted))
        return f"ran {c.name}", (f"submitted {c.arguments}" if c.name == "submit" else None)


def test_readable_calls_answered_in_order_and_later_calls_know_of_the_submission() -> None:
    parsed = normalize_action(
        turn(call("a", "{}", "x"), call("submit", '{"v": 1}', "y"), call("b", "{}", "z"))
    )
    answer = Recorder()
    messages, result = answer_calls(parsed, answer)
    assert answer.seen == [("a", False), ("submit", False), ("b", True)]
    assert [(m["tool_call_id"], m["content"]) for m in messages] == [
        ("x", "ran a"),
        ("y", "ran submit"),
        ("z", "ran b"),
    ]
    assert result == "submitted {'v': 1}"


def test_first_submission_wins() -> None:
    parsed = normalize_action(
        turn(call("submit", '{"v": 1}', "x"), call("submit", '{"v": 2}', "y"))
    )
    _, result = answer_calls(parsed, Recorder())
    assert result == "submitted {'v': 1}"


def test_broken_call_keeps_its_place_and_message_notes_come_last() -> None:
    parsed = normalize_action(
        turn(call("a", "{}", "x"), call("b", "{not json", "y"), call("c", "{}", "z"), content=7)
    )
    answer = Recorder()
    messages, result = answer_calls(parsed, answer)
    assert answer.seen == [("a", False), ("c", False)]  # the broken call never runs
    assert [m["role"] for m in messages] == ["tool", "tool", "tool", "user"]
    assert [m.get("tool_call_id") for m in messages[:3]] == ["x", "y", "z"]
    assert messages[1]["content"].startswith("Error: ") and messages[1]["name"] == "b"
    assert messages[3]["content"].startswith("Error: ") and "content" in messages[3]["content"]
    assert result is None


def test_no_calls_no_messages() -> None:
    assert answer_calls(normalize_action({"role": "assistant", "content": "hi"}), Recorder()) == (
        [],
        None,
    )


def test_read_counts_turns_and_problems_and_keeps_ids_unique() -> None:
    episode = EpisodeCounters()
    parser = get_parser("hermes")
    first = episode.read(turn(call("a", "{}", "same")), parser)
    second = episode.read(turn(call("a", "{}", "same"), call("b", "[1]", "other")), parser)
    raw = episode.read('<tool_call>{"name": "a", "arguments": {}}</tool_call>', parser)
    ids = [c.id for p in (first, second, raw) for c in p.tool_calls]
    assert len(ids) == len(set(ids)) == 3
    assert episode.turns == 3
    assert sum(episode.errors.values()) == 1 and len(second.problems) == 1


def test_info_has_the_contract_keys() -> None:
    view = ContextView(ContextManager(policy="thinking-retention"))
    episode = EpisodeCounters(turns=2, tool_calls=5)
    episode.errors["unknown_tool"] += 1
    assert episode.info(view, {"x": 1.0}) == {
        "reward_components": {"x": 1.0}, "tool_calls": 5, "errors": {"unknown_tool": 1}, "turns": 2,
        "context_dropped": [], "context_compactions": [],
    }  # fmt: skip


def test_counting_gives_the_context_a_counter_only_when_it_must_count() -> None:
    plain = counting("thinking-retention", None, window=False)
    assert plain.counter is None and plain.context.counter is None
    assert isinstance(plain.budget, ApproxTokenCounter)
    windowed = counting("thinking-retention", None, window=True)
    assert (
        windowed.counter is None and windowed.budget is windowed.context.counter
    )  # one counter, one cache
    given = ContextManager(policy="keep-all")
    assert counting(given, None, window=False).context is given
