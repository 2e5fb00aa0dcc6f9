"""Bad backends through the real OpenAI-compatible HTTP policy, against a real loopback server:
server down, timeouts, HTTP 500s, truncated JSON, replies with no content are retried, then the
episode ends errored — listed in the summary and the report — and the run goes on."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from local_http import LocalServer

from envgym.evaluate import EvalConfig, ModelRef, ModelSpecError, evaluate, load_policy, model_ref
from envgym.policy import SamplingParams
from envgym.report import report_data
from envgym.rollout import RolloutBudget
from envgym.store import Store

GOOD_TASK = "trip-001-d1"  # the server answers this task's requests well, the others badly
ATTEMPTS = 2


def good_reply() -> bytes:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_all_cities", "arguments": "{}"},
    }
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    return json.dumps(
        {
            "choices": [{"message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 7},
        }
    ).encode()


BAD = {
    "http500": (500, b'{"error": "internal"}'),
    "truncated": (200, b'{"choices": [{"message": {"role": "assist'),
    "empty": (
        200,
        b'{"choices": [{"message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]}',
    ),
    "hang": (200, b""),
}


class Server:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.hits: Counter[str] = Counter()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][1]["content"]
                good = "October 5th to October 6th" in prompt  # trip-001-d1's prompt
                outer.hits["good" if good else "bad"] += 1
                if good:
                    status, payload = 200, good_reply()
                else:
                    status, payload = BAD[outer.mode]
                    if outer.mode == "hang":
                        time.sleep(1.5)  # longer than the client's timeout
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.local = LocalServer(Handler)
        self.url = f"{self.local.base}/v1"

    def close(self) -> None:
        self.local.stop()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    s = Server(request.param)
    yield s
    s.close()


def http_policy(url: str) -> object:
    from envgym.models.http_client import RetryPolicy
    from envgym.models.openai_http import OpenAIPolicy

    return OpenAIPolicy(
        url, "test-model", retry=RetryPolicy(attempts=ATTEMPTS, base_delay=0.01, timeout=0.5)
    )


CONFIG = EvalConfig(
    k=1,
    limit=3,
    concurrency=3,
    params=SamplingParams(max_tokens=16),
    budget=RolloutBudget(max_turns=2),
)


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("http500", "HTTP 500"),
        ("truncated", "not valid JSON"),
        ("empty", "has no content, reasoning or tool calls"),
        ("hang", "timed out after 0.5 s"),
    ],
    indirect=["server"],
)
def test_a_bad_server_reply_is_retried_then_the_episode_errors(
    server: Server, message: str, tmp_path: Path
) -> None:
    run = evaluate(
        "trip-planning-v0",
        ModelRef(server.url, "http", "http:test"),
        CONFIG,
        store=Store(f"sqlite:///{tmp_path / 'b.db'}"),
        policy=http_policy(server.url),
    )  # type: ignore[arg-type]
    by_task = {e.task_id: e for e in run.episodes}
    good = by_task.pop(GOOD_TASK)
    assert good.error is None and good.turns == 2 and good.tool_calls == 2  # the run went on
    assert len(by_task) == 2
    for e in by_task.values():
        assert (
            e.error == "policy"
            and message in e.error_message
            and f"failed after {ATTEMPTS} tries" in e.error_message
        )
        assert e.turns == 0
    assert server.hits["bad"] == 2 * ATTEMPTS  # each failing episode's first turn, retried
    s = run.summary
    assert (s.errored, s.errors_by_kind, s.excluded, s.episodes) == (2, {"policy": 2}, {1: 2}, 3)
    listed = [e for e in report_data(s, run.episodes)["episodes"] if e["error"]]
    assert sorted(e["task_id"] for e in listed) == sorted(by_task)


def test_server_down_errors_every_episode_but_finishes_the_run(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    store = Store(f"sqlite:///{tmp_path / 'd.db'}")
    ref = ModelRef(url, "http", "http:down")
    # Without a stated window the run cannot be keyed (the window is part of the key): a clear
    # error before anything is written, not an evaluation keyed differently from its resumption.
    with pytest.raises(ModelSpecError, match="cannot read the context window .*--context-window"):
        evaluate("trip-planning-v0", ref, CONFIG, store=store, policy=http_policy(url))  # type: ignore[arg-type]
    run = evaluate(
        "trip-planning-v0",
        ref,
        replace(CONFIG, context_window=4096),
        store=store,
        policy=http_policy(url),
    )  # type: ignore[arg-type]
    assert run.summary.episodes == 3 and run.summary.errored == 3
    assert all(e.error == "policy" and "ConnectError" in e.error_message for e in run.episodes)
    assert run.summary.pass_at_k == {}  # nothing valid to score: no number is made up


def test_an_unreachable_url_without_a_model_name_is_a_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    with pytest.raises(
        ModelSpecError, match="cannot learn which model .* serves .*name it as URL#model"
    ):
        load_policy(model_ref(url))


def test_jobs_that_need_a_language_model_refuse_scripted_agents() -> None:
    from envgym.evaluate import load_language_model

    for spec in ("gold", "random"):
        with pytest.raises(
            ModelSpecError,
            match=f"'{spec}' is a scripted agent, not a language model that can judge",
        ):
            load_language_model(spec, "judge")
