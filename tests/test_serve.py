"""``envgym serve`` and the check that a server's chat template shows the tools.

Hermetic: the template check runs against a real HTTP server on 127.0.0.1 implementing vLLM's
``/tokenize``; ``envgym serve`` runs a stand-in "vLLM" (a venv whose ``bin/python`` serves
``/health`` or fails on purpose) in a real subprocess, stopped with SIGINT like Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from local_http import LocalServer

from envgym.models.resolve import resolve_model
from envgym.models.served import MAX_REPLY, ServerReplyError, forget_checks, server_drops_tools
from envgym.models.tool_call_parsers import ParserChoiceError, choose_parser
from envgym.models.tool_support import NATIVE, PROMPT, UNVERIFIED, decide_tools

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(180)


class Tokenizer:
    """How the stand-in server answers ``/tokenize``."""

    def __init__(self, mode: str) -> None:
        self.mode = mode  # drops | renders | missing | huge | junk | fails
        self.calls: list[dict[str, Any]] = []


def _handler(state: Tokenizer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            entry = {"id": "listed", "owned_by": "vllm"}
            self._reply(200, json.dumps({"data": [entry]}).encode())

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.calls.append({"path": self.path, **body})
            mode = state.mode
            if mode == "missing" or self.path != "/tokenize":
                return self._reply(404, b'{"detail": "Not Found"}')
            if mode == "fails":
                return self._reply(500, b"engine dead")
            if mode == "huge":
                return self._reply(200, b"[" + b"1," * MAX_REPLY + b"1]")
            if mode == "junk":
                return self._reply(200, b'{"tokens": "not a list"}')
            extra = [9] * 4 if body.get("tools") and mode == "renders" else []
            self._reply(200, json.dumps({"tokens": [5, 6, 7, *extra]}).encode())

    return Handler


@pytest.fixture
def tokenizer_server() -> Iterator[tuple[Tokenizer, str]]:
    state = Tokenizer("drops")
    server = LocalServer(_handler(state))
    forget_checks()
    try:
        yield state, f"{server.base}/v1"
    finally:
        server.stop()
        forget_checks()


def test_a_template_that_drops_tools_is_detected_once_per_server(
    tokenizer_server: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer_server
    assert server_drops_tools(url, "m") is True
    assert [bool(c.get("tools")) for c in state.calls] == [False, True]  # same prompt, ± tools
    assert all(c["messages"] == state.calls[0]["messages"] for c in state.calls)
    assert server_drops_tools(url, "m") is True and len(state.calls) == 2  # remembered
    decision = decide_tools(resolve_model(f"{url}#m"), tools_in_prompt=False)
    assert (decision.native_tools, decision.view) == (False, PROMPT)
    assert "drops tool schemas" in decision.reason and len(state.calls) == 2


def test_a_template_that_renders_tools_keeps_them_native(
    tokenizer_server: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer_server
    state.mode = "renders"
    decision = decide_tools(resolve_model(url), tools_in_prompt=False)  # name from /models
    assert (decision.native_tools, decision.view) == (True, NATIVE)
    assert state.calls[0]["model"] == "listed"
    # the flag wins without asking the server
    forget_checks()
    state.calls.clear()
    forced = decide_tools(resolve_model(url), tools_in_prompt=True)
    assert (forced.native_tools, forced.view, state.calls) == (False, PROMPT, [])


def test_a_server_without_tokenize_is_reported_unverified(
    tokenizer_server: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer_server
    state.mode = "missing"
    assert server_drops_tools(url, "m") is None
    decision = decide_tools(resolve_model(f"{url}#m"), tools_in_prompt=False)
    assert (decision.native_tools, decision.view) == (True, UNVERIFIED)
    assert "not verified" in decision.reason


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("fails", "answered HTTP 500: engine dead"),
        ("huge", f"sent more than {MAX_REPLY} bytes"),
        ("junk", "sent no 'tokens' list of ints"),
    ],
)
def test_bad_tokenize_replies_are_clear_errors(
    tokenizer_server: tuple[Tokenizer, str], mode: str, message: str
) -> None:
    state, url = tokenizer_server
    state.mode = mode
    with pytest.raises(ServerReplyError, match=message):
        server_drops_tools(url, "m")


def test_local_templates_are_checked_by_rendering_them() -> None:
    from envgym.embedded import load_tokenizer

    smol = load_tokenizer()  # SmolLM2's template has no tool support
    decision = decide_tools(resolve_model("smollm2"), tools_in_prompt=False, tokenizer=smol)
    assert (decision.native_tools, decision.view) == (True, PROMPT)
    smol.chat_template = (  # a template that does render tools
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if tools %}{% for t in tools %}{{ t['function']['name'] }}{% endfor %}{% endif %}"
    )
    decision = decide_tools(resolve_model("smollm2"), tools_in_prompt=False, tokenizer=smol)
    assert decision.view == NATIVE


# -- the tool-call parser table -----------------------------------------------------------------


def _model(folder: Path, template: str, model_type: str = "llama") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize(
    ("template", "model_type", "parser"),
    [
        ("<|im_start|>{{ m }}<|im_end|>", "llama", "hermes"),  # SmolLM2: ChatML, a llama
        ("<tool_call>{{ x }}</tool_call><|im_start|>", "qwen2", "hermes"),
        ("<|python_tag|>{{ x }}", "llama", "llama3_json"),
        ("[TOOL_CALLS]{{ x }}", "mistral", "mistral"),
        ("{{ x }}", "qwen3", "hermes"),  # no marker: the family decides
    ],
)
def test_the_parser_table(tmp_path: Path, template: str, model_type: str, parser: str) -> None:
    assert choose_parser(_model(tmp_path / "m", template, model_type))[0] == parser


def test_an_unknown_family_needs_the_flag(tmp_path: Path) -> None:
    folder = _model(tmp_path / "m", "{{ x }}", "gpt_neox")
    with pytest.raises(ParserChoiceError, match="pass --tool-call-parser"):
        choose_parser(folder)
    assert choose_parser(folder, "pythonic") == ("pythonic", "--tool-call-parser")


def test_the_embedded_model_gets_hermes() -> None:
    from envgym.embedded import hf_dir

    assert choose_parser(hf_dir())[0] == "hermes"


# -- envgym serve, with a stand-in vLLM ------------------------------------------------------

FAKE_VLLM = textwrap.dedent(
    """
    import http.server, signal, sys
    args = sys.argv[1:]
    print("fake vllm", " ".join(args), flush=True)
    if "--fail" in open(sys.argv[0] + ".mode").read():
        print("RuntimeError: boom, no device for the engine", flush=True)
        sys.exit(3)
    port = int(args[args.index("--port") + 1])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a): pass
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def _fake_venv(tmp_path: Path, mode: str) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    script = venv / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    (venv / "fake_vllm.py.mode").write_text(mode)
    python = venv / "bin" / "python"  # VLLMServer runs `python -m vllm... --flags`
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {script} "$@"\n')
    python.chmod(0o755)
    return venv


def _serve(tmp_path: Path, venv: Path, *extra: str) -> subprocess.Popen[str]:
    model = _model(tmp_path / "model", "<|im_start|>{{ m }}")
    code = (
        "from envgym.cli import app; from envgym.commands.serve import register; "
        "register(app); app()"  # the entry point may not be installed yet in this venv
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, "serve", str(model), "--venv", str(venv), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_serve_prints_the_url_with_tool_calling_on_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path, "serve")
    proc = _serve(tmp_path, venv)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # blocks until healthy (or the process ends)
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), proc.stderr.read()
        port = int(url.split(":")[2].split("/")[0])
        log = Path(f"/tmp/envgym-vllm-{port}.log").read_text()
        assert "--enable-auto-tool-choice --tool-call-parser hermes" in log
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "tool-call parser: hermes" in err and "stopping vLLM" in err
    deadline = time.monotonic() + 10  # the server's port is free again: it was stopped
    import socket

    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                break
        time.sleep(0.2)
    else:
        pytest.fail("the stand-in vLLM still answers after Ctrl-C")


def test_serve_reports_a_failed_start_with_the_log_tail(tmp_path: Path) -> None:
    proc = _serve(tmp_path, _fake_venv(tmp_path, "--fail"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and out == ""
    assert "vLLM did not start" in err and "boom, no device for the engine" in err


def test_serve_refuses_forms_without_weights(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from envgym.cli import app
    from envgym.commands.serve import register

    register(app)
    for spec, message in (
        ("http://127.0.0.1:9/v1", "needs model weights here"),
        ("gpt-17", "unknown --model"),
    ):
        done = CliRunner().invoke(app, ["serve", spec])
        assert done.exit_code == 2 and message in " ".join(done.output.split()), done.output


def test_tools_already_in_the_system_prompt_are_not_passed_to_the_template_again() -> None:
    """``--tools-in-prompt`` on a model whose template does render tools: shown once, as text."""
    from envgym.embedded import load_tokenizer
    from envgym.models.chat import ChatFormat
    from envgym.parsers import get_parser

    tokenizer = load_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if tools %}{% for t in tools %}TOOL:{{ t['function']['name'] }}"
        "{% endfor %}{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fmt = ChatFormat(tokenizer)
    tools = [{"type": "function", "function": {"name": "get_note", "parameters": {}}}]
    plain = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert "TOOL:get_note" in fmt.render(plain, tools, generation=True)  # native
    section = get_parser("hermes").render_tools(tools)
    in_prompt = [{"role": "system", "content": f"Be brief.\n\n{section}"}, plain[1]]
    text = fmt.render(in_prompt, tools, generation=True)
    assert "TOOL:get_note" not in text and text.count(section) == 1
