"""envgym/step.py: the one step skeleton (hook order, budgets after the render, outcomes
returned), and what a truncated episode's last ``info`` carries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bundle_factory import make_notes_bundle

from envgym.actions import NormalizedAction, normalize_action
from envgym.bundle_env import BundleEnv
from envgym.step import GOES_ON, EnvBudgets, Outcome, run_step


class Script:
    """Hooks that record the order they ran in and answer as told."""

    def __init__(self, *, result: str | None = None, nudged: str | None = None,
                 budget: str | None = None) -> None:  # fmt: skip
        self.result, self.nudged, self.budget = result, nudged, budget
        self.order: list[str] = []

    def _read(self, action: Any) -> NormalizedAction:
        self.order.append("read")
        return normalize_action(action)

    def _answer_turn(self, parsed: NormalizedAction) -> str | None:
        self.order.append("answer")
        return self.result

    def _nudge(self, parsed: NormalizedAction) -> str | None:
        self.order.append("nudge")
        return self.nudged

    def _observe(self) -> dict[str, list]:
        self.order.append("render")
        return {"messages": [], "tools": []}

    def _budget_outcome(self) -> Outcome:
        self.order.append("budgets")
        return Outcome(self.budget) if self.budget else GOES_ON

    def _finish(self, result: str | None, outcome: Outcome) -> tuple[float, dict[str, Any]]:
        self.order.append("finish")
        return (1.0 if result else 0.0), {"report": {"result": result}}

    def _step_info(self, components: dict[str, float]) -> dict[str, Any]:
        return {"reward_components": components}


CALL = {"role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "f", "arguments": "{}"}}]}  # fmt: skip
TEXT = {"role": "assistant", "content": "hello"}


def test_a_turn_with_calls_is_read_answered_rendered_then_budgeted() -> None:
    hooks = Script()
    assert run_step(hooks, CALL)[1:4] == (0.0, False, False)
    assert hooks.order == ["read", "answer", "render", "budgets"]


def test_a_turn_without_calls_is_nudged_before_the_render() -> None:
    hooks = Script()
    run_step(hooks, TEXT)
    assert hooks.order == ["read", "answer", "nudge", "render", "budgets"]
    hooks = Script(nudged="final answer")  # a final answer ends the episode: no budget check
    _, reward, terminated, truncated, info = run_step(hooks, TEXT)
    assert (reward, terminated, truncated) == (1.0, True, False) and "truncated_by" not in info
    assert hooks.order == ["read", "answer", "nudge", "render", "finish"]


def test_a_malformed_turn_is_not_nudged() -> None:
    hooks = Script()
    run_step(hooks, {"role": "assistant", "content": 3})
    assert "nudge" not in hooks.order


def test_a_used_up_budget_is_an_outcome_graded_as_truncated() -> None:
    hooks = Script(budget="max_turns,context_window")
    _, reward, terminated, truncated, info = run_step(hooks, CALL)
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info == {"report": {"result": None}, "truncated_by": "max_turns,context_window"}
    assert hooks.order == ["read", "answer", "render", "budgets", "finish"]


def test_budgets_return_their_outcome() -> None:
    budgets = EnvBudgets(max_turns=2, max_tool_calls=5, context_window=10)
    fits = budgets.outcome(turns=1, tool_calls=1, started=0.0, prompt_tokens=lambda: 10)
    assert fits is GOES_ON and not fits.truncated
    over = budgets.outcome(turns=2, tool_calls=5, started=0.0, prompt_tokens=lambda: 11)
    assert over == Outcome("max_turns,max_tool_calls,context_window") and over.truncated


def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": "k", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


def test_a_truncated_episode_ends_with_a_report(tmp_path: Path) -> None:
    """core.Env's contract: the last step's info carries the ``report``, truncated or not."""
    env = BundleEnv(make_notes_bundle(tmp_path / "b"), sandbox="inprocess", max_turns=1)
    try:
        env.reset(seed=0)
        _, reward, terminated, truncated, info = env.step(call("list_keys", {}))
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["report"] == {
            "passed": False,
            "score": 0.0,
            "checks": [],
            "truncated_by": "max_turns",
        }
        assert info["truncated_by"] == "max_turns" and info["reward_components"] == {}
    finally:
        env.close()


@pytest.mark.parametrize("answer", ["tangerine", "plum"])
def test_a_submission_on_the_last_turn_is_graded_not_truncated(tmp_path: Path, answer: str) -> None:
    env = BundleEnv(make_notes_bundle(tmp_path / "b"), sandbox="inprocess", max_turns=1)
    try:
        env.reset(seed=0)
        _, reward, terminated, truncated, info = env.step(
            call("submit_result", {"answer_text": answer})
        )
        assert (terminated, truncated) == (True, False) and "truncated_by" not in info
        assert reward == (1.0 if answer == "tangerine" else 0.0)
        assert info["report"]["passed"] is (answer == "tangerine")
    finally:
        env.close()


def test_read_action_is_the_one_way_in() -> None:
    from envgym.actions import read_action
    from envgym.parsers import get_parser

    taken: set[str] = set()
    first = read_action(CALL, get_parser("hermes").parse, taken, "t1")
    again = read_action(CALL, get_parser("hermes").parse, taken, "t2")  # same id: renamed
    assert [c.id for c in first.tool_calls] == ["c1"] and [c.id for c in again.tool_calls] == [
        "c1_t2"
    ]
    raw = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    text = read_action(raw, get_parser("hermes").parse, taken, "t3")
    assert [c.name for c in text.tool_calls] == ["f"] and taken >= {"c1", "c1_t2"}
    assert read_action(7, get_parser("hermes").parse, taken, "t4").problems  # never raises
