"""The LLM synthesis agent against an OpenAI-compatible HTTP server that enforces the message rules
(as OpenAI-style APIs do), and the fence parser on replies that real models write."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_synth_llm_agent import DATA, TOOLS, task

from envgym.models.http_client import RetryPolicy
from envgym.models.openai_http import OpenAIPolicy
from envgym.synth_agents import code_blocks as cb
from envgym.synth_agents.llm_agent import LLMAgent, LLMConfig
from envgym.synth_agents.pipeline import run_synthesis
from envgym.synth_agents.recorder import SynthRecorder

pytestmark = pytest.mark.timeout(120)
ROLES = {"system", "user", "assistant", "tool"}


def message_rule_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What an OpenAI-style API rejects: every assistant tool call answered by exactly one tool
    message with its id before the next non-tool message; no tool message without a call; valid roles."""
    problems: list[str] = []
    pending: list[str] = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ROLES:
            problems.append(f"messages[{i}]: invalid role {role!r}")
            continue
        if role == "tool":
            tid = m.get("tool_call_id")
            if tid not in pending:
                problems.append(f"messages[{i}]: tool message {tid!r} answers no pending tool call")
            else:
                pending.remove(tid)
            continue
        if pending:
            problems.append(f"messages[{i}] ({role}): tool calls {pending} have no tool message")
            pending = []
        for call in m.get("tool_calls") or [] if role == "assistant" else []:
            fn = call.get("function") or {}
            if (
                not call.get("id")
                or call.get("type") != "function"
                or not isinstance(fn.get("arguments"), str)
            ):
                problems.append(f"messages[{i}]: malformed tool call {call}")
            pending.append(call.get("id"))
    if pending:
        problems.append(f"the last tool calls {pending} have no tool message")
    return problems


class RuleServer:
    """A chat-completions server on 127.0.0.1 that answers 400 to a request breaking the rules,
    else the next scripted reply (text, or tool calls)."""

    def __init__(self, replies: list[str | list[tuple[str, dict[str, Any]]]]) -> None:
        self.replies = list(replies)
        self.violations: list[list[str]] = []
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests += 1
                problems = message_rule_problems(body["messages"])
                if problems:
                    server.violations.append(problems)
                    self._send(
                        400,
                        {
                            "error": {
                                "message": "; ".join(problems),
                                "type": "invalid_request_error",
                            }
                        },
                    )
                    return
                reply = server.replies.pop(0) if server.replies else "I have nothing more to add."
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": reply if isinstance(reply, str) else None,
                }
                if not isinstance(reply, str):
                    message["tool_calls"] = [
                        {
                            "id": f"call_{server.requests}_{j}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                        for j, (name, args) in enumerate(reply)
                    ]
                finish = "stop" if isinstance(reply, str) else "tool_calls"
                self._send(
                    200,
                    {
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                    },
                )

            def _send(self, status: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> RuleServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture(autouse=True)
def _bwrap(require_backend) -> None:  # noqa: ANN001
    require_backend("bwrap")


def run_agent(tmp_path: Path, server: RuleServer, **config: Any) -> dict[str, Any]:
    policy = OpenAIPolicy(server.url, "double", retry=RetryPolicy(attempts=1))
    agent = LLMAgent("library loans", policy, model="double", config=LLMConfig(**config))
    try:
        run_synthesis(agent, n=1, seed=0, recorder=SynthRecorder(tmp_path / "out", None))
    finally:
        agent.close()
    return json.loads((tmp_path / "out" / "synth.jsonl").read_text().splitlines()[0])


def test_the_rule_checker_itself() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}}
        ],
    }
    answer = {"role": "tool", "tool_call_id": "a", "content": "1"}
    assert message_rule_problems([{"role": "user", "content": "hi"}, call, answer]) == []
    assert (
        "have no tool message"
        in message_rule_problems([call, {"role": "user", "content": "go on"}])[0]
    )
    assert (
        "answers no pending"
        in message_rule_problems([{"role": "user", "content": "hi"}, answer])[0]
    )
    assert "invalid role" in message_rule_problems([{"role": "robot", "content": "hi"}])[0]


def test_calls_past_the_tool_turn_limit_get_a_tool_message(tmp_path: Path) -> None:
    """The model keeps calling tools after "stop calling tools": those calls must still be answered,
    or the next request (the feedback round) is rejected by the API."""
    ls = [("list_files", {})]
    replies: list[Any] = [
        ls,
        ls,
        DATA,
        TOOLS,
        task(1800),
    ]  # 2 calls with max_tool_turns=1, then answers
    with RuleServer(replies) as server:
        record = run_agent(tmp_path, server, max_rounds=2, max_tool_turns=1, max_levels=0)
    assert server.violations == [], server.violations
    assert record["status"] == "kept", record["problems"]
    transcript = record["agent_info"]["transcript"]
    refused = [m for m in transcript if m["role"] == "tool" and m["content"].startswith("not run")]
    assert len(refused) == 1 and record["agent_info"]["tool_calls"] == 1


# -- fences ------------------------------------------------------------------------------------
def test_a_fence_inside_code_does_not_end_the_block() -> None:
    code = 'def solve(tools, task):\n    note = "use ```json``` blocks"  # ``` in a comment\n    return note'
    found = cb.blocks(
        f"Here:\n```python solution\n{code}\n```\nand\n```python verifier\ndef verify(s, t):\n    pass\n```"
    )
    assert [(b.label, b.code) for b in found] == [
        ("solution", code),
        ("verifier", "def verify(s, t):\n    pass"),
    ]
    assert cb.blocks("```python\ndef f(): pass")[0].code == "def f(): pass"  # a cut-off reply


def test_unlabelled_solution_and_verifier_blocks_are_distinct() -> None:
    solve = "def solve(tools, task):\n    tools.submit_result(answer_text='x')"
    verify = "def verify(submission, task):\n    return {'checks': []}"
    for reply in (
        f"```python\n{solve}\n```\n```python\n{verify}\n```",
        f"```python\n{verify}\n```\n```python\n{solve}\n```",
    ):
        roles = cb.pick_distinct(cb.blocks(reply), {"solution": "solve", "verifier": "verify"})
        assert (roles["solution"].code, roles["verifier"].code) == (solve, verify)  # type: ignore[union-attr]
    other = "def find(tools, task):\n    pass"
    check = "def judge(submission, task):\n    pass"
    roles = cb.pick_distinct(
        cb.blocks(f"```python\n{other}\n```\n```python\n{check}\n```"),
        {"solution": "solve", "verifier": "verify"},
    )
    assert (roles["solution"].code, roles["verifier"].code) == (other, check)  # type: ignore[union-attr]
    one = cb.pick_distinct(
        cb.blocks(f"```python\n{solve}\n```"), {"solution": "solve", "verifier": "verify"}
    )
    assert one["verifier"] is None  # one block is never both


def test_an_unlabelled_reply_synthesizes_end_to_end(tmp_path: Path) -> None:
    """The task stage answered with unlabelled python blocks (verifier first) still agrees."""
    reply = (
        task(1800)
        .replace("```python solution", "```python")
        .replace("```python verifier", "```python")
    )
    parts = reply.split("```python\n")
    swapped = parts[0] + "```python\n" + parts[2].rstrip() + "\n" + "```python\n" + parts[1]
    assert (
        cb.blocks(swapped)[1].code.lstrip().startswith("from envgym.runtime")
    )  # the verifier comes first
    with RuleServer([DATA, TOOLS, swapped]) as server:
        record = run_agent(tmp_path, server, max_rounds=1, max_levels=0)
    assert record["status"] == "kept", record["problems"]
