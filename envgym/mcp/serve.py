"""Serving an envgym env over MCP (stdio, streamable HTTP): one episode per MCP session.

The server is the ``mcp`` SDK's low-level :class:`mcp.server.lowlevel.Server` (2.x): the env's
tools already carry JSON Schemas, so they are listed as they are, without Python signatures.
Each MCP session owns one :class:`~envgym.mcp.episode.EpisodeDriver`.  Env calls block
(sandboxes), so they run in worker threads, one at a time per session.

Over stdio the session is the server process (it serves one client), in either protocol era (a
2026-07-28 connection keeps no state of its own).  Over HTTP the session is one
``Mcp-Session-Id``: the driver lives in that connection's ``state`` and is closed when the
session ends.  A 2026-07-28 HTTP request is a stateless single exchange, so the HTTP server does
not answer ``server/discover``: ``mode="auto"`` clients then fall back to the ``initialize``
handshake and get a session; a tool call that still arrives sessionless gets a tool error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

from envgym.core import Env
from envgym.mcp.episode import RESET, SUBMIT, EpisodeDriver, Reply, control_tools

_STATE_KEY = "envgym.episode"


class EnvServer:
    """An env factory served over MCP.

    Args:
        factory: builds a fresh env for each session (``functools.partial(envgym.make, ID, ...)``).
        name: the server's name in the MCP handshake.
    """

    def __init__(self, factory: Callable[[], Env], *, name: str = "envgym") -> None:
        self.factory = factory
        self._spare_lock = threading.Lock()
        self._spare: Env | None = factory()  # also tells the tool list; the first session takes it
        self._tools = self._list(self._spare)
        self.server: Server[Any] = Server(
            name, on_list_tools=self._on_list_tools, on_call_tool=self._on_call_tool
        )
        self._http = False  # set by http_app: sessions then come from Mcp-Session-Id only
        self._process: dict[str, Any] = {}  # stdio: the one session's state

    @staticmethod
    def _list(env: Env) -> list[types.Tool]:
        # Unseeded: a fixed seed here would make every session's unseeded resets one sequence.
        obs, _ = env.reset()
        own = [t["function"] for t in obs["tools"]]
        clash = {f["name"] for f in own} & {RESET, SUBMIT}
        if clash:
            raise ValueError(
                f"the env has tools named {sorted(clash)}, which the MCP server reserves"
            )
        return [
            types.Tool(
                name=f["name"], description=f.get("description") or "", input_schema=f["parameters"]
            )
            for f in [c["function"] for c in control_tools()] + own
        ]

    def close(self) -> None:
        """Close the spare env and the stdio session's env (HTTP sessions close with their session)."""
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.close()
        driver = self._process.pop(_STATE_KEY, {}).get("driver")
        if driver is not None:
            driver.close()

    def _take_env(self) -> Env:
        with self._spare_lock:
            spare, self._spare = self._spare, None
        return spare if spare is not None else self.factory()

    # -- handlers -------------------------------------------------------------------------------
    async def _on_list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tools)

    async def _on_call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            connection = ctx.session._connection  # noqa: SLF001 - the SDK exposes it to Context only
            if self._http and connection.session_id is None:
                return _result(
                    Reply(
                        [
                            "Error: envgym keeps one episode per MCP session; this request has "
                            "none (connect with the initialize handshake, e.g. mode='legacy')."
                        ],
                        True,
                    )
                )
            session = await self._session(connection)
            async with session["lock"]:
                driver: EpisodeDriver = session["driver"]
                reply = await anyio.to_thread.run_sync(
                    driver.call, params.name, params.arguments or {}
                )
            return _result(reply)
        except Exception as err:  # noqa: BLE001 - an error reply, never a dropped connection
            return _result(
                Reply(
                    [f"Error: the envgym server could not run {params.name}: {type(err).__name__}"],
                    True,
                )
            )

    async def _session(self, connection: Any) -> dict[str, Any]:
        state = connection.state if self._http else self._process
        if _STATE_KEY not in state:
            state[_STATE_KEY] = {"lock": anyio.Lock(), "driver": None}
        session = state[_STATE_KEY]
        async with session["lock"]:
            if session["driver"] is None:
                env = await anyio.to_thread.run_sync(self._take_env)
                driver = EpisodeDriver(env)
                session["driver"] = driver
                if self._http:
                    connection.exit_stack.push_async_callback(
                        anyio.to_thread.run_sync, driver.close
                    )
        return session

    # -- transports ------------------------------------------------------------------------------
    async def run_stdio(self) -> None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    def http_app(
        self,
        *,
        host: str = "127.0.0.1",
        path: str = "/mcp",
        max_sessions: int = 32,
        idle_timeout_s: float = 1800.0,
    ) -> Any:
        """The Starlette app serving streamable HTTP at ``path`` (DNS-rebinding checks for localhost).

        Each session holds an env (a sandbox), so at most ``max_sessions`` are open at once (a
        request that would open one more gets HTTP 503) and a session idle for ``idle_timeout_s``
        is closed with its env.
        """
        self._http = True
        # No server/discover over HTTP: sessionless (2026-07-28) clients fall back to the handshake.
        self.server._request_handlers.pop("server/discover", None)  # noqa: SLF001 - no public switch
        return self.server.streamable_http_app(
            streamable_http_path=path,
            host=host,
            max_sessions=max_sessions,
            session_idle_timeout=idle_timeout_s,
        )

    async def run_http(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        path: str = "/mcp",
        max_sessions: int = 32,
        idle_timeout_s: float = 1800.0,
        log_level: str = "warning",
    ) -> None:
        import uvicorn

        app = self.http_app(
            host=host, path=path, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s
        )
        await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level)).serve()


def _result(reply: Reply) -> types.CallToolResult:
    content: list[Any] = [types.TextContent(type="text", text=t) for t in reply.texts]
    return types.CallToolResult(
        content=content, structured_content=reply.data or None, is_error=reply.is_error
    )
