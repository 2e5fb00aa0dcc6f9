"""`envgym serve-mcp`: an env served over MCP, driven by the `mcp` SDK's own client (docs/MCP.md).

Every test starts the real command in a subprocess (stdio, or streamable HTTP on 127.0.0.1 and
a free port) and stops it at the end.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from bundle_factory import make_notes_bundle
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from envgym.sandbox.bwrap import bwrap_available

REPO = Path(__file__).resolve().parents[1]


def _serve_argv(bundle: Path, *extra: str, sandbox: str = "inprocess") -> list[str]:
    return [
        sys.executable,
        "-m",
        "envgym.cli",
        "serve-mcp",
        str(bundle),
        "--sandbox",
        sandbox,
        *extra,
    ]


def _text(result) -> str:
    return "\n".join(block.text for block in result.content)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return make_notes_bundle(tmp_path / "notes")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sandbox", ["inprocess", "bwrap"])
def test_stdio_one_episode_with_env_errors_as_tool_errors(
    bundle: Path, tmp_path: Path, sandbox: str
) -> None:
    if sandbox == "bwrap" and not bwrap_available():
        pytest.skip("bubblewrap unavailable")
    argv = _serve_argv(bundle, sandbox=sandbox)
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO))

    async def main() -> None:
        with open(tmp_path / "stderr.txt", "w") as errlog:
            async with Client(
                stdio_client(params, errlog=errlog), read_timeout_seconds=30
            ) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                assert {"reset", "submit", "get_note", "set_note", "submit_result"} <= set(tools)
                assert tools["get_note"].input_schema["required"] == ["key"]  # the env's own schema

                early = await client.call_tool("get_note", {"key": "secret"})
                assert early.is_error and "call `reset` first" in _text(early)

                started = await client.call_tool("reset", {"task": "secret"})
                assert not started.is_error and "note called 'secret'" in _text(started)
                assert started.structured_content["submit_tool"] == "submit_result"

                bad = await client.call_tool("get_note", {"key": 3})  # the env's validator answers
                assert bad.is_error and "invalid arguments for get_note" in _text(bad)
                raised = await client.call_tool("get_note", {"key": "nope"})
                assert raised.is_error and "no note 'nope'" in _text(raised)
                unknown = await client.call_tool("no_such_tool", {})
                assert unknown.is_error and "unknown tool" in _text(unknown)

                ok = await client.call_tool("get_note", {"key": "secret"})
                assert not ok.is_error and _text(ok) == "tangerine"
                await client.call_tool("set_note", {"key": "secret", "value": "changed"})

                wrong = await client.call_tool("submit", {"arguments": {"answer_text": "plum"}})
                assert not wrong.is_error and wrong.structured_content["reward"] == 0.0
                over = await client.call_tool("get_note", {"key": "secret"})
                assert over.is_error and "episode is over" in _text(over)

                await client.call_tool("reset", {"task": "secret"})  # a fresh state copy
                fresh = await client.call_tool("get_note", {"key": "secret"})
                assert _text(fresh) == "tangerine"
                right = await client.call_tool(
                    "submit", {"arguments": {"answer_text": "tangerine"}}
                )
                assert (
                    right.structured_content["reward"] == 1.0
                    and right.structured_content["terminated"]
                )
                assert "Episode over: reward 1.0" in _text(right)

    anyio.run(main)


def _wait_listening(proc: subprocess.Popen, port: int, log: Path, timeout_s: float = 30.0) -> None:
    """Until serve-mcp accepts connections on ``port``; fails with its log if it exits or stalls."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, (
                "serve-mcp did not start listening\n" + log.read_text()
            )
            time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(bundle: Path, tmp_path: Path):
    port = _free_port()
    with open(tmp_path / "http-stderr.txt", "w") as errlog:
        proc = subprocess.Popen(
            _serve_argv(bundle, "--transport", "http", "--port", str(port)),
            cwd=REPO,
            stdout=errlog,
            stderr=errlog,
        )
        try:
            _wait_listening(proc, port, tmp_path / "http-stderr.txt")
            yield f"http://127.0.0.1:{port}/mcp", port, proc
        finally:
            proc.terminate()
            assert proc.wait(15) == 0  # SIGTERM is a clean exit (open envs closed)


@pytest.mark.timeout(60)
def test_http_sessions_are_separate_episodes(http_server) -> None:
    url, _, proc = http_server

    async def session(
        value: str, results: dict[str, str], entered: anyio.Event, other: anyio.Event
    ) -> None:
        async with Client(url, read_timeout_seconds=30) as client:
            assert not (await client.call_tool("reset", {"task": "secret"})).is_error
            await client.call_tool("set_note", {"key": "secret", "value": value})
            entered.set()
            await other.wait()  # both sessions have written before either reads
            results[value] = _text(await client.call_tool("get_note", {"key": "secret"}))

    async def main() -> dict[str, str]:
        results: dict[str, str] = {}
        a, b = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(session, "apple", results, a, b)
            tg.start_soon(session, "banana", results, b, a)
        return results

    assert anyio.run(main) == {"apple": "apple", "banana": "banana"}
    assert proc.poll() is None  # the server survived both sessions ending


@pytest.mark.timeout(30)
def test_http_binds_loopback_only(http_server) -> None:
    _, port, _ = http_server
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("ss is not available")
    local = [line.split()[3] for line in out.stdout.splitlines() if line.strip()]
    assert local == [f"127.0.0.1:{port}"]


@pytest.mark.timeout(60)
def test_http_sessionless_request_is_a_tool_error(http_server) -> None:
    url, _, proc = http_server

    async def main():
        async with Client(url, mode="2026-07-28", read_timeout_seconds=30) as client:  # no session
            assert "reset" in {t.name for t in (await client.list_tools()).tools}
            return await client.call_tool("reset", {})

    result = anyio.run(main)
    assert result.is_error and "one episode per MCP session" in _text(result)
    assert proc.poll() is None


@pytest.mark.timeout(60)
def test_submit_for_text_answers_and_misuse(tmp_path: Path) -> None:
    from bundle_factory import TASK

    from envgym.bundle_env import BundleEnv
    from envgym.mcp.episode import EpisodeDriver

    text_task = {**TASK, "id": "text", "submit_tool": None}
    bundle = make_notes_bundle(tmp_path / "notes", tasks=[TASK, text_task])
    driver = EpisodeDriver(BundleEnv(bundle, sandbox="inprocess"))
    try:
        assert driver.call("reset", {"task": "nope"}).is_error  # an unknown task
        assert driver.call("reset", {"seed": "x"}).is_error
        assert not driver.call("reset", {"task": "secret"}).is_error
        misuse = driver.call("submit", {"content": "tangerine"})  # this task has a submit tool
        assert misuse.is_error and "submit_result" in misuse.texts[0]
        assert not driver.call("reset", {"task": "text"}).is_error
        misuse = driver.call("submit", {"arguments": {"answer_text": "tangerine"}})
        assert misuse.is_error and "`content`" in misuse.texts[0]
        done = driver.call("submit", {"content": "tangerine"})  # verified as {"content": ...}
        assert not done.is_error and done.data["terminated"]
    finally:
        driver.close()


@pytest.mark.timeout(60)
def test_http_sessions_are_bounded(bundle: Path, tmp_path: Path) -> None:
    """Each session holds an env: past --max-sessions a new session is refused, open ones go on."""
    port = _free_port()
    log = tmp_path / "bounded.txt"
    proc = subprocess.Popen(
        _serve_argv(bundle, "--transport", "http", "--port", str(port), "--max-sessions", "1"),
        cwd=REPO,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_listening(proc, port, log)
        url = f"http://127.0.0.1:{port}/mcp"

        async def main() -> str:
            async with Client(url, read_timeout_seconds=30) as first:
                await first.call_tool("reset", {})
                with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces the 503 its own way
                    async with Client(url, read_timeout_seconds=10) as second:
                        await second.call_tool("reset", {})
                return _text(await first.call_tool("get_note", {"key": "secret"}))

        assert anyio.run(main) == "tangerine"
    finally:
        proc.terminate()
        proc.wait(15)
