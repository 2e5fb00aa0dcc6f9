"""A bundle's sandbox plus MCP toolsets: MCP servers' tools usable by any ``BundleEnv``.

    from envgym.bundle_env import BundleEnv
    from envgym.mcp import ServerSpec, McpToolset, McpSandbox   # (see docs/MCP.md)
    from envgym.sandbox import open_sandbox

    fs = McpToolset(ServerSpec(command=("node", FS_SERVER_JS, "{state_dir}")), prefix="fs_")
    env = BundleEnv(bundle, sandbox=McpSandbox(open_sandbox(bundle), [fs]))

``describe_tools`` is the bundle's tools followed by each toolset's; the env's dispatcher
validates every call against these schemas and turns each :class:`CallOutcome` into the agent's
tool message, so MCP tools behave like bundle tools (errors, timeouts, output cap, budgets).
The bundle keeps its own tools (the submit tool), gold solution and verifier, which reads the
state the MCP servers changed: a server whose command names ``{state_dir}`` is restarted on the
episode's fresh state directory at every ``reset``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envgym.mcp.toolset import McpToolset
from envgym.sandbox.base import CallOutcome, Limits, Sandbox, SolveOutcome, ToolSpec


class McpSandbox(Sandbox):
    """Routes calls of MCP tools to their toolsets and everything else to ``inner``."""

    backend = "mcp"

    def __init__(self, inner: Sandbox, toolsets: list[McpToolset]) -> None:
        self.inner = inner
        self.bundle_dir = inner.bundle_dir
        self.toolsets = list(toolsets)
        self._route: dict[str, McpToolset] | None = None
        self.state_dir: Path | None = None  # the current episode's, as the MCP servers see it

    @property
    def limits(self) -> Limits:  # type: ignore[override]
        """The inner sandbox's limits; ``call_timeout_s`` also bounds every MCP call."""
        return self.inner.limits

    @limits.setter
    def limits(self, value: Limits) -> None:
        self.inner.limits = value

    def describe_tools(self) -> list[ToolSpec]:
        specs = list(self.inner.describe_tools())
        route: dict[str, McpToolset] = {}
        for toolset in self.toolsets:
            for spec in toolset.describe_tools(listing_dir=self.bundle_dir / "state"):
                if spec.name in route or any(s.name == spec.name for s in specs):
                    raise ValueError(
                        f"tool {spec.name!r} of MCP server {toolset.spec.name} clashes with "
                        "another tool: give the toolset a prefix"
                    )
                route[spec.name] = toolset
                specs.append(spec)
        self._route = route
        return specs

    def _toolset(self, name: str) -> McpToolset | None:
        if self._route is None:
            self.describe_tools()
        assert self._route is not None
        return self._route.get(name)

    def reset(self, state_dir: Path) -> None:
        self.inner.reset(state_dir)
        self.state_dir = state_dir
        for toolset in self.toolsets:
            if toolset.spec.uses_state_dir or not toolset.running:
                toolset.start(state_dir)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        toolset = self._toolset(name)
        if toolset is None:
            return self.inner.call_tool(name, arguments)
        return toolset.call_tool(
            name, arguments, timeout_s=min(toolset.call_timeout_s, self.limits.call_timeout_s)
        )

    def solve(self, function: str, task: dict[str, Any], submit_tool: str | None) -> SolveOutcome:
        return self.inner.solve(function, task, submit_tool)

    def verify(
        self, function: str, submission: dict[str, Any], task: dict[str, Any]
    ) -> CallOutcome:
        return self.inner.verify(function, submission, task)

    def close(self) -> None:
        for toolset in self.toolsets:
            toolset.close()
        self.inner.close()
