"""Shared by every verify.py of git/service_repo: envgym prepends it (layout.PRELUDE)."""

import os
import subprocess
import sys

REPO = os.environ["GIT_TEST_REPO"]
MAIN = "88ffd7f8bae6825c6c2e885a97dee41f1dc344c7"  # main's tip in the initial state
FEATURE = "72a7695aa05c2d0e3869af374ccdf2bb7e2fbe3d"  # feature/login's tip in the initial state


def fail(why):
    print("FAIL:", why)
    sys.exit(1)


def git(*args):
    done = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "-C", REPO, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def current_branch():
    return git("symbolic-ref", "--short", "HEAD")


def changed(commit):
    """Files the commit changed against its first parent."""
    out = git("diff-tree", "--no-commit-id", "--name-only", "-r", commit + "^", commit)
    return sorted(out.splitlines()) if out else []


def untracked():
    out = git("ls-files", "--others", "--exclude-standard")
    return sorted(out.splitlines()) if out else []


def staged():
    out = git("diff", "--cached", "--name-only")
    return sorted(out.splitlines()) if out else []
