"""What bundle code (tools, solutions, verifiers) may import from envgym.

Stdlib only: this module is loaded inside sandboxes (bubblewrap, Docker) whose Python
may have nothing else installed.  A bundle's ``tools.py`` reaches its episode state with::

    from envgym.runtime import sqlite, state_dir

    def get_all_cities() -> list[str]:
        \"\"\"Get all cities from the database.\"\"\"
        return [r[0] for r in sqlite().execute("SELECT name FROM cities")]

The state directory is swapped on every ``reset`` (copy-on-reset), so tools must look it up
through these functions on each call rather than caching paths or connections themselves.
"""

from __future__ import annotations

import sqlite3
from contextvars import ContextVar
from pathlib import Path

DEFAULT_DB = "db.sqlite"
# A bundle's code files, in load order (docs/BUNDLE.md).  Defined here because this is the envgym
# module that both the host and the sandbox worker import: the worker (sandbox/runner.py) runs
# in a jail that stages only a few stdlib-only modules (sandbox/worker_stage.py), so it cannot
# import envgym.bundle (jsonschema), which re-exports this tuple as the bundle format's.
CODE_FILES = ("tools.py", "solution.py", "verifier.py")
# Data a bundle's code reads at import, before any episode state exists (``load`` runs before
# ``reset``): a fixed tools.py that builds its tools from a table (docs/BUNDLE.md, "tools.json").
# Copied into the sandbox with the code files and bounded like them.
CODE_DATA = ("tools.json",)
# Where a sandbox's staged copy of the code holds the host's compiled code of those files
# (envgym/sandbox/bytecode.py); not a bundle file name, and the stage copies nothing else.
BYTECODE_DIR = ".bytecode"

# A ContextVar rather than a global so several in-process environments can share one
# interpreter; the sandbox worker simply sets it once per reset.
_state_dir: ContextVar[Path | None] = ContextVar("envgym_state_dir", default=None)
_connections: dict[tuple[str, str], sqlite3.Connection] = {}


def state_dir() -> Path:
    """The current episode's private, writable copy of the bundle's ``state/`` folder."""
    path = _state_dir.get()
    if path is None:
        raise RuntimeError("envgym.runtime: no episode state is active (call reset first)")
    return path


def sqlite(name: str = DEFAULT_DB) -> sqlite3.Connection:
    """A cached SQLite connection to ``state_dir()/name`` for the current episode."""
    root = state_dir()
    key = (str(root), name)
    conn = _connections.get(key)
    if conn is None:
        path = root / name
        if not path.exists():
            raise FileNotFoundError(f"state database {name!r} not found in the episode state")
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        _connections[key] = conn
    return conn


def activate(path: Path | None) -> None:
    """Point the runtime at a new episode state (called by sandboxes, not by bundle code)."""
    previous = _state_dir.get()
    if previous is not None and previous != path:
        close_connections(previous)
    _state_dir.set(path)


def close_connections(root: Path) -> None:
    for key in [k for k in _connections if k[0] == str(root)]:
        _connections.pop(key).close()
