"""RoutedSandbox: routed tools to their handlers, the rest to the inner sandbox; per-call limits
reach the sandbox that runs the call, through any wrapper."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from bundle_factory import TOOLS, make_notes_bundle

from envgym.bundle_env import BundleEnv
from envgym.envs.search_qa.env import SearchSandbox
from envgym.sandbox import CallOutcome, Limits, open_sandbox
from envgym.sandbox.base import call_limit
from envgym.sandbox.routed import RoutedSandbox

NAP = '''

def nap(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    import time

    time.sleep(seconds)
    return "rested"
'''

SEARCH_STUBS = '''

def search(query: str) -> str:
    """Search.

    Args:
        query: what.
    """
    return "stand-in"


def open(doc_id: str) -> str:
    """Open.

    Args:
        doc_id: which.
    """
    return "stand-in"


def find(doc_id: str, pattern: str) -> str:
    """Find.

    Args:
        doc_id: which.
        pattern: what.
    """
    return "stand-in"
'''


def turn(name: str, args: dict[str, Any]) -> dict[str, Any]:
    call = {"id": "c1", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def test_call_limit_is_the_least_of_the_own_and_the_requested() -> None:
    assert call_limit(10.0, None) == 10.0
    assert call_limit(10.0, 1.5) == 1.5
    assert call_limit(2.0, 30.0) == 2.0


def test_routes_answer_their_tools_and_the_rest_goes_inside(tmp_path: Path) -> None:
    inner = open_sandbox(make_notes_bundle(tmp_path / "b"), backend="inprocess",
                         limits=Limits(call_timeout_s=7.0))  # fmt: skip
    seen: list[tuple[dict[str, Any], float | None]] = []

    def shout(arguments: dict[str, Any], timeout_s: float | None) -> CallOutcome:
        seen.append((arguments, timeout_s))
        return CallOutcome(ok=True, value="routed")

    box = RoutedSandbox(inner, {"shout": shout})
    try:
        assert box.limits is inner.limits and box.bundle_dir == inner.bundle_dir
        assert [s.name for s in box.describe_tools()] == [s.name for s in inner.describe_tools()]
        box.reset(tmp_path / "b" / "state")
        assert box.call_tool("shout", {"text": "a"}, timeout_s=0.5).value == "routed"
        assert box.call_tool("shout", {"text": "b"}).value == "routed"
        assert seen == [({"text": "a"}, 0.5), ({"text": "b"}, None)]
        assert box.call_tool("get_note", {"key": "secret"}).value == "tangerine"  # inner's
        task = {"metadata": {"key": "secret"}}
        solved = box.solve("solve_secret", task, "submit_result")
        assert solved.submission == {"answer_text": "tangerine"}
        report = box.verify("verify_secret", {"answer_text": "tangerine"}, task)
        assert all(c["passed"] for c in report.value["checks"])
    finally:
        box.close()
    assert inner._runner.state is None  # closed through the wrapper


def test_a_limit_per_call_reaches_the_inner_sandbox(tmp_path: Path) -> None:
    calls: list[float | None] = []

    class Inner:
        bundle_dir = tmp_path
        limits = Limits()

        def call_tool(self, name: str, arguments: dict[str, Any], *,
                      timeout_s: float | None = None) -> CallOutcome:  # fmt: skip
            calls.append(timeout_s)
            return CallOutcome(ok=True, value=name)

    box = RoutedSandbox(Inner())  # type: ignore[arg-type]
    assert box.call_tool("anything", {}, timeout_s=0.25).value == "anything"
    assert box.call_tool("anything", {}).ok
    assert calls == [0.25, None]


@pytest.mark.timeout(60)
def test_a_wrapped_sandbox_keeps_the_episode_time_budget(tmp_path: Path) -> None:
    """A wrapper (the search router) over a jailed bundle: a 3 s tool under a 1 s episode budget
    is cut at the ~1 s left, not run to its end under the inner sandbox's 10 s call limit."""
    bundle = make_notes_bundle(tmp_path / "nap", tools=TOOLS + NAP + SEARCH_STUBS)
    box = SearchSandbox(open_sandbox(bundle, backend="bwrap"), tools=object())  # type: ignore[arg-type]
    env = BundleEnv(bundle, sandbox=box, time_budget_s=1.0)
    try:
        env.reset(seed=0)
        started = time.monotonic()
        *_, info = env.step(turn("nap", {"seconds": 3}))
        took = time.monotonic() - started
        assert info["errors"] == {"timeout": 1}
        assert took < 3.0  # cut at ~1 s (plus the worker's kill), before the nap ends
    finally:
        env.close()


def test_an_mcp_call_gets_the_least_of_its_limits(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from envgym.mcp.sandbox import McpSandbox
    from envgym.sandbox import ToolSpec

    class Toolset:  # the parts of McpToolset that McpSandbox uses
        spec = SimpleNamespace(name="fake", uses_state_dir=False)
        call_timeout_s, running = 30.0, True
        got: list[float | None] = []

        def describe_tools(self, listing_dir: Path) -> list[ToolSpec]:
            return [ToolSpec("remote", "", {"type": "object", "properties": {}})]

        def call_tool(self, name: str, arguments: dict[str, Any], *,
                      timeout_s: float | None = None) -> CallOutcome:  # fmt: skip
            self.got.append(timeout_s)
            return CallOutcome(ok=True, value=name)

        def close(self) -> None:
            pass

    inner = open_sandbox(make_notes_bundle(tmp_path / "b"), backend="inprocess",
                         limits=Limits(call_timeout_s=7.0))  # fmt: skip
    toolset = Toolset()
    box = McpSandbox(inner, [toolset])  # type: ignore[list-item]
    try:
        assert box.call_tool("remote", {}).value == "remote"  # routes known without describe
        assert box.call_tool("remote", {}, timeout_s=0.5).ok
        assert box.call_tool("remote", {}, timeout_s=99.0).ok
        assert toolset.got == [7.0, 0.5, 7.0]  # inner's 7 s < the toolset's 30 s
        assert box.call_tool("shout", {"text": "a"}).value == "A"  # a bundle tool: inner
    finally:
        box.close()
