"""BundleEnv: the env contract end to end over a tiny bundle, in the bubblewrap sandbox."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from bundle_factory import TOOLS, make_notes_bundle

import envgym
from envgym.bundle_env import BundleEnv
from envgym.context import DISCARD_NOTICE, SUMMARY_PREFIX, ContextManager
from envgym.core import INFO_KEYS
from envgym.tokens import ApproxTokenCounter


def call(name: str, args: dict | str, cid: str = "c1") -> dict:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def turn(*calls: dict, reasoning: str | None = None, content: str = "") -> dict:
    msg = {"role": "assistant", "content": content, "tool_calls": list(calls)}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return msg


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_notes_bundle(tmp_path_factory.mktemp("notes") / "b")


@pytest.fixture
def env(bundle_dir: Path):
    env = BundleEnv(bundle_dir, sandbox="bwrap")
    yield env
    env.close()


def test_reset_observation_and_info(env: BundleEnv) -> None:
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert [m["role"] for m in obs["messages"]] == ["system", "user"]
    assert "secret" in obs["messages"][1]["content"]
    names = sorted(t["function"]["name"] for t in obs["tools"])
    assert names == ["get_note", "list_keys", "set_note", "shout", "submit_result"]
    get_note = next(t for t in obs["tools"] if t["function"]["name"] == "get_note")["function"]
    assert get_note["parameters"]["required"] == ["key"]
    assert get_note["parameters"]["properties"]["key"]["type"] == "string"
    assert all(k in info for k in INFO_KEYS)
    assert info["task_id"] == "secret"


def test_solve_by_hand_gives_reward_one(env: BundleEnv) -> None:
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(turn(call("get_note", {"key": "secret"})))
    assert obs["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "get_note",
        "content": "tangerine",
    }
    assert (reward, terminated, truncated) == (0.0, False, False)
    obs, reward, terminated, truncated, info = env.step(
        turn(call("submit_result", {"answer_text": "tangerine"}, "c2"))
    )
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["reward_components"] == {"answered": 1.0, "correct": 1.0}
    assert info["report"]["passed"] is True
    assert info["tool_calls"] == 2


def test_wrong_submission_names_failed_check(env: BundleEnv) -> None:
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(turn(call("submit_result", {"answer_text": "plum"})))
    assert (reward, terminated) == (0.0, True)
    failed = [c["name"] for c in info["report"]["checks"] if not c["passed"]]
    assert failed == ["correct"]


def test_fraction_reward(bundle_dir: Path) -> None:
    env = BundleEnv(bundle_dir, sandbox="inprocess", reward="fraction")
    try:
        env.reset(seed=0)
        _, reward, _, _, _ = env.step(turn(call("submit_result", {"answer_text": "plum"})))
        assert reward == 0.5
    finally:
        env.close()


@pytest.mark.parametrize(
    ("action", "kind", "needle"),
    [
        (turn(call("get_note", "{not json")), "bad_json", "not valid JSON"),
        (turn(call("teleport", {})), "unknown_tool", "unknown tool 'teleport'"),
        (turn(call("get_note", {})), "bad_arguments", "'key' is a required property"),
        (turn(call("get_note", {"key": 7})), "bad_arguments", "7 is not of type 'string'"),
        (
            turn(call("get_note", {"key": "x", "extra": 1})),
            "bad_arguments",
            "Additional properties",
        ),
        (turn(call("get_note", {"key": "missing"})), "exception", "no note 'missing'"),
    ],
)
def test_agent_mistakes_become_messages(
    env: BundleEnv, action: dict, kind: str, needle: str
) -> None:
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    last = obs["messages"][-1]
    assert last["role"] == "tool" and last["content"].startswith("Error")
    assert needle in last["content"]
    assert info["errors"] == {kind: 1}
    assert (terminated, truncated) == (False, False)
    # the episode goes on, state intact
    obs, *_ = env.step(turn(call("get_note", {"key": "secret"}, "c9")))
    assert obs["messages"][-1]["content"] == "tangerine"


def test_output_over_cap(bundle_dir: Path) -> None:
    env = BundleEnv(bundle_dir, sandbox="bwrap", output_cap=100)
    try:
        env.reset(seed=0)
        obs, *_, info = env.step(turn(call("shout", {"text": "ab", "times": 500})))
        assert "over the 100-character limit" in obs["messages"][-1]["content"]
        assert info["errors"] == {"output_too_large": 1}
    finally:
        env.close()


def test_calls_run_in_order_and_state_is_fresh_each_episode(env: BundleEnv) -> None:
    env.reset(seed=0)
    obs, *_ = env.step(
        turn(
            call("set_note", {"key": "secret", "value": "kiwi"}, "a"),
            call("get_note", {"key": "secret"}, "b"),
        )
    )
    assert [m["content"] for m in obs["messages"][-2:]] == ["ok", "kiwi"]
    env.reset(seed=1)
    obs, *_ = env.step(turn(call("get_note", {"key": "secret"})))
    assert obs["messages"][-1]["content"] == "tangerine"


def test_calls_after_submit_are_skipped(env: BundleEnv) -> None:
    env.reset(seed=0)
    obs, reward, terminated, _, _ = env.step(
        turn(
            call("submit_result", {"answer_text": "tangerine"}, "a"),
            call("get_note", {"key": "secret"}, "b"),
        )
    )
    assert terminated and reward == 1.0
    assert obs["messages"][-1]["content"].startswith("Skipped")


def test_no_tool_call_gets_a_user_nudge(env: BundleEnv) -> None:
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step(
        {"role": "assistant", "content": "I think it is tangerine."}
    )
    assert not terminated
    assert obs["messages"][-1]["role"] == "user"
    assert "submit_result" in obs["messages"][-1]["content"]
    assert info["errors"] == {"no_tool_call": 1}


def test_raw_text_actions_through_parsers(bundle_dir: Path) -> None:
    texts = {
        "hermes": '<think>look it up</think><tool_call>{"name": "get_note", "arguments": {"key": "secret"}}</tool_call>',
        "json": '{"name": "get_note", "arguments": {"key": "secret"}}',
        "deepseek-v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_note<｜tool▁sep｜>"
        '{"key": "secret"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    }
    for parser, text in texts.items():
        env = BundleEnv(bundle_dir, sandbox="inprocess", parser=parser)
        try:
            env.reset(seed=0)
            obs, *_ = env.step(text)
            assert obs["messages"][-1]["content"] == "tangerine", parser
        finally:
            env.close()


def test_truncated_raw_text_is_an_error_message(env: BundleEnv) -> None:
    env.reset(seed=0)
    obs, _, terminated, truncated, info = env.step(
        '<tool_call>{"name": "get_note", "arguments": {"key": '
    )
    assert not terminated and not truncated
    assert sum(info["errors"].values()) == 1
    assert "Error" in obs["messages"][-1]["content"]


def test_budgets_truncate(bundle_dir: Path) -> None:
    env = BundleEnv(bundle_dir, sandbox="inprocess", max_turns=2)
    try:
        env.reset(seed=0)
        assert env.step(turn(call("list_keys", {})))[3] is False
        *_, truncated, info = env.step(turn(call("list_keys", {})))
        assert truncated and info["truncated_by"] == "max_turns"
        with pytest.raises(RuntimeError, match="call reset"):
            env.step(turn(call("list_keys", {})))
    finally:
        env.close()
    env = BundleEnv(bundle_dir, sandbox="inprocess", max_tool_calls=3)
    try:
        env.reset(seed=0)
        obs, _, _, truncated, info = env.step(
            turn(*(call("list_keys", {}, f"k{i}") for i in range(5)))
        )
        assert truncated and "max_tool_calls" in info["truncated_by"]
        assert info["tool_calls"] == 3 and info["errors"] == {"tool_budget": 2}
    finally:
        env.close()
    env = BundleEnv(bundle_dir, sandbox="inprocess", time_budget_s=0.05)
    try:
        env.reset(seed=0)
        time.sleep(0.06)
        assert env.step(turn(call("list_keys", {})))[4]["truncated_by"] == "time_budget"
    finally:
        env.close()
    env = BundleEnv(bundle_dir, sandbox="inprocess", context_window=400)
    try:
        env.reset(seed=0)
        *_, truncated, info = env.step(turn(call("shout", {"text": "abcd", "times": 1000})))
        assert truncated and info["truncated_by"] == "context_window"
    finally:
        env.close()


def test_thinking_retention_in_observations(bundle_dir: Path) -> None:
    for ends, after_nudge in ((False, ["R1", "R2", "R3"]), (True, [None, None, None])):
        cm = ContextManager(env_messages_end_turn=ends)
        env = BundleEnv(bundle_dir, sandbox="inprocess", context=cm)
        try:
            env.reset(seed=0)
            obs, *_ = env.step(turn(call("list_keys", {}), reasoning="R1"))
            obs, *_ = env.step(turn(call("get_note", {"key": "secret"}, "c2"), reasoning="R2"))
            kept = [m.get("reasoning_content") for m in obs["messages"] if m["role"] == "assistant"]
            assert kept == ["R1", "R2"]  # tool results alone never drop reasoning
            obs, _, _, _, info = env.step(
                {"role": "assistant", "content": "hmm", "reasoning_content": "R3"}
            )
            kept = [m.get("reasoning_content") for m in obs["messages"] if m["role"] == "assistant"]
            # The env's nudge is not a new user message (§3.2.1) unless the option says so.
            assert kept == after_nudge, ends
            assert {d["what"] for d in info["context_dropped"]} == (
                {"reasoning"} if ends else set()
            )
            assert env.history[2]["reasoning_content"] == "R1"  # the trajectory keeps everything
        finally:
            env.close()


def test_overflow_compaction_is_recorded(bundle_dir: Path) -> None:
    cm = ContextManager(
        policy="keep-all", overflow="discard-all", window=600, counter=ApproxTokenCounter()
    )
    env = BundleEnv(bundle_dir, sandbox="inprocess", context=cm)
    try:
        env.reset(seed=0)
        for i in range(8):
            obs, *_, info = env.step(
                turn(call("shout", {"text": "abcdefgh", "times": 20}, f"s{i}"))
            )
        assert info["context_compactions"], "discard-all should have fired"
        assert len(obs["messages"]) < len(env.history)
    finally:
        env.close()


def test_native_tools_off_renders_tools_into_system_prompt(bundle_dir: Path) -> None:
    env = BundleEnv(bundle_dir, sandbox="inprocess", native_tools=False, parser="hermes")
    try:
        obs, _ = env.reset(seed=0)
        system = obs["messages"][0]["content"]
        assert "get_note" in system and "<tool_call>" in system
    finally:
        env.close()


def test_make_bundle_path_and_gymnasium(bundle_dir: Path) -> None:
    import gymnasium

    env = envgym.make(str(bundle_dir), sandbox="inprocess")
    try:
        assert isinstance(env, BundleEnv)
    finally:
        env.close()
    genv = gymnasium.make("envgym:envgym/trip-planning-v0", sandbox="inprocess")
    try:
        obs, info = genv.reset(seed=0)
        assert "trip" in obs["messages"][1]["content"].lower()
    finally:
        genv.close()


def test_gold_calls_replay_solves_and_leave_episode_state(env: BundleEnv) -> None:
    from envgym.agents import ScriptedAgent, run_episode

    env.reset(seed=0)
    calls = env.gold_calls()
    assert calls == [
        ("get_note", {"key": "secret"}),
        ("submit_result", {"answer_text": "tangerine"}),
    ]
    result = run_episode(env, ScriptedAgent(calls), seed=0)
    assert result.reward == 1.0 and result.turns == 2


@pytest.mark.heavy
@pytest.mark.timeout(300)
def test_token_counts_with_embedded_tokenizer(bundle_dir: Path) -> None:
    env = BundleEnv(bundle_dir, sandbox="inprocess", tokenizer="smollm2")
    try:
        _, info = env.reset(seed=0)
        first = info["tokens"]["prompt"]
        assert first > 50  # system + user + 5 tool schemas
        _, _, _, _, info = env.step(turn(call("get_note", {"key": "secret"})))
        assert info["tokens"]["prompt"] > first
    finally:
        env.close()


# -- step guarantees: order, overflow, budgets, ids, validation ----------------------------------

NAP_TOOLS = (
    TOOLS
    + '''

def nap(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    import time

    time.sleep(seconds)
    return "rested"
'''
)


def assert_replies_follow_calls(messages: list[dict]) -> None:
    """Every tool call is answered exactly once, right after its assistant message (before any
    user message), and no tool message answers a call that is not right before it."""
    i = 0
    while i < len(messages):
        m = messages[i]
        if m["role"] == "tool":
            raise AssertionError(f"orphan tool message at {i}: {m}")
        i += 1
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            replies = []
            while i < len(messages) and messages[i]["role"] == "tool":
                replies.append(messages[i]["tool_call_id"])
                i += 1
            assert replies == ids, (ids, replies)


def test_turn_notes_come_after_the_tool_replies(env: BundleEnv) -> None:
    env.reset(seed=0)
    action = {
        "role": "assistant",
        "content": 5,
        "tool_calls": [call("list_keys", {}, "a"), call("nope", {}, "b")],
    }
    obs, *_, info = env.step(action)
    assert [m["role"] for m in obs["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
    ]
    assert obs["messages"][-1]["content"].startswith("Error: 'content' must be a string")
    assert_replies_follow_calls(obs["messages"])
    assert info["errors"] == {"bad_message": 1, "unknown_tool": 1}


def test_discard_all_after_a_malformed_turn_leaves_no_orphan(bundle_dir: Path) -> None:
    cm = ContextManager(policy="keep-all", overflow="discard-all", window=900)
    env = BundleEnv(bundle_dir, sandbox="inprocess", context=cm)
    try:
        env.reset(seed=0)
        for i in range(12):
            action = turn(call("shout", {"text": "abcdefgh", "times": 20}, f"s{i}"))
            action["content"] = 5  # a message-level problem every turn
            obs, *_, info = env.step(action)
            assert_replies_follow_calls(obs["messages"])
        assert info["context_compactions"], "discard-all should have fired"
        notices = [m for m in obs["messages"] if m["content"] == DISCARD_NOTICE]
        assert len(notices) == 1  # the model is told, once
    finally:
        env.close()


def test_summary_overflow_keeps_one_summary_and_records_index_history(bundle_dir: Path) -> None:
    calls: list[int] = []

    def summarizer(messages: list[dict]) -> str:
        calls.append(len(messages))
        return f"summary {len(calls)}"

    cm = ContextManager(policy="keep-all", overflow="summary", window=1500, summarizer=summarizer)
    env = BundleEnv(bundle_dir, sandbox="inprocess", context=cm)
    try:
        env.reset(seed=0)
        for i in range(40):
            obs, *_, info = env.step(turn(call("shout", {"text": "abcdefgh", "times": 3}, f"s{i}")))
            summaries = [m for m in obs["messages"] if str(m["content"]).startswith(SUMMARY_PREFIX)]
            assert len(summaries) <= 1, f"step {i}: summaries stacked"
            assert_replies_follow_calls(obs["messages"])
        assert 1 <= len(calls) <= 3  # re-initiated from the summary, not summarized every step
        records = info["context_compactions"]
        assert len({r["index"] for r in records}) == len(records)  # each message dropped once
        for record in records:  # indices into env.history: the calls and results summarized
            assert env.history[record["index"]]["role"] in ("assistant", "tool")
        assert max(r["index"] for r in records) > len(obs["messages"])
    finally:
        env.close()


def test_time_budget_is_checked_between_calls(bundle_dir: Path, tmp_path: Path) -> None:
    env = BundleEnv(
        make_notes_bundle(tmp_path / "nap", tools=NAP_TOOLS), sandbox="inprocess", time_budget_s=0.3
    )
    try:
        env.reset(seed=0)
        *_, truncated, info = env.step(
            turn(*(call("nap", {"seconds": 0.2}, f"n{i}") for i in range(8)))
        )
        assert truncated and info["truncated_by"] == "time_budget"
        assert info["tool_calls"] <= 2 and info["errors"]["time_budget"] >= 6  # not all 8 ran
    finally:
        env.close()


@pytest.mark.timeout(60)
def test_call_timeout_is_bounded_by_the_time_left(tmp_path: Path) -> None:
    env = BundleEnv(
        make_notes_bundle(tmp_path / "nap", tools=NAP_TOOLS), sandbox="bwrap", time_budget_s=1.0
    )
    try:
        env.reset(seed=0)
        obs, *_, info = env.step(turn(call("nap", {"seconds": 8}, "n1")))
        assert info["errors"] == {"timeout": 1}  # cut at the ~1 s left, not the 10 s call limit
        assert env.sandbox.limits.call_timeout_s == 10.0  # restored for later calls
    finally:
        env.close()


def test_integral_float_for_int_parameter_is_refused(env: BundleEnv) -> None:
    env.reset(seed=0)
    obs, *_, info = env.step(turn(call("shout", '{"text": "ab", "times": 2.0}')))
    assert info["errors"] == {"bad_arguments": 1}
    assert "2.0 is not of type 'integer'" in obs["messages"][-1]["content"]


def test_fallback_ids_are_unique_across_turns(env: BundleEnv) -> None:
    env.reset(seed=0)
    same = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "list_keys", "arguments": "{}"}}],
    }
    env.step(same)
    obs, *_ = env.step(same)
    ids = [m["tool_call_id"] for m in obs["messages"] if m["role"] == "tool"]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert_replies_follow_calls(obs["messages"])


@pytest.mark.parametrize("depth", [65, 400, 800])
def test_deeply_nested_arguments_get_an_error_reply(env: BundleEnv, depth: int) -> None:
    env.reset(seed=0)
    obs, *_, info = env.step(turn(call("get_note", '{"key": ' + "[" * depth + "]" * depth + "}")))
    assert (
        obs["messages"][-1]["role"] == "tool"
        and "nested more than 64 levels" in obs["messages"][-1]["content"]
    )
    assert info["errors"] == {"bad_arguments": 1}
