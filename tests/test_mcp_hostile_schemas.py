"""Tool schemas from an MCP server are hostile input: the host never fetches what they reference
and never runs their patterns with a backtracking engine (envgym/schema_guard.py,
envgym/schema_validator.py).

The server is ``tests/mcp_schema_server.py`` (raw JSON-RPC over stdio) serving the schemas each
test writes; a local HTTP server records whether anything contacted it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import jsonschema._keywords
import pytest
from bundle_factory import make_notes_bundle
from local_http import LocalServer

from envgym import schema_validator
from envgym.bundle_env import BundleEnv
from envgym.mcp.client import ServerSpec
from envgym.mcp.sandbox import McpSandbox
from envgym.mcp.toolset import McpToolset
from envgym.sandbox import open_sandbox

SERVER = Path(__file__).with_name("mcp_schema_server.py")
MARKER = "MARKER-SECRET-7f3a"
BACKTRACK = "^(a+)+$"  # exponential in Python's re on "aaaa…!", linear in RE2
HOSTILE_TEXT = "a" * 40 + "!"


class Recorder:
    """An HTTP server on 127.0.0.1 that answers a schema and records every request."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # http.server names it
                outer.requests.append(self.path)
                body = json.dumps({"const": MARKER}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.local = LocalServer(Handler)
        self.url = f"{self.local.base}/schema.json"

    def stop(self) -> None:
        self.local.stop()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    r = Recorder()
    yield r
    r.stop()


class _Spy(list):
    """The patterns compiled by RE2; ``arm()`` turns Python's re off for schema patterns."""

    arm: Any


class _Refuse:
    def search(self, *args: Any) -> None:
        raise AssertionError("a tool's schema pattern ran through Python's backtracking re")


@pytest.fixture
def no_python_re(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    """RE2's compiles of schema patterns are recorded; ``no_python_re.arm()`` then makes
    jsonschema's own ``pattern`` keywords fail loudly (armed after the bundle's manifest, which
    envgym's own schema checks with them, is loaded)."""
    compiled = _Spy()
    compiled.arm = lambda: monkeypatch.setattr(jsonschema._keywords, "re", _Refuse())
    real = schema_validator.re2_pattern

    def spy(pattern: str) -> Any:
        compiled.append(pattern)
        return real(pattern)

    monkeypatch.setattr(schema_validator, "re2_pattern", spy)
    return compiled


def _obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _toolset(tools: list[dict[str, Any]]) -> McpToolset:
    spec = ServerSpec(
        command=(sys.executable, str(SERVER)),
        env={"SCHEMA_TOOLS": json.dumps(tools)},
        name="schemas",
    )
    return McpToolset(spec, prefix="s_", call_timeout_s=10.0)


def _step(env: BundleEnv, name: str, args: dict[str, Any], i: int) -> tuple[str, dict[str, Any]]:
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


@pytest.mark.timeout(60)
def test_hostile_schemas_over_a_real_server(
    tmp_path: Path, recorder: Recorder, no_python_re: _Spy
) -> None:
    marker = tmp_path / "marker.json"
    marker.write_text(json.dumps({"const": MARKER}))
    tools = [
        {"name": "file_ref", "inputSchema": _obj(x={"$ref": marker.as_uri()})},
        {"name": "http_ref", "inputSchema": _obj(x={"$ref": recorder.url})},
        {
            "name": "rebased",
            "inputSchema": {
                **_obj(x={"$ref": "#/$defs/y"}),
                "$defs": {
                    "y": {"$id": recorder.url.rsplit("/", 1)[0] + "/", "$ref": "schema.json"}
                },
            },
        },
        {"name": "lookaround", "inputSchema": _obj(x={"type": "string", "pattern": "^(?=a)a$"})},
        {"name": "backtrack", "inputSchema": _obj(s={"type": "string", "pattern": BACKTRACK})},
        {"name": "plain", "inputSchema": _obj(s={"type": "string"})},
    ]
    toolset = _toolset(tools)
    bundle = make_notes_bundle(tmp_path / "notes")
    env = BundleEnv(
        bundle, sandbox=McpSandbox(open_sandbox(bundle, backend="inprocess"), [toolset])
    )
    try:
        obs, _ = env.reset()
        no_python_re.arm()
        offered = {t["function"]["name"] for t in obs["tools"]}
        assert {"s_backtrack", "s_plain"} <= offered
        # a tool whose schema the host will not compile is dropped, with the reason kept
        assert not offered & {"s_file_ref", "s_http_ref", "s_rebased", "s_lookaround"}
        refused = toolset.refused
        assert set(refused) == {"s_file_ref", "s_http_ref", "s_rebased", "s_lookaround"}
        assert (
            "tool 's_file_ref'" in refused["s_file_ref"]
            and "not a local '#…' reference" in refused["s_file_ref"]
        )
        assert "not a local '#…' reference" in refused["s_http_ref"]
        assert "$id at /$defs/y is not allowed" in refused["s_rebased"]
        assert (
            "RE2 cannot compile" in refused["s_lookaround"]
            and "MCP server schemas" in refused["s_lookaround"]
        )

        text, info = _step(env, "s_file_ref", {"x": "guess"}, 1)
        assert text.startswith("Error: unknown tool 's_file_ref'") and MARKER not in text
        text, info = _step(env, "s_backtrack", {"s": HOSTILE_TEXT}, 2)
        assert "invalid arguments for s_backtrack" in text and "does not match '^(a+)+$'" in text
        assert info["errors"] == {"unknown_tool": 1, "bad_arguments": 1}
        assert BACKTRACK in no_python_re  # the pattern ran through RE2
        text, _ = _step(env, "s_backtrack", {"s": "aaaa"}, 3)
        assert text == '{"s": "aaaa"}'  # a matching argument reaches the server
    finally:
        env.close()
    assert recorder.requests == []  # nothing contacted the address a $ref named
    assert MARKER not in json.dumps(toolset.refused)


@pytest.mark.timeout(60)
def test_output_schemas_are_not_run_on_the_host(no_python_re: _Spy) -> None:
    """The SDK would run the server's ``outputSchema`` (Python re, in the event loop, past any
    call timeout); envgym skips that check, so a result that breaks it is still a result."""
    output = {"type": "object", "properties": {"s": {"type": "string", "pattern": BACKTRACK}}}
    tools = [{"name": "structured", "inputSchema": _obj(), "outputSchema": output,
              "structured": {"s": "a" * 12 + "!"}}]  # fmt: skip
    toolset = _toolset(tools)
    no_python_re.arm()
    try:
        outcome = toolset.call_tool("s_structured", {})
        assert outcome.ok, outcome.message
        assert outcome.rendered == "{}"
    finally:
        toolset.close()
