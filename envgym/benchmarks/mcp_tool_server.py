"""An MCP stdio server exposing one bundle tool: the reference point of ``envgym bench env-step``.

Usage: python -m envgym.benchmarks.mcp_tool_server BUNDLE_DIR STATE_DIR TOOL_NAME
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

from envgym import runtime


def main() -> None:
    bundle, state, tool_name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    spec = importlib.util.spec_from_file_location("bench_bundle_tools", bundle / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    runtime.activate(state)
    server = MCPServer("envgym-bench")
    server.tool()(getattr(module, tool_name))
    server.run("stdio")


if __name__ == "__main__":
    main()
