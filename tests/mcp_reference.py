"""The third-party MCP servers the tests consume, installed once into the envgym cache.

* ``@modelcontextprotocol/server-filesystem`` (npm) into ``<cache>/mcp/server-filesystem-<v>``;
* ``mcp-server-git`` (PyPI) into its own venv at ``<cache>/mcp/server-git-<v>``: it pins its own
  ``mcp`` (older releases need ``mcp<2``), so it never shares envgym's environment.

Both come from the package registries through their ordinary clients (``npm``, ``pip``), pinned,
built atomically by :func:`envgym.cache.built_once` (a second run finds them and takes no time).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from envgym.cache import built_once, cache_root

FS_PACKAGE, FS_VERSION = "@modelcontextprotocol/server-filesystem", "2026.8.31"
GIT_PACKAGE, GIT_VERSION = "mcp-server-git", "2026.10.19"
MARKER = "installed.json"
INSTALL_TIMEOUT_S = 600


class MissingTool(RuntimeError):
    """A system tool the install needs (node, npm, python3.11) is not on PATH."""


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} … failed ({done.returncode}):\n{done.stderr[-2000:]}")


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise MissingTool(f"{tool} is not installed (scripts/setup.sh installs it)")
    return path


def filesystem_server() -> list[str]:
    """The argv that starts the filesystem server (append the allowed directories)."""
    node = _need("node")

    def build(folder: Path) -> None:
        _run([_need("npm"), "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--no-save",
              f"{FS_PACKAGE}@{FS_VERSION}"], cwd=folder)
        (folder / MARKER).write_text(json.dumps({"package": FS_PACKAGE, "version": FS_VERSION}))

    folder = built_once(cache_root() / "mcp" / f"server-filesystem-{FS_VERSION}", build, marker=MARKER)
    script = folder / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
    return [node, str(script)]


def git_server() -> list[str]:
    """The argv that starts the git server (append ``--repository PATH``)."""
    python = shutil.which("python3.11") or sys.executable

    def build(folder: Path) -> None:
        venv = folder / "venv"
        _run([python, "-m", "venv", str(venv)], cwd=folder)
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              f"{GIT_PACKAGE}=={GIT_VERSION}"], cwd=folder)
        (folder / MARKER).write_text(json.dumps({"package": GIT_PACKAGE, "version": GIT_VERSION}))

    folder = built_once(cache_root() / "mcp" / f"server-git-{GIT_VERSION}", build, marker=MARKER)
    # `python -m`, not the console script: the script's shebang names the scratch folder the
    # venv was built in before built_once renamed it into place.
    return [str(folder / "venv" / "bin" / "python"), "-m", "mcp_server_git"]
