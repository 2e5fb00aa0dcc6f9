"""Fixture helpers for the SWE check / synth tests: a private envgym cache and the history repo.

The history (tests/swe_history.py) gets two more commits here: ``exact`` (a source change whose
new test passes before the change too: validation must reject it, "no FAIL_TO_PASS test") and
``square`` (a fix spread over two source files, so that a partial fix is a meaningful exploit).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from swe_history import make_history, run_git

SQUARE_TEST = ("from calc.mul import cube\nfrom calc.ops import square\n\n\ndef test_square():\n"
               "    assert square(3) == 9\n\n\ndef test_cube():\n    assert cube(2) == 8\n")  # fmt: skip


@contextmanager
def private_cache(root: Path) -> Iterator[Path]:
    """``$ENVGYM_CACHE`` pointed at ``root`` for the block (environments are built there)."""
    old = os.environ.get("ENVGYM_CACHE")
    os.environ["ENVGYM_CACHE"] = str(root)
    try:
        yield root
    finally:
        if old is None:
            os.environ.pop("ENVGYM_CACHE", None)
        else:
            os.environ["ENVGYM_CACHE"] = old


def make_synth_history(repo: Path) -> dict[str, str]:
    """tests/swe_history.py's project plus the ``exact`` and ``square`` commits; their shas."""
    shas = make_history(repo)
    tick = [10_000]

    def commit(name: str, message: str, files: dict[str, str]) -> None:
        for rel, text in files.items():
            (repo / rel).write_text(text)
        run_git(repo, "add", "-A")
        run_git(repo, "commit", "-q", "-m", message, tick=tick)
        shas[name] = run_git(repo, "rev-parse", "HEAD")

    ops = (repo / "src/calc/ops.py").read_text()
    mul = (repo / "src/calc/mul.py").read_text()
    commit(
        "exact",
        "Check that sub stays exact for very large integers beyond the float range",
        {
            "src/calc/ops.py": ops + "\n# sub is exact for integers\n",
            "tests/test_big.py": "from calc.ops import sub\n\n\ndef test_big():\n    assert sub(10**20, 1) == 10**20 - 1\n",
        },
    )
    commit(
        "square",
        "Add square() and cube() helpers: callers need powers of two and three of a number",
        {
            "src/calc/ops.py": ops
            + "\n# sub is exact for integers\n\n\ndef square(a):\n    return a * a\n",
            "src/calc/mul.py": mul + "\n\ndef cube(a):\n    return a * a * a\n",
            "tests/test_pow.py": SQUARE_TEST,
        },
    )
    return shas
