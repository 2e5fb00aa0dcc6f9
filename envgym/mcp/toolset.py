"""An MCP server's tools as envgym tools: JSON-Schema specs for the dispatcher, calls as outcomes.

:class:`McpToolset` owns one :class:`~envgym.mcp.client.McpConnection`.  ``describe_tools``
lists the server's tools as :class:`~envgym.sandbox.base.ToolSpec` (the env's dispatcher validates
arguments against their ``inputSchema`` before a call leaves envgym); ``call_tool`` returns a
:class:`~envgym.sandbox.base.CallOutcome`, exactly like a sandboxed bundle tool:

* a result with ``isError`` → ``CallError.EXCEPTION`` with the server's text;
* a hung server → ``CallError.TIMEOUT``; a dead one → ``CallError.CRASH``; a result the protocol
  does not allow → ``CallError.PROTOCOL``.  In each of these three cases the server is restarted
  before ``call_tool`` returns, so the next call finds it running (in-memory server state is lost,
  files on disk are kept, as with a restarted sandbox worker).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import mcp_types as types

from envgym.mcp.client import McpConnection, McpFailure, ServerSpec
from envgym.sandbox.base import CallError, CallOutcome, ToolSpec
from envgym.schema_guard import SchemaRefused, check_schema

log = logging.getLogger(__name__)

_ERRORS = {"timeout": CallError.TIMEOUT, "crash": CallError.CRASH, "protocol": CallError.PROTOCOL}
_SCHEMA_NOISE = frozenset({"$schema", "$id"})


class McpToolset:
    """The tools of one MCP server.

    Args:
        spec: how to start or reach the server (``{state_dir}`` is bound by :meth:`start`).
        prefix: prepended to every tool name (``"fs_"``), so two servers' tools cannot clash.
        call_timeout_s: the default per-call timeout (``call_tool(timeout_s=...)`` overrides it).
        connect_timeout_s: how long a start (process launch + handshake + tool list) may take.
        stderr: where a stdio server's stderr goes (default: discarded).
    """

    def __init__(
        self,
        spec: ServerSpec,
        *,
        prefix: str = "",
        call_timeout_s: float = 30.0,
        connect_timeout_s: float = 60.0,
        stderr: TextIO | None = None,
    ) -> None:
        self.spec = spec
        self.prefix = prefix
        self.call_timeout_s = call_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._stderr = stderr
        self._state_dir: Path | None = None
        self._conn: McpConnection | None = None
        self._specs: list[ToolSpec] | None = None
        self.restarts = 0  # restarts after a failed call (for tests and reports)
        #: tools the server listed whose input schema the host will not compile (remote or file
        #: ``$ref``, a pattern RE2 cannot run, too large…): name → why.  They are not offered.
        self.refused: dict[str, str] = {}

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, state_dir: Path | None = None) -> None:
        """(Re)start the server, bound to ``state_dir`` when its spec uses ``{state_dir}``."""
        self._state_dir = state_dir if state_dir is not None else self._state_dir
        self.close()
        spec = self.spec.bind(self._state_dir) if self._state_dir is not None else self.spec
        if spec.uses_state_dir:
            raise ValueError(
                f"the MCP server {spec.name} needs a state directory: start(state_dir)"
            )
        conn = McpConnection(spec, connect_timeout_s=self.connect_timeout_s, stderr=self._stderr)
        try:
            tools = conn.list_tools(timeout_s=self.connect_timeout_s)
        except McpFailure:
            conn.close()
            raise
        self._conn = conn
        if self._specs is None:
            self._specs = self._specs_of(tools)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @property
    def running(self) -> bool:
        return self._conn is not None and not self._conn.broken

    def _restart(self) -> None:
        self.restarts += 1
        try:
            self.start()
        except McpFailure:
            self._conn = None  # the next call tries again

    # -- tools -------------------------------------------------------------------------------
    def describe_tools(self, *, listing_dir: Path | None = None) -> list[ToolSpec]:
        """The server's tools (listed once, at the first start).

        A server that works on the episode's state directory, asked before any episode, is
        started once on a scratch copy of ``listing_dir`` (the bundle's initial state; else an
        empty folder) just to list its tools.
        """
        if self._specs is None and self._state_dir is None and self.spec.uses_state_dir:
            with tempfile.TemporaryDirectory(prefix="envgym-mcp-list-") as scratch:
                folder = Path(scratch) / "state"
                if listing_dir is not None and listing_dir.is_dir():
                    shutil.copytree(listing_dir, folder, symlinks=True)
                else:
                    folder.mkdir()
                self.start(folder)
                self.close()
                self._state_dir = None
        elif self._specs is None:
            self.start()
        assert self._specs is not None
        return list(self._specs)

    def owns(self, name: str) -> bool:
        return name.startswith(self.prefix) and any(s.name == name for s in self.describe_tools())

    def _specs_of(self, tools: list[types.Tool]) -> list[ToolSpec]:
        """The specs of the tools whose schemas pass :func:`~envgym.schema_guard.check_schema`.

        A refused tool is dropped with a warning, not the whole server: one tool with a remote
        ``$ref`` should not take its neighbours away, and a dropped tool is simply not offered
        (a call of it is an unknown tool, like any other name the server never listed)."""
        specs: list[ToolSpec] = []
        for tool in tools:
            spec = self._spec_of(tool)
            try:
                check_schema(spec.parameters, tool=spec.name)
            except SchemaRefused as err:
                reason = f"{err} (MCP server {self.spec.name})"
                self.refused[spec.name] = reason
                log.warning("dropping a tool: %s", reason)
                continue
            specs.append(spec)
        return specs

    def _spec_of(self, tool: types.Tool) -> ToolSpec:
        schema = {k: v for k, v in (tool.input_schema or {}).items() if k not in _SCHEMA_NOISE}
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        return ToolSpec(
            name=self.prefix + tool.name, description=tool.description or "", parameters=schema
        )

    def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> CallOutcome:
        """Call ``name`` (with the prefix) on the server; never raises on what the server does."""
        started = time.monotonic()
        remote = name.removeprefix(self.prefix)
        try:
            if not self.running:
                self.start()
            assert self._conn is not None
            result = self._conn.call_tool(remote, arguments, timeout_s or self.call_timeout_s)
        except McpFailure as err:
            self._restart()
            return CallOutcome(
                ok=False,
                error=_ERRORS.get(err.kind, CallError.CRASH),
                message=f"{err}; the server was restarted",
                duration_s=time.monotonic() - started,
            )
        text, value = render_result(result)
        if result.is_error:
            return CallOutcome(
                ok=False,
                error=CallError.EXCEPTION,
                message=text,
                duration_s=time.monotonic() - started,
            )
        return CallOutcome(
            ok=True, value=value, rendered=text, duration_s=time.monotonic() - started
        )


def render_result(result: types.CallToolResult) -> tuple[str, Any]:
    """(text for the agent, JSON value) of a tool result.

    Text blocks are joined by newlines; other blocks are named, not inlined (an image's base64 is
    no use to a text model).  Without content, the structured content is the value.
    """
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data)} base64 characters]")
        elif isinstance(block, types.EmbeddedResource):
            inner = block.resource
            parts.append(getattr(inner, "text", None) or f"[resource {inner.uri}]")
        else:  # a resource link
            parts.append(f"[resource link {getattr(block, 'uri', '?')}]")
    if parts:
        text = "\n".join(parts)
        return text, text
    structured = result.structured_content
    if structured is None:
        return "", ""
    return json.dumps(structured, ensure_ascii=False), structured
