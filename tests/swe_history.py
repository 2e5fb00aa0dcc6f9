"""A small Python project with a real git history, for the SWE family's tests.

History (first parent, oldest first): ``initial`` (root), ``bugfix`` (src + tests, a real
description), ``docs`` (README only), ``huge`` (40 files), ``vague`` (src + tests, message "fix"),
``tests_only``, ``binary`` (src + tests + a PNG), ``issue_fix`` ("Fixes #3"), ``merge`` (a
``--no-ff`` merge of a branch adding ``mul`` with its test).  ``feature`` is the branch's commit.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

OPS_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
OPS_FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TEST_SUB = "from calc.ops import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"
TEST_ADD = "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def run_git(repo: Path, *args: str, tick: list[int] | None = None) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(repo.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Dev",
        "GIT_AUTHOR_EMAIL": "d@x",
        "GIT_COMMITTER_NAME": "Dev",
        "GIT_COMMITTER_EMAIL": "d@x",
    }
    if tick is not None:  # fixed dates: the same history gives the same shas every run
        tick[0] += 60
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"{1700000000 + tick[0]} +0000"
    return subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def _write(repo: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def make_history(repo: Path) -> dict[str, str]:
    """Create the project at `repo`; return the sha of each named commit."""
    repo.mkdir(parents=True)
    tick = [0]
    shas: dict[str, str] = {}
    run_git(repo, "init", "-q")

    def commit(name: str, message: str, files: dict[str, str | bytes]) -> None:
        _write(repo, files)
        run_git(repo, "add", "-A")
        run_git(repo, "commit", "-q", "-m", message, tick=tick)
        shas[name] = run_git(repo, "rev-parse", "HEAD")

    commit(
        "initial",
        "Start calc",
        {
            "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1"\n',
            "README.md": "# calc\n",
            "src/calc/__init__.py": "",
            "src/calc/ops.py": OPS_BUGGY,
            "tests/test_ops.py": TEST_SUB,
        },
    )
    commit(
        "bugfix",
        "Fix add() returning the difference\n\nadd(2, 3) returned -1 instead of 5:"
        " the function subtracted its arguments. It must return their sum.\n\n"
        "Signed-off-by: Dev <d@x>",
        {"src/calc/ops.py": OPS_FIXED, "tests/test_add.py": TEST_ADD},
    )
    commit(
        "docs",
        "Document the calc package in the README for new users of the project",
        {"README.md": "# calc\n\nArithmetic helpers: add and sub.\n"},
    )
    commit(
        "huge",
        "Add forty generated helper modules with one test each for coverage purposes",
        {
            **{f"src/calc/gen{i}.py": f"def f{i}():\n    return {i}\n" for i in range(20)},
            **{
                f"tests/test_gen{i}.py": f"from calc.gen{i} import f{i}\n\n\ndef test():\n"
                f"    assert f{i}() == {i}\n"
                for i in range(20)
            },
        },
    )
    commit(
        "vague",
        "fix",
        {"src/calc/ops.py": OPS_FIXED + "\n# tidy\n", "tests/test_add.py": TEST_ADD + "\n# tidy\n"},
    )
    commit(
        "tests_only",
        "Cover sub() with negative numbers so a sign bug would be caught early",
        {"tests/test_ops.py": TEST_SUB + "\n\ndef test_neg():\n    assert sub(-1, -1) == 0\n"},
    )
    commit(
        "binary",
        "Ship a logo and teach add() about the logo size in pixels for docs",
        {
            "src/calc/logo.png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\xff",
            "src/calc/ops.py": OPS_FIXED + "\n# tidy\nLOGO = 64\n",
            "tests/test_logo.py": "def test_logo():\n    pass\n",
        },
    )
    commit(
        "issue_fix",
        "Handle None in sub\n\nFixes #3",
        {
            "src/calc/ops.py": OPS_FIXED + "\n# tidy\nLOGO = 64\n\n\ndef neg(a):\n    return -a\n",
            "tests/test_neg.py": "from calc.ops import neg\n\n\ndef test_neg():\n    assert neg(2) == -2\n",
        },
    )
    run_git(repo, "checkout", "-q", "-b", "feature")
    commit(
        "feature",
        "Add mul",
        {
            "src/calc/mul.py": "def mul(a, b):\n    return a * b\n",
            "tests/test_mul.py": "from calc.mul import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n",
        },
    )
    run_git(repo, "checkout", "-q", "main")
    run_git(
        repo,
        "merge",
        "-q",
        "--no-ff",
        "feature",
        "-m",
        "Merge pull request #7 from dev/mul\n\nAdd mul() so callers stop emulating"
        " multiplication of two numbers with repeated add() calls",
        tick=tick,
    )
    shas["merge"] = run_git(repo, "rev-parse", "HEAD")
    return shas


ISSUES = [
    {
        "number": 3,
        "title": "sub() crashes on None",
        "body": "Calling sub(None, 1) raises a TypeError deep inside; there is also no neg()"
        " helper to negate a number, which the docs promise.",
    }
]
