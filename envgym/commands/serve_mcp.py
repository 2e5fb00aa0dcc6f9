"""``envgym serve-mcp ENV``: an env's tools (plus ``reset``/``submit``) as an MCP server.

stdio by default (an MCP client launches ``envgym serve-mcp ENV``); ``--transport http`` serves
streamable HTTP on ``--host`` (127.0.0.1 unless told otherwise) and ``--port`` at ``/mcp``.
One episode per MCP session (docs/MCP.md).
"""

from __future__ import annotations

import functools
import signal
import sys

import typer
from rich.console import Console


def register(app: typer.Typer) -> None:
    app.command("serve-mcp")(serve_mcp_command)


def serve_mcp_command(
    target: str = typer.Argument(..., help="environment id or bundle directory"),
    transport: str = typer.Option("stdio", "--transport", help="stdio | http (streamable HTTP)"),
    host: str = typer.Option("127.0.0.1", "--host", help="HTTP: the address to bind"),
    port: int = typer.Option(8000, "--port", help="HTTP: the port to bind"),
    path: str = typer.Option("/mcp", "--path", help="HTTP: the endpoint's path"),
    max_sessions: int = typer.Option(
        32, "--max-sessions", min=1, help="HTTP: open sessions (each holds an env)"
    ),
    idle_timeout: float = typer.Option(
        1800.0, "--idle-timeout", help="HTTP: seconds before an idle session closes"
    ),
    sandbox: str = typer.Option(
        "bwrap", "--sandbox", help="bwrap | docker | inprocess (trusted bundles only)"
    ),
) -> None:
    """Serve an environment over MCP, one episode per session."""
    err = Console(stderr=True)
    if transport not in ("stdio", "http"):
        err.print(f"[bold red]error:[/] --transport must be stdio or http, not {transport!r}")
        raise typer.Exit(2)
    import anyio

    from envgym import registry
    from envgym.mcp.serve import EnvServer

    try:
        factory = registry.env_factory(target, sandbox=sandbox)
        server = EnvServer(functools.partial(factory), name=f"envgym:{target}")
    except (KeyError, ValueError) as exc:
        err.print(f"[bold red]error:[/] {str(exc).strip(chr(34))}")
        raise typer.Exit(2) from None
    # SIGTERM ends the process through `finally`, so the sandboxes of open episodes are closed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        if transport == "stdio":
            anyio.run(server.run_stdio)
        else:
            err.print(f"envgym: serving {target} over MCP at http://{host}:{port}{path}")
            anyio.run(
                functools.partial(
                    server.run_http,
                    host=host,
                    port=port,
                    path=path,
                    max_sessions=max_sessions,
                    idle_timeout_s=idle_timeout,
                )
            )
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
