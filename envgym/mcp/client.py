"""One connection to an MCP server, used from synchronous code, with per-call timeouts.

The ``mcp`` SDK's :class:`mcp.Client` is async and must be entered and left by the same task,
so :class:`McpConnection` keeps a private event loop: one *owner* task holds the ``Client``
open, and each call runs the loop (in the caller's thread) until the call's result or its
timeout.  Whatever
goes wrong surfaces as one of three exceptions, all :class:`McpFailure`:

* :class:`McpTimeout`: no answer within the call's timeout (a hung server);
* :class:`McpDied`: the server could not be started, exited, or the connection broke;
* :class:`McpMalformed`: the server answered something the protocol does not allow.

After a failure the connection is unusable; :mod:`envgym.mcp.toolset` restarts it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import mcp_types as types
import pydantic

STOP_TIMEOUT_S = 8.0  # closing stdin, SIGTERM, SIGKILL: the SDK waits at most ~6 s in all


class McpFailure(RuntimeError):
    """A call to an MCP server did not produce a result."""

    kind = "crash"


class McpTimeout(McpFailure):
    kind = "timeout"


class McpDied(McpFailure):
    kind = "crash"


class McpMalformed(McpFailure):
    kind = "protocol"


@dataclass(frozen=True)
class ServerSpec:
    """How to reach an MCP server: a stdio ``command`` (argv) or a streamable-HTTP ``url``.

    ``{state_dir}`` anywhere in ``command``, ``url``, ``cwd`` or a value of ``env`` is replaced by
    the episode's state directory (:meth:`bind`), so a server can work on the files an env's
    verifier checks (the reference memory server takes its file's path only as ``MEMORY_FILE_PATH``).
    """

    command: tuple[str, ...] = ()
    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    name: str = "mcp"

    def __post_init__(self) -> None:
        if bool(self.command) == (self.url is not None):
            raise ValueError(
                "a ServerSpec needs exactly one of command (stdio) or url (streamable HTTP)"
            )
        object.__setattr__(self, "command", tuple(self.command))

    @property
    def uses_state_dir(self) -> bool:
        parts = (*self.command, self.url, self.cwd, *self.env.values())
        return any("{state_dir}" in (p or "") for p in parts)

    def bind(self, state_dir: Path | str) -> ServerSpec:
        """This spec with ``{state_dir}`` filled in."""

        def fill(text: str | None) -> str | None:
            return None if text is None else text.replace("{state_dir}", str(state_dir))

        return replace(
            self,
            command=tuple(fill(p) or "" for p in self.command),
            url=fill(self.url),
            cwd=fill(self.cwd),
            env={k: fill(v) or "" for k, v in self.env.items()},
        )


class McpConnection:
    """A started MCP client session; ``close`` stops the server process (stdio).

    The connection's event loop runs only while a call is in flight, in the caller's thread
    (``run_until_complete``): no thread hop per call, so a call costs what it costs from the SDK
    directly.  A caller that is itself inside a running event loop is served by a one-worker
    thread instead.  One call at a time (a lock serializes callers).
    """

    def __init__(
        self, spec: ServerSpec, *, connect_timeout_s: float = 30.0, stderr: TextIO | None = None
    ) -> None:
        self.spec = spec
        # A stdio server's stderr: the caller's stream, else a private file whose tail explains
        # a server that dies (a start that fails with "Connection closed" says nothing alone).
        self._stderr: TextIO = (  # TextIO: what the SDK's stdio_client takes
            stderr
            if stderr is not None
            else tempfile.TemporaryFile("a+", encoding="utf-8", errors="replace")
        )
        self._own_stderr = stderr is None
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._helper: concurrent.futures.ThreadPoolExecutor | None = None
        self._client: Any = None
        self.broken = False
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._owner = self._loop.create_task(self._own())
        try:
            self._drive(self._started(), connect_timeout_s)
        except TimeoutError:
            self.close()
            raise McpTimeout(
                f"the MCP server {spec.name} did not start within {connect_timeout_s:g}s"
            ) from None
        except Exception as err:  # noqa: BLE001 - any start failure is a dead server
            tail = self.stderr_tail()
            self.close()
            raise McpDied(
                f"the MCP server {spec.name} could not be started: {_describe(err)}{tail}"
            ) from None

    def _transport(self) -> Any:
        if self.spec.url is not None:
            return self.spec.url
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=self.spec.command[0],
            args=list(self.spec.command[1:]),
            env=dict(self.spec.env) or None,
            cwd=self.spec.cwd,
        )
        return stdio_client(params, errlog=self._stderr)

    async def _own(self) -> None:
        """Hold the SDK client open (it must be entered and left by one task) until stopped."""
        from mcp import Client

        try:
            async with Client(self._transport()) as client:
                _skip_output_schemas(client)
                self._client = client
                self._ready.set()
                await self._stop.wait()
        finally:
            self.broken = True

    async def _started(self) -> None:
        ready = asyncio.ensure_future(self._ready.wait())
        await asyncio.wait({ready, self._owner}, return_when=asyncio.FIRST_COMPLETED)
        if not self._ready.is_set():
            ready.cancel()
            self._owner.result()  # raises what ended the owner
            raise RuntimeError("the connection closed during the handshake")

    async def _finished(self) -> None:
        await self._owner

    def _drive(self, coro: Any, timeout_s: float) -> Any:
        """Run ``coro`` on the connection's loop within ``timeout_s`` (TimeoutError past it)."""
        bounded = asyncio.wait_for(coro, timeout_s)
        with self._lock:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # the usual case: a plain thread
                return self._loop.run_until_complete(bounded)
            if self._helper is None:
                self._helper = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix=f"mcp-{self.spec.name}"
                )
            return self._helper.submit(self._loop.run_until_complete, bounded).result()

    def _run(self, coro: Any, timeout_s: float, what: str) -> Any:
        if self.broken or self._client is None:
            coro.close()
            raise McpDied(f"the MCP server {self.spec.name} is not running")
        try:
            return self._drive(coro, timeout_s)
        except TimeoutError:
            self.broken = True
            raise McpTimeout(
                f"the MCP server {self.spec.name} did not answer {what} within {timeout_s:g}s"
            ) from None
        except pydantic.ValidationError as err:
            self.broken = True
            raise McpMalformed(
                f"the MCP server {self.spec.name} answered {what} with a malformed result "
                f"({err.error_count()} problems)"
            ) from None
        except Exception as err:  # noqa: BLE001 - a broken pipe, a closed stream, an RPC error
            self.broken = True
            raise McpDied(
                f"the MCP server {self.spec.name} failed {what}: {_describe(err)}"
                f"{self.stderr_tail()}"
            ) from None

    def list_tools(self, timeout_s: float = 30.0) -> list[types.Tool]:
        async def all_pages() -> list[types.Tool]:
            tools: list[types.Tool] = []
            cursor: str | None = None
            while True:
                page = await self._client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools

        return self._run(all_pages(), timeout_s, "tools/list")

    def call_tool(
        self, name: str, arguments: dict[str, Any], timeout_s: float
    ) -> types.CallToolResult:
        result = self._run(
            self._client.call_tool(name, arguments), timeout_s, f"the call of {name}"
        )
        if not isinstance(result, types.CallToolResult):
            self.broken = True
            raise McpMalformed(
                f"the MCP server {self.spec.name} answered {name} with a {type(result).__name__}"
            )
        return result

    def stderr_tail(self, chars: int = 400) -> str:
        """The end of a stdio server's stderr (when envgym holds it), as ``"; stderr: …"``."""
        if not self._own_stderr or self._stderr.closed:
            return ""
        try:
            self._stderr.flush()
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - chars * 4))
            tail = " ".join(self._stderr.read().split())[-chars:]
        except (OSError, ValueError):
            return ""
        return f"; stderr: {tail}" if tail else ""

    def close(self) -> None:
        """Stop the session and the server (idempotent; bounded by STOP_TIMEOUT_S)."""
        if self._loop.is_closed():
            return
        self._stop.set()
        try:
            self._drive(self._finished(), STOP_TIMEOUT_S)
        except BaseException:  # noqa: BLE001 - a broken connection ends as it can
            self._owner.cancel()
            with contextlib.suppress(BaseException):
                self._drive(asyncio.gather(self._owner, return_exceptions=True), STOP_TIMEOUT_S)
        with self._lock:
            pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                with contextlib.suppress(BaseException):
                    self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()
        if self._helper is not None:
            self._helper.shutdown(wait=False)
        if self._own_stderr:
            self._stderr.close()


async def _no_output_check(name: str, result: types.CallToolResult) -> None:
    """Stands in for the SDK's ``validate_tool_result`` (see :func:`_skip_output_schemas`)."""


def _skip_output_schemas(client: Any) -> None:
    """Turn off the SDK's check of results against a tool's ``outputSchema``.

    The SDK compiles the server's output schema with jsonschema and runs its ``pattern`` with
    Python's backtracking ``re`` inside the event loop, where no call timeout can interrupt it:
    a hostile server would block the host with a pattern like ``^(a+)+$``.  envgym gains nothing
    from the check (a result is untrusted text for the agent either way), so it is skipped; the
    SDK calls it as ``session.validate_tool_result``, which this instance attribute replaces."""
    client.session.validate_tool_result = _no_output_check


def _describe(err: BaseException) -> str:
    inner = getattr(err, "exceptions", None)  # an ExceptionGroup from the SDK's task groups
    if inner:
        return _describe(inner[0])
    return f"{type(err).__name__}: {err}"[:300]
