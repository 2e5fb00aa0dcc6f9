"""Registers the offline MCP suite: one env per service, ``mcp-suite-<service>-v0``.

Loaded through the ``envgym.envs`` entry point.  Each env is a ``BundleEnv`` over the service's
category (its initial state and tasks, built once into the envgym cache) with the service's real
MCP server as its toolset; ``envgym.envs.mcp_suite.check`` checks them (gold passes, no-op fails).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from envgym.core import Env
from envgym.envs.mcp_suite.services import CATEGORIES
from envgym.registry import register, register_check

__all__ = ["CATEGORIES", "register_envs"]
SERVERS = {
    "filesystem": "the reference filesystem server (npm @modelcontextprotocol/server-filesystem)",
    "git": "mcp-server-git (PyPI, own venv)",
    "sqlite": "mcp-server-sqlite (PyPI, own venv)",
}


def _make(service: str, **kwargs: Any) -> Env:
    from envgym.envs.mcp_suite.suite import make_env

    return make_env(service, CATEGORIES[service], **kwargs)


def _bundle_dir(service: str) -> Path:
    from envgym.envs.mcp_suite.suite import build

    return build(service, CATEGORIES[service])


def _claims(target: str) -> bool:
    """``mcp-suite``, ``mcp-suite/<service>[/<category>]`` or ``mcp-suite-<service>-v0``."""
    return target == "mcp-suite" or target.startswith(("mcp-suite/", "mcp-suite-"))


def _check(target: str, **kwargs: Any) -> int:
    # MCPMark-layout tasks are judged on the final state, not on a submitted answer, so their
    # check (gold passes, no-op fails, through the real MCP servers) is
    # envgym/envs/mcp_suite/check.py.
    from envgym.envs.mcp_suite.check import main

    return main(target, **kwargs)


def register_envs() -> None:
    register_check("mcp-suite", _claims, _check)
    for service, category in CATEGORIES.items():
        # bundle_dir: `envgym eval` keys results by the bundle's content hash.  The bundle alone
        # (without its MCP server) is not the env: its gold solution needs the server's tools,
        # so it is checked by envgym.envs.mcp_suite.check, not envgym.check.check_bundle.
        register(f"mcp-suite-{service}-v0", functools.partial(_make, service), override=True,
                 bundle_dir=functools.partial(_bundle_dir, service),
                 description=f"Offline MCP suite ({category}, MCPMark layout): state-verified tasks over "
                             f"{SERVERS[service]}.")  # fmt: skip
