"""The third-party MCP servers the tests consume: the same pinned installs the offline MCP suite
uses (``envgym/envs/mcp_suite/servers.py``), built once into the envgym cache through their ordinary
clients (``npm``; ``pip`` into a venv of their own, since they pin ``mcp<2``)."""

from __future__ import annotations

from envgym.envs.mcp_suite.servers import MissingTool
from envgym.envs.mcp_suite.servers import filesystem_command as filesystem_server
from envgym.envs.mcp_suite.servers import git_command as git_server

__all__ = ["MissingTool", "filesystem_server", "git_server"]
