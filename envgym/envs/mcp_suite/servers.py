"""The suite's MCP servers: installed once into the envgym cache from the package registries.

* filesystem: npm ``@modelcontextprotocol/server-filesystem``;
* git: PyPI ``mcp-server-git`` in its own venv (it pins its own ``mcp``);
* sqlite: PyPI ``mcp-server-sqlite`` in its own venv with ``mcp<2`` (its last release, 2025.4.25,
  is written against the 1.x SDK; it must never change envgym's environment).

The filesystem and git installs use the same pinned versions and cache folders as
``tests/mcp_reference.py``, so the tests and the suite share one install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from envgym.cache import built_once, cache_root
from envgym.mcp.client import ServerSpec

FS_PACKAGE, FS_VERSION = "@modelcontextprotocol/server-filesystem", "2026.8.31"
GIT_PACKAGE, GIT_VERSION = "mcp-server-git", "2026.10.19"
SQLITE_PACKAGE, SQLITE_VERSION = "mcp-server-sqlite", "2025.4.25"
MARKER = "installed.json"
INSTALL_TIMEOUT_S = 600
SERVICES = ("filesystem", "git", "sqlite")


class MissingTool(RuntimeError):
    """A system tool an install needs (node, npm, python3.11) is not on PATH."""


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:4])} … failed ({done.returncode}):\n{done.stderr[-2000:]}"
        )


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise MissingTool(f"{tool} is not installed (scripts/setup.sh installs it)")
    return path


def _venv(name: str, version: str, requirements: list[str]) -> Path:
    """A private venv holding ``requirements`` (built once); returns its python."""
    python = shutil.which("python3.11") or sys.executable

    def build(folder: Path) -> None:
        venv = folder / "venv"
        _run([python, "-m", "venv", str(venv)], cwd=folder)
        _run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                *requirements,
            ],
            cwd=folder,
        )
        (folder / MARKER).write_text(json.dumps({"package": name, "version": version}))

    folder = built_once(cache_root() / "mcp" / f"server-{name}-{version}", build, marker=MARKER)
    # `python -m`/`-c`, not console scripts: their shebangs name the scratch build folder.
    return folder / "venv" / "bin" / "python"


def filesystem_command() -> list[str]:
    node = _need("node")

    def build(folder: Path) -> None:
        _run(
            [
                _need("npm"),
                "install",
                "--prefix",
                str(folder),
                "--no-audit",
                "--no-fund",
                "--no-save",
                f"{FS_PACKAGE}@{FS_VERSION}",
            ],
            cwd=folder,
        )
        (folder / MARKER).write_text(json.dumps({"package": FS_PACKAGE, "version": FS_VERSION}))

    folder = built_once(
        cache_root() / "mcp" / f"server-filesystem-{FS_VERSION}", build, marker=MARKER
    )
    return [
        node,
        str(
            folder
            / "node_modules"
            / "@modelcontextprotocol"
            / "server-filesystem"
            / "dist"
            / "index.js"
        ),
    ]


def git_command() -> list[str]:
    python = _venv("git", GIT_VERSION, [f"{GIT_PACKAGE}=={GIT_VERSION}"])
    return [str(python), "-m", "mcp_server_git"]


def sqlite_command() -> list[str]:
    python = _venv("sqlite", SQLITE_VERSION, [f"{SQLITE_PACKAGE}=={SQLITE_VERSION}", "mcp<2"])
    # The package has no __main__: call its console-script entry point.
    return [str(python), "-c", "import sys; from mcp_server_sqlite import main; sys.exit(main())"]


def confined(argv: list[str]) -> list[str]:
    """``argv`` run in a jail (``envgym/sandbox/jail_exec.py``, the jail builder every envgym
    jail uses): an unprivileged uid without capabilities, own pid/ipc/uts/net namespaces, a
    read-only view of the system directories and of the server's own install folder, and the
    episode's state copy as the only writable place besides a private ``/tmp``; its memory and
    process count bounded together (a cgroup where the host has one) and per process (rlimits).

    The servers' own checks are not enough: ``mcp-server-sqlite`` runs any SQL, and
    ``ATTACH DATABASE '/any/path'`` creates files wherever the server's user may write (the
    verifier's code, a ``.pth`` in a venv) — a way to reward without solving — and a server
    running as root could remount ``/`` writable.  So without bubblewrap the suite refuses to
    start a server; ``server_spec(..., confine=False)`` is the explicit choice of a trusted setup.
    """
    from envgym.sandbox.bwrap import bwrap_available
    from envgym.sandbox.jail import python_executable

    if not bwrap_available():
        raise MissingTool(
            "bubblewrap (bwrap) is not usable here, and an unconfined MCP server can write outside "
            "the episode's state (sqlite ATTACH, a .pth beside the verifier): install bubblewrap "
            "(scripts/setup.sh), or pass confine=False to server_spec for a trusted setup"
        )
    launcher = Path(__file__).resolve().parents[3] / "envgym" / "sandbox" / "jail_exec.py"
    readonly: list[str] = []
    for path in _program_paths(argv):
        readonly += ["--ro", path]
    return [
        str(python_executable()),
        "-I",
        "-S",
        "-B",
        str(launcher),
        "--rw",
        "{state_dir}",
        *readonly,
        "--",
        *argv,
    ]


def _program_paths(argv: list[str]) -> list[str]:
    """Host paths the server needs to see: the install folder (in the envgym cache) of every
    argv entry inside one, and the prefix of the interpreter a venv's python links to."""
    installs = (cache_root() / "mcp").resolve()
    found: set[str] = set()
    for part in argv:
        if not part.startswith("/"):
            continue
        path = Path(part)
        if path.resolve().is_relative_to(installs) or path.is_relative_to(installs):
            relative = (path if path.is_relative_to(installs) else path.resolve()).relative_to(
                installs
            )
            if relative.parts:
                found.add(str(installs / relative.parts[0]))
        real = Path(os.path.realpath(part))
        if real.is_file() and os.access(real, os.X_OK) and not real.is_relative_to("/usr"):
            found.add(
                str(real.parents[1])
            )  # .../bin/python3.11 -> its prefix (stdlib, lib-dynload)
    return sorted(found)


def server_spec(service: str, *, confine: bool = True) -> ServerSpec:
    """How to start ``service``'s server on an episode's state (see ``layout.STATE_ENV``).

    Each server works on the episode's state copy: the filesystem server's only allowed directory
    is ``{state_dir}``, the git server's ``--repository`` is ``{state_dir}/repo``, the sqlite
    server opens ``{state_dir}/db.sqlite``; with ``confine`` (:func:`confined`) the process can
    write nowhere else either.
    """
    wrap = confined if confine else list
    if service == "filesystem":
        return ServerSpec(
            command=tuple(wrap([*filesystem_command(), "{state_dir}"])), name="filesystem"
        )
    if service == "git":
        # The episode copy may belong to the sandbox's user (bwrap chowns it), not the server's:
        # trust it (the server is confined to --repository anyway), or git refuses "dubious ownership".
        return ServerSpec(
            command=tuple(wrap([*git_command(), "--repository", "{state_dir}/repo"])),
            name="git",
            env={
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "safe.directory",
                "GIT_CONFIG_VALUE_0": "*",
            },
        )
    if service == "sqlite":
        return ServerSpec(
            command=tuple(wrap([*sqlite_command(), "--db-path", "{state_dir}/db.sqlite"])),
            name="sqlite",
            cwd="{state_dir}",
        )
    raise ValueError(f"unknown MCP service {service!r} (known: {', '.join(SERVICES)})")
