"""Hypothesis: no action, however malformed, escapes ``env.step`` as an exception, and every
observation keeps the message order chat templates need."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bundle_factory import make_notes_bundle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bundle_env import assert_replies_follow_calls

from envgym.bundle_env import BundleEnv
from envgym.context import ContextManager
from envgym.core import INFO_KEYS

json_leaf = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
)
junk = st.recursive(
    json_leaf,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=12,
)


def _nest(leaf: object, depth: int, as_dict: bool) -> object:
    for _ in range(depth):
        leaf = {"k": leaf} if as_dict else [leaf]
    return leaf


# st.recursive alone stays a few levels deep; RecursionError lived at depth 400-800 (item 4).
deep = st.builds(_nest, json_leaf, st.integers(50, 900), st.booleans())
deep_text = st.builds(
    lambda d, key: "{" + f'"{key}": ' + "[" * d + "]" * d + "}",
    st.integers(50, 1200),
    st.sampled_from(["key", "value", "text", "x"]),
)
tool_names = st.sampled_from(
    ["get_note", "set_note", "shout", "list_keys", "submit_result", "nope", ""]
) | st.text(max_size=12)
arguments = (
    st.text(max_size=60)
    | st.dictionaries(
        st.sampled_from(["key", "value", "text", "times", "answer_text", "x"]),
        json_leaf | deep,
        max_size=3,
    )
    | junk
    | deep_text
)
function = st.fixed_dictionaries({"name": tool_names | junk, "arguments": arguments}) | junk
tool_call = (
    st.fixed_dictionaries(
        {"id": st.text(max_size=8) | junk, "type": st.just("function") | junk, "function": function}
    )
    | junk
)
assistant = st.fixed_dictionaries(
    {"role": st.just("assistant") | junk},
    optional={
        "content": st.text(max_size=80) | junk,
        "reasoning_content": st.text(max_size=40) | junk,
        "tool_calls": st.lists(tool_call, max_size=4) | junk,
    },
)
raw_text = st.text(max_size=200) | st.builds(
    lambda body: f"<tool_call>{body}</tool_call>", st.text(max_size=80)
)
actions = assistant | raw_text | junk


CONTEXTS = {
    "retention": lambda: ContextManager(),
    "discard-all": lambda: ContextManager(policy="keep-all", overflow="discard-all", window=700),
    "discard-75": lambda: ContextManager(
        policy="discard-reasoning", overflow="discard-75", window=700
    ),
    "summary": lambda: ContextManager(
        overflow="summary", window=700, summarizer=lambda h: f"{len(h)} messages"
    ),
}


@pytest.fixture(scope="module", params=sorted(CONTEXTS))
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    root = make_notes_bundle(tmp_path_factory.mktemp("fuzz") / "b")
    env = BundleEnv(root, sandbox="inprocess", max_turns=10_000, context=CONTEXTS[request.param]())
    yield env
    env.close()


@pytest.mark.timeout(300)
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(action=actions)
def test_step_never_raises(env: BundleEnv, action: object) -> None:
    if env._done:
        env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)  # type: ignore[arg-type]
    assert env.observation_space.contains(obs)
    assert all(k in info for k in INFO_KEYS)
    assert "internal_error" not in info["errors"]  # the env's safety net must stay unused
    assert isinstance(reward, float)
    assert_replies_follow_calls(obs["messages"])  # under every policy and overflow strategy
    assert_replies_follow_calls(env.history)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(["get_note", "set_note", "shout", "list_keys", "submit_result"]),
    key=st.sampled_from(["key", "value", "text", "times", "answer_text", "x"]),
    value=deep,
    as_text=st.booleans(),
)
def test_deep_arguments_of_real_tools_get_a_reply(
    env: BundleEnv, name: str, key: str, value: object, as_text: bool
) -> None:
    """Every example reaches argument validation (the random mix above rarely does)."""
    if env._done:
        env.reset(seed=0)
    arguments: object = {key: value}
    if as_text:
        try:
            arguments = json.dumps(arguments)
        except RecursionError:
            arguments = {key: value}
    action = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "d", "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }
    obs, *_, info = env.step(action)
    reply = env.history[-1]  # the observation may end in a compaction notice instead
    assert reply["role"] == "tool" and reply["content"].startswith("Error"), reply
    assert "internal_error" not in info["errors"]
    assert_replies_follow_calls(env.history)


@pytest.mark.heavy
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(action=actions)
def test_step_never_raises_in_bwrap(
    tmp_path_factory: pytest.TempPathFactory, action: object
) -> None:
    env = _bwrap_env(tmp_path_factory)
    if env._done:
        env.reset(seed=0)
    obs, *_ = env.step(action)  # type: ignore[arg-type]
    assert env.observation_space.contains(obs)


_BWRAP: dict[str, BundleEnv] = {}


def _bwrap_env(factory: pytest.TempPathFactory) -> BundleEnv:
    if "env" not in _BWRAP:
        root: Path = factory.mktemp("fuzzb") / "b"
        _BWRAP["env"] = BundleEnv(make_notes_bundle(root), sandbox="bwrap", max_turns=10_000)
    return _BWRAP["env"]


def teardown_module() -> None:
    for env in _BWRAP.values():
        env.close()
