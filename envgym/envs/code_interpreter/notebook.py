"""How a Jupyter-backed tool fits the bundle contract: a sandbox that routes one tool.

The bundle's ``tools.py`` declares ``python(code: str)`` like any tool, so the bundle stays a
plain, checkable bundle (its schema, its solution and its verifier run in the project
sandbox as usual).  In an episode, :class:`NotebookSandbox` wraps that sandbox and sends calls
of ``python`` to the episode's kernel — a trusted built-in tool, itself jailed
(envgym/tools/python_kernel) — and everything else (other tools, solutions, verifiers) to the bundle
sandbox.  Decision record: docs/CODE_INTERPRETER.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from envgym.sandbox import CallError, CallOutcome, Sandbox, ToolSpec
from envgym.sandbox.base import call_limit
from envgym.sandbox.routed import RoutedSandbox
from envgym.state import PristineState
from envgym.tools.python_kernel import (
    ExecutionResult,
    KernelConfig,
    SyncKernelPool,
    SyncKernelSession,
)

TOOL = "python"
_ERRORS = {
    "timeout": CallError.TIMEOUT,
    "died": CallError.CRASH,
    "output_limit": CallError.OUTPUT_TOO_LARGE,
}
_shared: dict[str, SyncKernelPool] = {}
_shared_lock = threading.Lock()


def shared_pool() -> SyncKernelPool:
    """The process-wide pool code-interpreter envs use unless given one: two warm kernels with
    numpy and pandas already imported (most data tasks import them; warm kernels hide it)."""
    with _shared_lock:
        pool = _shared.get("default")
        if pool is None or pool._closed:
            pool = SyncKernelPool(
                KernelConfig(preload=("numpy", "pandas")), warm=2, max_kernels=16, wait=False
            )
            _shared["default"] = pool
        return pool


@dataclass
class NotebookStats:
    """Per-episode bookkeeping of the python tool (in ``info["python"]``)."""

    executions: int = 0
    errors: int = 0  # the code raised
    timeouts: int = 0
    restarts: int = 0  # the kernel died or had to be restarted after a timeout
    limit_hits: int = 0  # calls refused by the execution cap


class NotebookSandbox(RoutedSandbox):
    """``python`` → the episode's jailed kernel; everything else → the bundle sandbox."""

    backend = "notebook"

    def __init__(
        self,
        inner: Sandbox,
        pool: SyncKernelPool,
        pristine: PristineState,
        *,
        timeout_s: float,
        max_executions: int | None,
        hidden_tools: Iterable[str] = (),
    ) -> None:
        super().__init__(inner, {TOOL: self._python})
        self.pool = pool
        self.pristine = pristine
        self.timeout_s = timeout_s
        self.max_executions = max_executions
        self.hidden = frozenset(hidden_tools)
        self.session: SyncKernelSession | None = None
        self.stats = NotebookStats()

    def describe_tools(self) -> list[ToolSpec]:
        specs = [s for s in self.inner.describe_tools() if s.name not in self.hidden]
        if TOOL not in {s.name for s in specs}:
            raise ValueError(
                f"the bundle {self.bundle_dir.name} has no `{TOOL}` tool to route to a kernel"
            )
        return specs

    def new_episode(self) -> None:
        """A fresh kernel (warm from the pool) with the bundle's files in its working directory."""
        self.end_episode()
        session = self.pool.acquire()
        try:
            self.pristine.write_into(session.workspace)
            session.hand_over_workspace()
        except BaseException:
            session.close()
            raise
        self.session = session
        self.stats = NotebookStats()

    def end_episode(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def _python(self, arguments: dict[str, Any], timeout_s: float | None) -> CallOutcome:
        if self.max_executions is not None and self.stats.executions >= self.max_executions:
            self.stats.limit_hits += 1
            return CallOutcome(
                ok=True,
                value=f"Not executed: the limit of {self.max_executions} code executions for this task is "
                "reached. Give your final answer now.",
            )
        if self.session is None:
            self.new_episode()
        assert self.session is not None
        code, limit = str(arguments.get("code", "")), call_limit(self.timeout_s, timeout_s)
        result = self.session.execute(code, timeout_s=limit)
        self._count(result)
        if result.status in _ERRORS:
            return CallOutcome(
                ok=False,
                error=_ERRORS[result.status],
                message=result.text,
                duration_s=result.duration_s,
            )
        return CallOutcome(
            ok=True, value=result.text, rendered=result.text, duration_s=result.duration_s
        )

    def _count(self, result: ExecutionResult) -> None:
        self.stats.executions += 1
        self.stats.errors += result.status == "error"
        self.stats.timeouts += result.status == "timeout"
        self.stats.restarts += result.restarted

    def close(self) -> None:
        try:
            self.end_episode()
        finally:
            self.inner.close()
