"""Every ``--model`` form of docs/MODELS.md through the one resolver, and through ``envgym eval``.

The server forms run against a real HTTP server on 127.0.0.1 that plays vLLM: ``/v1/models``
(with each model's ``root``), ``/tokenize`` (the chat template's rendering, with or without
tools), ``/v1/chat/completions`` and ``/v1/completions`` (token ids).  It records every request,
so the tests see what a model would have been sent.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from local_http import LocalServer

from envgym.evaluate import ModelSpecError, load_policy, model_ref
from envgym.models.openai_http import OpenAIPolicy
from envgym.models.resolve import ModelFormError, open_policy, resolve_model
from envgym.models.served import forget_checks
from envgym.models.vllm_policy import VLLMPolicy

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(300)


class FakeVLLM:
    """What the handler serves and what it was sent."""

    def __init__(self, root: str, template_drops_tools: bool) -> None:
        self.root = root
        self.drops = template_drops_tools
        self.requests: list[tuple[str, Any]] = []
        self.owner = "vllm"


def _handler(fake: FakeVLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, data: Any, status: int = 200) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            fake.requests.append((self.path, None))
            if self.path == "/v1/models":
                entry = {
                    "id": "fake",
                    "root": fake.root,
                    "max_model_len": 4096,
                    "owned_by": fake.owner,
                }
                return self._send({"object": "list", "data": [entry]})
            self._send({"error": "not found"}, 404)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append((self.path, body))
            if self.path == "/tokenize":
                tools = 0 if fake.drops else len(body.get("tools") or [])
                return self._send({"tokens": [1, 2, 3] + [7] * 5 * tools, "count": 3})
            if self.path == "/v1/chat/completions":
                message = {"role": "assistant", "content": "I cannot help with that."}
                return self._send({"choices": [{"message": message, "finish_reason": "stop"}]})
            if self.path == "/v1/completions":  # token-in: SmolLM2's <|im_end|> (id 2)
                choice = {
                    "text": "",
                    "token_ids": [2],
                    "logprobs": {"token_logprobs": [-0.5]},
                    "finish_reason": "stop",
                }
                return self._send({"choices": [choice], "usage": {"prompt_tokens": 9}})
            self._send({"error": "not found"}, 404)

    return Handler


@pytest.fixture
def fake_server(request: pytest.FixtureRequest) -> Iterator[tuple[FakeVLLM, str]]:
    from envgym.embedded import hf_dir

    fake = FakeVLLM(str(hf_dir()), getattr(request, "param", True))
    server = LocalServer(_handler(fake))
    forget_checks()
    try:
        yield fake, f"{server.base}/v1"
    finally:
        server.stop()
        forget_checks()


@pytest.fixture
def hf_folder(tmp_path: Path) -> Path:
    """A local HF model directory (the embedded model's tokenizer, a weights file)."""
    from envgym.embedded import hf_dir

    folder = tmp_path / "my-model"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (hf_dir() / name).is_file():
            shutil.copy(hf_dir() / name, folder / name)
    (folder / "model.safetensors").write_bytes(b"not real weights: never loaded here")
    return folder


def test_every_documented_form_resolves(hf_folder: Path) -> None:
    assert resolve_model("smollm2").kind == "embedded"
    local = resolve_model(str(hf_folder))
    assert (local.kind, local.path) == ("hf", hf_folder.resolve())
    http = resolve_model("http://127.0.0.1:8000/v1#smol")
    assert (http.kind, http.url, http.served) == ("http", "http://127.0.0.1:8000/v1", "smol")
    vllm = resolve_model("vllm+https://host:9/v1/")
    assert (vllm.kind, vllm.url, vllm.served) == ("vllm", "https://host:9/v1", "")
    assert [resolve_model(a).kind for a in ("gold", "random")] == ["agent", "agent"]
    # the evaluation's classification is this resolver's, so every command agrees
    assert model_ref("vllm+http://127.0.0.1:8000/v1#smol").kind == "vllm"
    assert model_ref(str(hf_folder)).kind == "hf"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "must not be empty"),
        ("gpt-17", "unknown --model 'gpt-17'"),
        ("HuggingFaceTB/SmolLM2-135M", "loads no weights from the network"),
        ("./no/such/dir", "no such directory"),
        ("vllm+ftp://x/v1", "after 'vllm+' must come an http"),
        ("http:///v1", "is not a server URL"),
        ("http://h/v1\x1b[2J", "control characters"),
        ("x" * 5000, "longer than 2048"),
    ],
)
def test_bad_forms_are_refused_with_the_reason(spec: str, message: str) -> None:
    with pytest.raises(ModelFormError, match=re.escape(message)):
        resolve_model(spec)
    with pytest.raises(ModelSpecError):  # the same words through every command's entry
        model_ref(spec)


def test_a_directory_without_weights_or_a_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelFormError, match="holds no weights"):
        resolve_model(str(tmp_path))
    (tmp_path / "w.safetensors").write_bytes(b"")
    with pytest.raises(ModelFormError, match="is a file; give its directory"):
        resolve_model(str(tmp_path / "w.safetensors"))


def test_server_forms_open_their_backends(fake_server: tuple[FakeVLLM, str]) -> None:
    fake, url = fake_server
    http = load_policy(model_ref(url))  # the path eval, synth and the filter take
    assert isinstance(http, OpenAIPolicy) and http.model == "fake"  # learned from /models
    token_in = load_policy(model_ref(f"vllm+{url}"))
    assert isinstance(token_in, VLLMPolicy) and token_in.model == "fake"
    # its tokenizer is the served model's own, found through /models' root
    assert token_in.format.tokenizer.name_or_path == fake.root
    fake.root = "/no/such/folder"
    with pytest.raises(ModelFormError, match="tokenizer on this machine"):
        open_policy(f"vllm+{url}")


TOOLS = [{"type": "function", "function": {"name": "get_note", "parameters": {"type": "object"}}}]
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Read the note."}]


def test_every_command_s_server_policy_falls_back_when_the_template_drops_tools(
    fake_server: tuple[FakeVLLM, str],
) -> None:
    """Synthesis agents and the filter pass tools natively too: the policy the resolver opens
    asks a vLLM server once, and writes the tools into the system prompt when they would be
    dropped."""
    import asyncio

    from envgym.policy import SamplingParams

    fake, url = fake_server

    async def act() -> Any:
        policy = open_policy(url)
        try:
            return [await policy.act(f"s{i}", ASK, TOOLS, SamplingParams()) for i in range(2)]
        finally:
            await policy.aclose()

    turns = asyncio.run(act())
    chats = _sent(fake, "/v1/chat/completions")
    assert all("tools" not in c and "get_note" in c["messages"][0]["content"] for c in chats)
    assert chats[0]["messages"][0]["content"].startswith("Be brief.")
    assert all(t.message is None and t.text for t in turns)  # text, for the env's parser
    assert len(_sent(fake, "/tokenize")) == 2  # once, for both turns
    fake.requests.clear()
    fake.owner = "someone-else"  # not vLLM: never sent a /tokenize it does not expect
    forget_checks()
    asyncio.run(act())
    assert _sent(fake, "/tokenize") == []
    assert all(c["tools"] == TOOLS for c in _sent(fake, "/v1/chat/completions"))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envgym.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )


EVAL = ("--limit", "1", "--max-turns", "1", "--max-tokens", "8", "--json")


def _sent(fake: FakeVLLM, path: str) -> list[Any]:
    return [body for p, body in fake.requests if p == path]


@pytest.mark.parametrize("fake_server", [True], indirect=True)
def test_eval_cli_on_a_template_that_drops_tools_puts_them_in_the_prompt(
    fake_server: tuple[FakeVLLM, str], tmp_path: Path
) -> None:
    fake, url = fake_server
    done = cli(
        "eval", "trip-planning-v0", "--model", url, "--db", f"sqlite:///{tmp_path}/e.db", *EVAL
    )
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)["tools_view"]
    assert view["view"] == "prompt" and view["native_tools"] is False
    assert "drops tool schemas" in done.stderr
    [chat] = _sent(fake, "/v1/chat/completions")
    assert "tools" not in chat  # no 400 for "auto" tool choice, no silently dropped schemas
    assert "<tools>" in chat["messages"][0]["content"]  # the Hermes rendering, in the prompt
    assert len(_sent(fake, "/tokenize")) == 2  # asked once per server: with and without tools


@pytest.mark.parametrize("fake_server", [False], indirect=True)
def test_eval_cli_on_a_template_that_renders_tools_sends_them_natively(
    fake_server: tuple[FakeVLLM, str], tmp_path: Path
) -> None:
    fake, url = fake_server
    done = cli(
        "eval",
        "trip-planning-v0",
        "--model",
        f"{url}#fake",
        "--db",
        f"sqlite:///{tmp_path}/e.db",
        *EVAL,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tools_view"]["view"] == "native"
    [chat] = _sent(fake, "/v1/chat/completions")
    assert len(chat["tools"]) == 15 and "<tools>" not in chat["messages"][0]["content"]
    # --tools-in-prompt overrides it
    done = cli(
        "eval", "trip-planning-v0", "--model", url, "--tools-in-prompt", "--db",
        f"sqlite:///{tmp_path}/p.db", *EVAL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tools_view"]["view"] == "prompt"
    assert "tools" not in _sent(fake, "/v1/chat/completions")[-1]


def test_eval_cli_takes_the_token_in_form(
    fake_server: tuple[FakeVLLM, str], tmp_path: Path
) -> None:
    fake, url = fake_server
    done = cli(
        "eval", "trip-planning-v0", "--model", f"vllm+{url}", "--db", f"sqlite:///{tmp_path}/e.db",
        "--html", str(tmp_path / "report"), *EVAL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # envgym renders with SmolLM2's template, which has no tool support: tools in the prompt
    assert json.loads(done.stdout)["tools_view"]["view"] == "prompt"
    [completion] = _sent(fake, "/v1/completions")
    assert all(isinstance(t, int) for t in completion["prompt"])  # token ids, not text
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["tools_view"]["view"] == "prompt" and len(report["tools"]) == 15
    # the exact prompt the server was sent, decoded with the served model's tokenizer
    assert "<tools>" in report["episodes"][0]["prompt_text"]


def test_eval_cli_accepts_the_local_forms(hf_folder: Path, tmp_path: Path) -> None:
    """The local forms pass the CLI's model handling (a bad env then stops the run before any
    weights load): the tool view is decided from the template, rendered locally."""
    for spec in ("smollm2", str(hf_folder)):
        done = cli("eval", "nope-v0", "--model", spec, "--db", f"sqlite:///{tmp_path}/x.db")
        assert done.returncode == 2 and "nope" in done.stderr, done.stderr
        assert "tools: prompt" in done.stderr and "no tool support" in done.stderr
