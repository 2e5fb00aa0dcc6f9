"""A prompt past the model's window is the episode's outcome (truncated, reward 0, counted), and
``envgym eval`` runs the env with the model's window and an overflow strategy."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from test_rollout_doubles import ScriptedPolicy

from envgym.commands.eval import parse_context
from envgym.context import ContextWindowExceeded
from envgym.evaluate import EvalConfig, EvalError, ModelRef, evaluate
from envgym.policy import SamplingParams, Turn
from envgym.store import Store
from envgym.tokens import ApproxTokenCounter

pytestmark = pytest.mark.timeout(120)

DOUBLE = ModelRef("window-double", "test", "window-double:v1")
WRONG_PLAN = [
    {
        "time": "2025-10-05",
        "city": "Beijing",
        "hotel": "h",
        "afternoon_restaurant": "r",
        "afternoon_attraction": "a",
        "evening_restaurant": "e",
    }
]
# The trip-planning prompt (system, task, 15 tool schemas) is ~2040 approximate tokens; each
# get_all_cities call and its result add ~55.  Fourteen of them pass a 2400-token window.
SCRIPT = [("get_all_cities", {})] * 14 + [
    ("submit_result", {"answer_text": json.dumps(WRONG_PLAN)})
]
WINDOW = 2400


@dataclass
class WindowedPolicy(ScriptedPolicy):
    """The scripted double with a model's window: a prompt of ``limit`` tokens or more (counted
    as the env counts without a tokenizer) raises :class:`ContextWindowExceeded`, as a backend
    does.  ``context_window`` is what it tells the evaluation (None: says nothing)."""

    limit: int = WINDOW
    context_window: int | None = None
    overflows: int = 0

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        tokens = ApproxTokenCounter().count(messages, tools)
        if tokens >= self.limit:
            self.overflows += 1
            raise ContextWindowExceeded(
                f"the prompt has {tokens} tokens; the model's context window is {self.limit}",
                prompt_tokens=tokens,
                window=self.limit,
            )
        return await super().act(session, messages, tools, params)


def policy(**kw: Any) -> WindowedPolicy:
    return WindowedPolicy(lambda task, sample: SCRIPT, **kw)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'eval.db'}")


def test_a_prompt_past_the_window_truncates_and_counts(store: Store) -> None:
    # No window known to the eval, no compaction: the model itself hits its window.
    p = policy()
    run = evaluate(
        "trip-planning-v0", DOUBLE, EvalConfig(k=1, limit=2, overflow=None), store=store, policy=p
    )
    s = run.summary
    assert p.overflows == 2
    for e in run.episodes:
        outcome = (e.error, e.truncated, e.truncated_by, e.reward)
        assert outcome == (None, True, "context_window", 0.0)
        assert 1 <= e.turns < len(SCRIPT) and not e.terminated  # never reached its submission
    # counted in n as failures, not filed as infrastructure errors and dropped
    assert (s.episodes, s.errored, s.errors_by_kind, s.truncations) == (
        2,
        0,
        {},
        {"context_window": 2},
    )
    assert [(t.n, t.c) for t in s.per_task] == [(1, 0), (1, 0)]
    assert s.pass_at_k[1].value == 0.0 and s.pass_at_k[1].high > 0.5 and s.excluded == {1: 0}


def test_eval_runs_the_env_with_the_models_window_and_compacts(store: Store) -> None:
    # The policy states its window: the env compacts (discard-all) past 80 % of it, so the
    # model never sees an overflowing prompt and every episode reaches its submission.
    p = policy(context_window=WINDOW)
    run = evaluate("trip-planning-v0", DOUBLE, EvalConfig(k=1, limit=2), store=store, policy=p)
    assert p.overflows == 0
    for e in run.episodes:
        assert e.error is None and e.terminated and not e.truncated and e.turns == len(SCRIPT)
        assert e.context_compactions, "the overflow strategy never ran"
        assert all("Discard-all" in c["reason"] for c in e.context_compactions)
    config = run.summary.meta["config"]
    assert (config["context_window"], config["overflow"]) == (WINDOW, "discard-all")

    # Without a strategy the env truncates at the window itself, before the model overflows.
    bare = policy(context_window=WINDOW)
    cut = evaluate(
        "trip-planning-v0",
        DOUBLE,
        EvalConfig(k=1, limit=2, overflow=None),
        store=store,
        policy=bare,
    )
    assert cut.key != run.key and bare.overflows == 0
    assert all(
        (e.error, e.truncated_by, e.reward) == (None, "context_window", 0.0) for e in cut.episodes
    )
    assert cut.summary.truncations == {"context_window": 2} and cut.summary.errored == 0


def test_the_window_is_part_of_the_key_only_when_there_is_one(store: Store) -> None:
    base = EvalConfig(k=1, limit=1)
    assert "context_window" not in base.result_config()  # agents: keys of earlier evals stand
    windowed = replace(base, context_window=4096)
    assert windowed.result_config()["context_window"] == 4096
    assert windowed.config_hash() != replace(windowed, overflow="discard-75").config_hash()
    with pytest.raises(EvalError, match="unknown overflow strategy 'summary'"):
        EvalConfig(overflow="summary")
    with pytest.raises(EvalError, match="context window must be ≥ 2"):
        EvalConfig(context_window=0)


def test_cli_context_option() -> None:
    assert parse_context("thinking-retention") == ("thinking-retention", "discard-all")
    assert parse_context("keep-all+discard-75") == ("keep-all", "discard-75")
    assert parse_context("discard-reasoning+none") == ("discard-reasoning", None)
    with pytest.raises(ValueError, match="unknown context policy 'keep-some'"):
        parse_context("keep-some+discard-all")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "envgym.cli",
            "eval",
            "trip-planning-v0",
            "--model",
            "gold",
            "--context",
            "keep-all+discard-12",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "unknown overflow strategy 'discard-12'" in done.stderr


def test_the_models_window_is_read_without_loading_it(tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from envgym.evaluate import ModelSpecError, model_ref, model_tokenizer, model_window

    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    local = model_ref(str(tmp_path))
    assert model_window(local) == 2048 and model_tokenizer(local) == str(tmp_path.resolve())
    assert model_window(model_ref("gold")) is None and model_tokenizer(model_ref("gold")) is None

    class Models(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            body = json.dumps(
                {
                    "data": [
                        {"id": "other", "max_model_len": 1024},
                        {"id": "m", "max_model_len": 4096},
                    ]
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        assert model_window(model_ref(url + "#m")) == 4096  # vLLM's max_model_len of model m
        assert model_window(model_ref(url)) == 1024  # no name: the first one served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    # the server is gone: an error naming the way out, not a silently different evaluation key
    with pytest.raises(ModelSpecError, match="--context-window"):
        model_window(model_ref(url + "#m"))
