"""MCP servers as envgym toolsets: a hostile server that dies, hangs and answers garbage (docs/MCP.md).

The server is ``tests/mcp_hostile_server.py`` (raw JSON-RPC over stdio, no SDK, so its
misbehaviour is exactly what the test says); each start appends a line to a file, which is how
the tests see the restarts.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bundle_factory import make_notes_bundle

from envgym.bundle_env import BundleEnv
from envgym.mcp.client import McpConnection, McpDied, ServerSpec
from envgym.mcp.sandbox import McpSandbox
from envgym.mcp.toolset import McpToolset
from envgym.sandbox import open_sandbox
from envgym.sandbox.base import CallError

HOSTILE = Path(__file__).with_name("mcp_hostile_server.py")


def _hostile(starts: Path, **kw) -> McpToolset:
    spec = ServerSpec(
        command=(sys.executable, str(HOSTILE)), env={"HOSTILE_STARTS": str(starts)}, name="hostile"
    )
    return McpToolset(spec, **kw)


def _starts(path: Path) -> int:
    return path.read_text().count("start") if path.exists() else 0


@pytest.fixture
def toolset(tmp_path: Path):
    ts = _hostile(tmp_path / "starts", call_timeout_s=2.0)
    yield ts
    ts.close()


@pytest.mark.timeout(30)
def test_tools_become_specs_and_calls_outcomes(toolset: McpToolset) -> None:
    specs = {s.name: s for s in toolset.describe_tools()}
    assert set(specs) == {"echo", "fail", "die", "hang", "malformed", "pid"}
    assert specs["echo"].parameters["properties"] == {"text": {"type": "string"}}
    echoed = toolset.call_tool("echo", {"text": "hi"})
    assert echoed.ok and echoed.rendered == "hi"
    failed = toolset.call_tool("fail", {})  # isError: the server's own message, no restart
    assert (
        not failed.ok
        and failed.error is CallError.EXCEPTION
        and failed.message == "it failed on purpose"
    )
    assert toolset.restarts == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("tool", "error"),
    [("die", CallError.CRASH), ("hang", CallError.TIMEOUT), ("malformed", CallError.PROTOCOL)],
)
def test_bad_server_is_an_error_and_is_restarted(
    toolset: McpToolset, tmp_path: Path, tool: str, error: CallError
) -> None:
    toolset.describe_tools()
    assert _starts(tmp_path / "starts") == 1
    began = time.monotonic()
    outcome = toolset.call_tool(tool, {})
    assert not outcome.ok and outcome.error is error and "restarted" in outcome.message
    assert time.monotonic() - began < 15  # the 2 s call timeout, plus stopping the hung process
    assert (
        _starts(tmp_path / "starts") == 2 and toolset.restarts == 1
    )  # restarted for the next call
    after = toolset.call_tool("echo", {"text": "still here"})
    assert after.ok and after.rendered == "still here"


@pytest.mark.timeout(30)
def test_a_server_that_cannot_start_is_reported(tmp_path: Path) -> None:
    with pytest.raises(McpDied, match="could not be started"):
        McpConnection(
            ServerSpec(command=(str(tmp_path / "no-such-server"),), name="ghost"),
            connect_timeout_s=10,
        )
    quits = "import sys; print('no repository at /x', file=sys.stderr); sys.exit(1)"
    with pytest.raises(
        McpDied, match="could not be started.*stderr: no repository at /x"
    ):  # says why
        McpConnection(
            ServerSpec(command=(sys.executable, "-c", quits), name="quitter"), connect_timeout_s=10
        )


@pytest.mark.timeout(60)
def test_env_over_mcp_tools_validates_and_turns_failures_into_observations(tmp_path: Path) -> None:
    bundle = make_notes_bundle(tmp_path / "notes")
    starts = tmp_path / "starts"
    box = McpSandbox(
        open_sandbox(bundle, backend="inprocess"),
        [_hostile(starts, prefix="h_", call_timeout_s=2.0)],
    )
    env = BundleEnv(bundle, sandbox=box)
    try:
        obs, _ = env.reset(options={"task": "secret"})
        names = {t["function"]["name"] for t in obs["tools"]}
        assert {"get_note", "submit_result", "h_echo", "h_die"} <= names

        def call(name: str, args: dict, i: int) -> tuple[str, dict]:
            action = {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            }
            obs, _, terminated, truncated, info = env.step(action)
            assert not (terminated or truncated)
            return obs["messages"][-1]["content"], info

        before = _starts(starts)
        text, info = call("h_echo", {"text": 5}, 1)  # the env's dispatcher rejects it: never sent
        assert "invalid arguments for h_echo" in text and info["errors"] == {"bad_arguments": 1}
        assert _starts(starts) == before
        text, _ = call("h_echo", {"text": "ping"}, 2)
        assert text == "ping"
        text, info = call("h_die", {}, 3)
        assert text.startswith("Error: h_die failed (crash)") and info["errors"]["crash"] == 1
        text, info = call("h_hang", {}, 4)
        assert text.startswith("Error: h_hang failed (timeout)") and info["errors"]["timeout"] == 1
        text, _ = call("h_echo", {"text": "pong"}, 5)  # restarted for the next call
        assert text == "pong"
        _, reward, terminated, _, _ = env.step(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c6",
                        "type": "function",
                        "function": {
                            "name": "submit_result",
                            "arguments": json.dumps({"answer_text": "tangerine"}),
                        },
                    }
                ],
            }
        )
        assert terminated and reward == 1.0
    finally:
        env.close()
    assert not box.toolsets[0].running


@pytest.mark.timeout(60)
def test_a_state_bound_server_is_restarted_on_the_fresh_state_each_episode(tmp_path: Path) -> None:
    bundle = make_notes_bundle(tmp_path / "notes")
    starts = tmp_path / "starts"
    spec = ServerSpec(
        command=(sys.executable, str(HOSTILE), "{state_dir}"), env={"HOSTILE_STARTS": str(starts)}
    )
    toolset = McpToolset(spec)
    box = McpSandbox(open_sandbox(bundle, backend="inprocess"), [toolset])
    env = BundleEnv(bundle, sandbox=box)
    try:
        listed = _starts(starts)  # once, on a scratch copy of the bundle's state, to list tools
        assert listed == 1
        env.reset()
        first = box.state_dir
        assert toolset.spec.bind(first).command[-1] == str(first) and _starts(starts) == 2
        env.reset()  # no server memory survives into the next episode
        assert _starts(starts) == 3
    finally:
        env.close()


def _serve_http(bundle: Path, port: int, log: Path) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "envgym.cli",
        "serve-mcp",
        str(bundle),
        "--sandbox",
        "inprocess",
        "--transport",
        "http",
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(
        argv,
        cwd=Path(__file__).resolve().parents[1],
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)


@pytest.mark.timeout(90)
def test_http_server_as_toolset_survives_the_server_dying(tmp_path: Path) -> None:
    """envgym's own serve-mcp, consumed over streamable HTTP; killed mid-episode, then back."""
    bundle = make_notes_bundle(tmp_path / "notes")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "server.txt"
    proc = _serve_http(bundle, port, log)
    toolset = McpToolset(
        ServerSpec(url=f"http://127.0.0.1:{port}/mcp", name="remote"), call_timeout_s=10
    )
    try:
        assert {"reset", "get_note", "submit"} <= {s.name for s in toolset.describe_tools()}
        assert toolset.call_tool("reset", {}).ok
        assert toolset.call_tool("get_note", {"key": "secret"}).rendered == "tangerine"
        proc.kill()
        proc.wait(10)
        dead = toolset.call_tool("get_note", {"key": "secret"})
        assert not dead.ok and dead.error is CallError.CRASH and "restarted" in dead.message
        proc = _serve_http(bundle, port, log)  # the server comes back: the next call reconnects
        again = toolset.call_tool("reset", {})
        assert again.ok and "note called 'secret'" in again.rendered
    finally:
        toolset.close()
        proc.terminate()
        proc.wait(15)


@pytest.mark.timeout(30)
def test_calls_from_inside_a_running_event_loop(toolset: McpToolset) -> None:
    """A sync call made by async code (which blocks its loop, as any sync call does) still works."""
    import asyncio

    async def main() -> list[str]:
        return [toolset.call_tool("echo", {"text": t}).rendered for t in ("a", "b")]

    assert asyncio.run(main()) == ["a", "b"]
    assert toolset.call_tool("echo", {"text": "c"}).rendered == "c"  # and from a plain thread again


@pytest.mark.timeout(30)
def test_a_server_killed_between_calls(toolset: McpToolset, tmp_path: Path) -> None:
    """Death while idle is noticed by the next call (an error, not a hang), then restarted."""
    import os
    import signal

    pid = int(toolset.call_tool("pid", {}).rendered)
    os.kill(pid, signal.SIGKILL)
    began = time.monotonic()
    dead = toolset.call_tool("echo", {"text": "anyone?"})
    assert not dead.ok and dead.error is CallError.CRASH and time.monotonic() - began < 10
    assert toolset.call_tool("echo", {"text": "back"}).rendered == "back"
    assert int(toolset.call_tool("pid", {}).rendered) != pid
