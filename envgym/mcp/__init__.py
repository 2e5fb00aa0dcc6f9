"""MCP in both directions (docs/MCP.md).

* serving: :mod:`envgym.mcp.episode` drives one env episode call by call, and
  :mod:`envgym.mcp.serve` exposes it over MCP (stdio, streamable HTTP), one episode per session;
* consuming: :mod:`envgym.mcp.client` keeps one MCP server connection (restart, per-call
  timeout) and :mod:`envgym.mcp.toolset` turns a server's tools into envgym tools, which
  :class:`envgym.mcp.sandbox.McpSandbox` puts beside a bundle's own tools.

Nothing here is imported by ``import envgym``: the ``mcp`` SDK loads only when used.
"""
