"""A served model is keyed by what its server serves, not by its URL.

A real OpenAI-compatible server on 127.0.0.1 (``local_http.LocalServer``; it plays the server,
no model runs) lists a model at ``/v1/models`` the way vLLM does — ``id``, ``root``, a
``created`` that changes on every reply, ``max_model_len`` — and answers chat completions with
one tool call.  Between two evaluations it starts serving another checkpoint behind the same URL:
the second evaluation must not reuse the first one's episodes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from bundle_factory import make_notes_bundle
from local_http import LocalServer

from envgym.evaluate import EvalConfig, EvalError, evaluate
from envgym.evaluate.served import MAX_REPLY_BYTES, served_identity
from envgym.policy import SamplingParams
from envgym.rollout import RolloutBudget
from envgym.store import Store

COMPLETION_TOKENS = 7


@dataclass
class Served:
    """What the stub server says it serves; tests change it between runs."""

    models: list[dict[str, object]] = field(
        default_factory=lambda: [{"id": "ckpt", "root": "/ckpts/step-100", "max_model_len": 4096}]
    )
    models_status: int = 200
    models_body: bytes | None = None  # raw /models reply (hostile replies)
    chats: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def submit_reply() -> bytes:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "submit_result", "arguments": json.dumps({"answer_text": "x"})},
    }
    return json.dumps(
        {
            "choices": [
                {
                    "message": {"role": "assistant", "content": "", "tool_calls": [call]},
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 40, "completion_tokens": COMPLETION_TOKENS},
        }
    ).encode()


class StubServer:
    """An OpenAI-compatible stub: ``/v1/models`` from :class:`Served`, chat → one submit call."""

    def __init__(self) -> None:
        self.served = Served()
        served = self.served

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                if self.path != "/v1/models":
                    return self._send(404, b"{}")
                if served.models_body is not None:
                    return self._send(served.models_status, served.models_body)
                # vLLM stamps "created" with the time of each reply: it must not be keyed
                data = [{**m, "object": "model", "created": time.time_ns()} for m in served.models]
                self._send(served.models_status, json.dumps({"data": data}).encode())

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != "/v1/chat/completions":  # no /tokenize: not a vLLM server
                    return self._send(404, b"{}")
                with served.lock:
                    served.chats += 1
                self._send(200, submit_reply())

        self.local = LocalServer(Handler)
        self.url = f"{self.local.base}/v1"

    def close(self) -> None:
        self.local.stop()


@pytest.fixture
def server() -> Iterator[StubServer]:
    s = StubServer()
    yield s
    s.close()


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return make_notes_bundle(tmp_path / "notes")


CONFIG = EvalConfig(
    k=1,
    concurrency=1,
    params=SamplingParams(max_tokens=16),
    budget=RolloutBudget(max_turns=2),
    context_window=4096,
)


def run(bundle: Path, model: str, store: Store, **changes: object) -> object:
    from dataclasses import replace

    return evaluate(str(bundle), model, replace(CONFIG, **changes), store=store)  # type: ignore[arg-type]


def test_a_new_checkpoint_behind_the_same_url_is_a_new_evaluation(
    server: StubServer, bundle: Path, tmp_path: Path
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'e.db'}")
    first = run(bundle, server.url, store)
    assert first.ran == 1 and server.served.chats == 1  # type: ignore[attr-defined]
    assert "id=ckpt" in first.identity and "root=/ckpts/step-100" in first.identity  # type: ignore[attr-defined]

    again = run(bundle, server.url, store)  # same checkpoint; only "created" changed
    assert again.ran == 0 and again.key == first.key and server.served.chats == 1  # type: ignore[attr-defined]

    # another checkpoint under the same served name (vLLM --served-model-name): root differs
    server.served.models = [{"id": "ckpt", "root": "/ckpts/step-200", "max_model_len": 4096}]
    swapped = run(bundle, server.url, store)
    assert swapped.ran == 1 and swapped.key != first.key and server.served.chats == 2  # type: ignore[attr-defined]

    # another model id altogether, named with URL#model
    server.served.models = [{"id": "other-model", "root": "/m/other"}]
    other = run(bundle, server.url + "#other-model", store)
    assert other.ran == 1 and other.key not in (first.key, swapped.key)  # type: ignore[attr-defined]
    assert server.served.chats == 3

    # a weights fingerprint, where a server states one, tells same-named weights apart
    server.served.models = [{"id": "other-model", "root": "/m/other", "fingerprint": "sha256:b"}]
    assert run(bundle, server.url, store).ran == 1  # type: ignore[attr-defined]


def test_an_unidentifiable_server_reuses_nothing_without_same_model(
    server: StubServer, bundle: Path, tmp_path: Path
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'e.db'}")
    server.served.models_status, server.served.models_body = 404, b'{"detail": "Not Found"}'
    first = run(bundle, server.url + "#ckpt", store)
    assert first.ran == 1 and first.identity.startswith("unknown: ")  # type: ignore[attr-defined]
    with pytest.raises(EvalError) as refused:
        run(bundle, server.url + "#ckpt", store)
    message = str(refused.value)
    assert "cannot tell which model" in message and "HTTP 404" in message
    assert "--same-model" in message and server.served.chats == 1
    vouched = run(bundle, server.url + "#ckpt", store, same_model=True)
    assert vouched.ran == 0 and vouched.key == first.key and server.served.chats == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("status", "body", "why"),
    [
        (200, b"[" * 10 + b"x", "not JSON"),
        (200, b"{" + b" " * (MAX_REPLY_BYTES + 10) + b"}", "more than"),
        (200, json.dumps({"data": []}).encode(), "lists no models"),
        (200, json.dumps({"data": [{"id": 7}]}).encode(), "malformed 'id'"),
        (200, json.dumps({"data": [{"id": "m", "root": "r" * 600}]}).encode(), "malformed 'root'"),
        (200, json.dumps({"data": [{"id": "m", "max_model_len": True}]}).encode(), "max_model_len"),
        (500, b"{}", "HTTP 500"),
    ],
)
def test_a_hostile_or_broken_models_reply_leaves_the_identity_unknown(
    server: StubServer, status: int, body: bytes, why: str
) -> None:
    server.served.models_status, server.served.models_body = status, body
    identity = served_identity(server.url)
    assert identity.fingerprint is None and why in identity.detail


def test_the_named_model_is_keyed_not_the_first_listed(server: StubServer) -> None:
    server.served.models = [{"id": "base", "root": "/m/base"}, {"id": "lora", "parent": "base"}]
    base, lora = served_identity(server.url + "#base"), served_identity(server.url + "#lora")
    assert served_identity(server.url) == base  # no name: the first listed, as the policy uses
    assert lora.fingerprint is not None and lora.fingerprint != base.fingerprint
    missing = served_identity(server.url + "#nope")
    assert missing.fingerprint is None and "does not list 'nope'" in missing.detail
    server.close()  # a server that is down: unknown, with the reason
    down = served_identity(server.url)
    assert down.fingerprint is None and "could not be read" in down.detail
