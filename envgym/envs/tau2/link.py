"""The envgym side's line to τ²: in-process when ``tau2`` imports here, else the τ² worker.

Both speak the request dicts of :func:`envgym.envs.tau2.session.handle`.  The worker interpreter is
``$ENVGYM_TAU2_PYTHON`` or the repository's ``.venv-tau2/bin/python`` (scripts/setup.sh builds
it).  A τ² refusal raises :class:`Tau2Error` with τ²'s message; a worker that dies or stops
answering raises it too (kind ``"worker"``) and is restarted on the next call.
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import subprocess
import threading
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
REPO = _HERE.parents[2]
START_TIMEOUT_S = 120.0  # importing τ² (litellm) takes ~4 s idle, far longer on a loaded machine
CALL_TIMEOUT_S = 120.0


class Tau2Error(RuntimeError):
    """τ² refused a request (``kind="session"``), crashed (``"crash"``) or its worker failed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"τ² {kind}: {message}")
        self.kind = kind


def worker_python() -> Path:
    return Path(os.environ.get("ENVGYM_TAU2_PYTHON") or REPO / ".venv-tau2" / "bin" / "python")


def tau2_importable() -> bool:
    return importlib.util.find_spec("tau2") is not None


class Tau2Link:
    """Requests to τ²; ``mode`` is ``"auto"`` (in-process if possible), ``"inprocess"`` or ``"worker"``."""

    def __init__(self, mode: str = "auto") -> None:
        if mode not in ("auto", "inprocess", "worker"):
            raise ValueError(f"τ² link mode is auto, inprocess or worker, not {mode!r}")
        self.mode = (
            "inprocess"
            if mode == "auto" and tau2_importable()
            else ("worker" if mode == "auto" else mode)
        )
        self._domains: dict[str, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def call(self, request: dict[str, Any], timeout: float = CALL_TIMEOUT_S) -> Any:
        if self.mode == "inprocess":
            return self._inprocess(request)
        with self._lock:
            return self._ask(request, timeout)

    def _inprocess(self, request: dict[str, Any]) -> Any:
        from envgym.envs.tau2.session import SessionError, handle

        try:
            return handle(self._domains, request)
        except SessionError as exc:
            raise Tau2Error("session", str(exc)) from None

    # -- the worker --------------------------------------------------------------------
    def _start(self) -> subprocess.Popen[bytes]:
        python = worker_python()
        if not python.exists():
            raise Tau2Error("worker", f"no τ² interpreter at {python}: run scripts/setup.sh "
                            "(it builds .venv-tau2) or set ENVGYM_TAU2_PYTHON")  # fmt: skip
        proc = subprocess.Popen(
            [str(python), "-u", str(_HERE / "worker.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,  # τ²'s logs: our stderr
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        )  # fmt: skip
        self._proc = proc
        self._read(START_TIMEOUT_S)  # the "ready" line
        return proc

    def _read(self, timeout: float) -> Any:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        poller = select.poll()  # not select.select: it refuses fds >= 1024
        poller.register(proc.stdout, select.POLLIN)
        ready = poller.poll(timeout * 1000)
        line = proc.stdout.readline() if ready else b""
        if not line:
            self.close()
            what = "did not answer in time" if not ready else "exited"
            raise Tau2Error("worker", f"the τ² worker {what}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise Tau2Error(str(reply.get("kind")), str(reply.get("error")))
        return reply["value"]

    def _ask(self, request: dict[str, Any], timeout: float) -> Any:
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            raise Tau2Error("worker", "the τ² worker exited") from None
        return self._read(timeout)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:  # unflushed bytes to a worker that died: nothing to save
                        pass
