"""The offline MCP task suite (docs/MCP.md "Offline MCP suite").

Tasks in MCPMark's layout (``meta.json``, ``description.md``, ``verify.py``) over three real MCP
servers — the reference filesystem server (npm), ``mcp-server-git`` and ``mcp-server-sqlite``
(PyPI, each in its own venv) — with initial-state snapshots under ``initial_state/`` and a gold
plan of MCP tool calls (``gold.json``) per task.
"""
