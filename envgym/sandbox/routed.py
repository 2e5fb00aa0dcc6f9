"""A sandbox that sends some tools to handlers of their own and everything else to ``inner``.

Families put trusted built-in tools beside a bundle's own (a search index on the host, a
Jupyter kernel, MCP servers) by routing those tool names; the bundle keeps its other tools, its
gold solution and its verifier in ``inner``.  The delegation lives here once, so a wrapper only
says what it routes (and what it adds to ``describe_tools``/``reset``/``close``).

A handler takes ``(arguments, timeout_s)``: the caller's limit for this call (None: none), which
the handler lowers its own limit to (``call_limit``); calls of other tools pass it on to
``inner``.  Limits are never copied from ``inner`` at construction: ``limits`` is read through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from envgym.sandbox.base import CallOutcome, Limits, Sandbox, SolveOutcome, ToolSpec

__all__ = ["Handler", "RoutedSandbox"]

#: Runs one routed call: ``handler(arguments, timeout_s) -> CallOutcome``; never raises on
#: anything the agent sent (the arguments were validated against the tool's schema).
Handler = Callable[[dict[str, Any], "float | None"], CallOutcome]


class RoutedSandbox(Sandbox):
    """``routes`` (tool name → handler) answer their tools; ``inner`` does everything else.

    Pre-started workers (``start_pool``) stay off: a wrapper's ``reset`` may do more than the
    inner sandbox's (restart servers on the new state), which a handed-over worker would skip.
    """

    backend = "routed"

    def __init__(self, inner: Sandbox, routes: Mapping[str, Handler] | None = None) -> None:
        # Not Sandbox.__init__: limits are the inner sandbox's, read through (see ``limits``).
        self.inner = inner
        self.bundle_dir = inner.bundle_dir
        self.routes: dict[str, Handler] = dict(routes or {})

    @property
    def limits(self) -> Limits:  # type: ignore[override]
        """The inner sandbox's limits (one object: nothing to keep in step)."""
        return self.inner.limits

    def describe_tools(self) -> list[ToolSpec]:
        return self.inner.describe_tools()

    def reset(self, state_dir: Path) -> None:
        self.inner.reset(state_dir)

    def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> CallOutcome:
        handler = self.routes.get(name)
        if handler is None:
            return self.inner.call_tool(name, arguments, timeout_s=timeout_s)
        return handler(arguments, timeout_s)

    def solve(self, function: str, task: dict[str, Any], submit_tool: str | None) -> SolveOutcome:
        return self.inner.solve(function, task, submit_tool)

    def verify(
        self, function: str, submission: dict[str, Any], task: dict[str, Any]
    ) -> CallOutcome:
        return self.inner.verify(function, submission, task)

    def close(self) -> None:
        self.inner.close()
