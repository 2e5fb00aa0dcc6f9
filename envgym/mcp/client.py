"""One connection to an MCP server, used from synchronous code, with per-call timeouts.

The ``mcp`` SDK's :class:`mcp.Client` is async and must be entered and left by the same task,
so :class:`McpConnection` runs a private event loop in a daemon thread: one *owner* task holds
the ``Client`` open; calls are scheduled on that loop and waited for with a timeout.  Whatever
goes wrong surfaces as one of three exceptions, all :class:`McpFailure`:

* :class:`McpTimeout`: no answer within the call's timeout (a hung server);
* :class:`McpDied`: the server could not be started, exited, or the connection broke;
* :class:`McpMalformed`: the server answered something the protocol does not allow.

After a failure the connection is unusable; :mod:`envgym.mcp.toolset` restarts it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

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

    ``{state_dir}`` anywhere in ``command``, ``url`` or ``cwd`` is replaced by the episode's state
    directory (:meth:`bind`), so a server can work on the files an env's verifier checks.
    """

    command: tuple[str, ...] = ()
    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    name: str = "mcp"

    def __post_init__(self) -> None:
        if bool(self.command) == (self.url is not None):
            raise ValueError("a ServerSpec needs exactly one of command (stdio) or url (streamable HTTP)")
        object.__setattr__(self, "command", tuple(self.command))

    @property
    def uses_state_dir(self) -> bool:
        return any("{state_dir}" in (p or "") for p in (*self.command, self.url, self.cwd))

    def bind(self, state_dir: Path | str) -> ServerSpec:
        """This spec with ``{state_dir}`` filled in."""
        def fill(text: str | None) -> str | None:
            return None if text is None else text.replace("{state_dir}", str(state_dir))

        return replace(self, command=tuple(fill(p) or "" for p in self.command), url=fill(self.url),
                       cwd=fill(self.cwd))


class McpConnection:
    """A started MCP client session; ``close`` stops the server process (stdio)."""

    def __init__(self, spec: ServerSpec, *, connect_timeout_s: float = 30.0, stderr: IO[str] | None = None) -> None:
        self.spec = spec
        # A stdio server's stderr: the caller's stream, else a private file whose tail explains
        # a server that dies (a start that fails with "Connection closed" says nothing alone).
        self._stderr = stderr if stderr is not None else tempfile.TemporaryFile("a+", encoding="utf-8", errors="replace")
        self._own_stderr = stderr is None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp-{spec.name}", daemon=True)
        self._thread.start()
        self._stop: asyncio.Event | None = None
        self._client: Any = None
        self._owner: concurrent.futures.Future[None] | None = None
        self.broken = False
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._owner = asyncio.run_coroutine_threadsafe(self._own(ready), self._loop)
        try:
            ready.result(connect_timeout_s)
        except concurrent.futures.TimeoutError:
            self.close()
            raise McpTimeout(f"the MCP server {spec.name} did not start within {connect_timeout_s:g}s") from None
        except Exception as err:  # noqa: BLE001 - any start failure is a dead server
            tail = self.stderr_tail()
            self.close()
            raise McpDied(f"the MCP server {spec.name} could not be started: {_describe(err)}{tail}") from None

    def _transport(self) -> Any:
        if self.spec.url is not None:
            return self.spec.url
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.spec.command[0], args=list(self.spec.command[1:]),
                                       env=dict(self.spec.env) or None, cwd=self.spec.cwd)
        return stdio_client(params, errlog=self._stderr)

    async def _own(self, ready: concurrent.futures.Future[None]) -> None:
        from mcp import Client

        self._stop = asyncio.Event()
        try:
            async with Client(self._transport()) as client:
                self._client = client
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as err:  # noqa: BLE001 - reported through ready, or the connection is broken
            self.broken = True
            if not ready.done():
                ready.set_exception(err if isinstance(err, Exception) else RuntimeError(repr(err)))
        finally:
            self.broken = True

    def _run(self, coro: Any, timeout_s: float, what: str) -> Any:
        if self.broken or self._client is None:
            coro.close()
            raise McpDied(f"the MCP server {self.spec.name} is not running")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self.broken = True
            raise McpTimeout(f"the MCP server {self.spec.name} did not answer {what} within {timeout_s:g}s") from None
        except pydantic.ValidationError as err:
            self.broken = True
            raise McpMalformed(f"the MCP server {self.spec.name} answered {what} with a malformed result "
                               f"({err.error_count()} problems)") from None
        except Exception as err:  # noqa: BLE001 - a broken pipe, a closed stream, an RPC error
            self.broken = True
            raise McpDied(f"the MCP server {self.spec.name} failed {what}: {_describe(err)}"
                          f"{self.stderr_tail()}") from None

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

    def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float) -> types.CallToolResult:
        result = self._run(self._client.call_tool(name, arguments), timeout_s, f"the call of {name}")
        if not isinstance(result, types.CallToolResult):
            self.broken = True
            raise McpMalformed(f"the MCP server {self.spec.name} answered {name} with a {type(result).__name__}")
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
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._owner is not None:
            try:
                self._owner.result(STOP_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - closing a broken connection
                self._owner.cancel()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()
        if self._own_stderr:
            self._stderr.close()


def _describe(err: BaseException) -> str:
    inner = getattr(err, "exceptions", None)  # an ExceptionGroup from the SDK's task groups
    if inner:
        return _describe(inner[0])
    return f"{type(err).__name__}: {err}"[:300]
