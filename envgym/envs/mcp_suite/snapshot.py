"""Initial-state snapshots: ``initial_state/<service>/<category>/`` materialized into a state folder.

* filesystem: the folder's files, copied as they are (the filesystem server's allowed directory);
* git: ``repo.fast-import`` (a ``git fast-export`` stream, fixed authors and dates, so commit ids
  are the same on every machine) imported into ``repo/`` on branch ``main`` and checked out, then
  ``worktree/`` (uncommitted files) copied over it;
* sqlite: ``init.sql`` executed into ``db.sqlite``.

A snapshot is text in the repository (no binary databases, no nested ``.git``), and verifiers
never read it: each ``verify.py`` carries its own expectations, so nothing the agent can reach
is compared against.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

from envgym.envs.mcp_suite.layout import SKIPPED_NAMES, STATE_DIR

GIT_IDENTITY = (("user.name", "envgym suite"), ("user.email", "suite@envgym.invalid"))


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> None:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, timeout=60
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args[:3])} failed in the snapshot: {done.stderr.decode()[-500:]}"
        )


# An installed copy's byte-compiled initial .py files are not part of the state an agent sees.
_NOT_STATE = shutil.ignore_patterns(*SKIPPED_NAMES)


def materialize(service: str, category: str, dest: Path, *, states: Path = STATE_DIR) -> Path:
    """Write ``service/category``'s initial state into the empty folder ``dest``."""
    source = states / service / category
    if not source.is_dir():
        raise FileNotFoundError(f"no initial state {source}")
    dest.mkdir(parents=True, exist_ok=True)
    if service == "filesystem":
        shutil.copytree(source, dest, dirs_exist_ok=True, ignore=_NOT_STATE)
    elif service == "git":
        repo = dest / "repo"
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        for key, value in GIT_IDENTITY:  # so the git server can commit without a global identity
            _git(repo, "config", key, value)
        _git(repo, "fast-import", "--quiet", stdin=(source / "repo.fast-import").read_bytes())
        _git(repo, "checkout", "-q", "-f", "main")
        if (source / "worktree").is_dir():
            shutil.copytree(source / "worktree", repo, dirs_exist_ok=True, ignore=_NOT_STATE)
    elif service == "sqlite":
        conn = sqlite3.connect(dest / "db.sqlite")
        try:
            conn.executescript((source / "init.sql").read_text(encoding="utf-8"))
            conn.commit()
        finally:
            conn.close()
    else:
        raise ValueError(f"unknown MCP service {service!r}")
    return dest
