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
from envgym.sandbox.base import CallOutcome, Sandbox, ToolSpec, call_limit
from envgym.sandbox.routed import Handler, RoutedSandbox


class McpSandbox(RoutedSandbox):
    """Routes calls of MCP tools to their toolsets and everything else to ``inner``.

    Every MCP call is bounded by its toolset's ``call_timeout_s``, the inner sandbox's
    ``limits.call_timeout_s`` and the caller's ``timeout_s``, whichever is least."""

    backend = "mcp"

    def __init__(self, inner: Sandbox, toolsets: list[McpToolset]) -> None:
        super().__init__(inner)
        self.toolsets = list(toolsets)
        self._described = False  # the routes are known once the servers listed their tools
        self.state_dir: Path | None = None  # the current episode's, as the MCP servers see it

    def describe_tools(self) -> list[ToolSpec]:
        specs = list(self.inner.describe_tools())
        routes: dict[str, Handler] = {}
        for toolset in self.toolsets:
            for spec in toolset.describe_tools(listing_dir=self.bundle_dir / "state"):
                if spec.name in routes or any(s.name == spec.name for s in specs):
                    raise ValueError(
                        f"tool {spec.name!r} of MCP server {toolset.spec.name} clashes with "
                        "another tool: give the toolset a prefix"
                    )
                routes[spec.name] = self._router(toolset, spec.name)
                specs.append(spec)
        self.routes, self._described = routes, True
        return specs

    def _router(self, toolset: McpToolset, name: str) -> Handler:
        def call(arguments: dict[str, Any], timeout_s: float | None) -> CallOutcome:
            own = min(toolset.call_timeout_s, self.limits.call_timeout_s)
            return toolset.call_tool(name, arguments, timeout_s=call_limit(own, timeout_s))

        return call

    def reset(self, state_dir: Path) -> None:
        self.inner.reset(state_dir)
        self.state_dir = state_dir
        for toolset in self.toolsets:
            if toolset.spec.uses_state_dir or not toolset.running:
                toolset.start(state_dir)

    def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> CallOutcome:
        if not self._described:
            self.describe_tools()
        return super().call_tool(name, arguments, timeout_s=timeout_s)

    def close(self) -> None:
        for toolset in self.toolsets:
            toolset.close()
        self.inner.close()
