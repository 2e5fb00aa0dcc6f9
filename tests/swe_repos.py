"""Throwaway git repositories for the SWE family's tests (setup, validation)."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "safe.directory=*", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def make_repo(root: Path, files: dict[str, str]) -> tuple[Path, str]:
    """A git repository with ``files`` committed; returns (path, commit sha)."""
    root.mkdir(parents=True)
    _git(root, "init", "-q")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    return root, _git(root, "rev-parse", "HEAD").strip()


def diff_of(repo: Path, edits: dict[str, str]) -> str:
    """The patch that ``edits`` make to ``repo`` (then reverted: the repo stays at its base)."""
    for name, text in edits.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    _git(repo, "add", "-A")
    patch = _git(repo, "diff", "--cached")
    _git(repo, "reset", "-q", "--hard")
    return patch
