"""Code and docs give reasons, not issue numbers: readers have no issue tracker to look them up in.

The rule, applied to every tracked ``*.py``, ``*.md``, ``*.sh``, ``*.yaml`` and ``*.toml`` file
(``git ls-files``): a citation is the word "issue" or "issues" (any case, not the tail of a
longer word such as "tissue"), then at most one separator -- a space, a tab, "-", "_", or a line
break with the next line's indentation and comment or quote marks -- then an optional "#", then
a digit.  So, with N and M numbers, "issue N", "issue #N", "Issue N item M", "issues N and M",
"issue-N" and ``test_of_issue_N`` are citations; "an issue", "issue-PR pairs", "Fixes #N" (no
word "issue"), ``issue #{key}`` (no digit) and other projects' URLs such as
``github.com/x/y/issues/N`` (the separator is "/") are not.  The examples below are assembled
from parts, so this file passes its own rule.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUFFIXES = (".py", ".md", ".sh", ".yaml", ".toml")
WORD = "issue"
CITATION = re.compile(rf"(?<![a-z]){WORD}s?(?:[ \t_-]|[ \t]*\n[ \t#*>\"']*)?#?\d", re.IGNORECASE)


def citations(text: str) -> list[tuple[int, str]]:
    """(1-based line, that line stripped) for each citation in ``text``."""
    lines = text.splitlines()
    found = []
    for match in CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, lines[line - 1].strip()))
    return found


def test_the_rule_matches_citations_and_nothing_else() -> None:
    w, W = WORD, WORD.capitalize()
    for cited in (
        f"see {w} 12",
        f"({w} #3)",
        f"{W} 8 item 2: x",
        f"{w}s 8 and 9",
        f"the {w}-11 report",
        f"def test_of_{w}_9():",
        f"({w}#4)",
        f"rejected (see the\n    # {w}\n    # 9 report)",
        f"x ({w}\n    # 9)",
    ):
        assert citations(cited), cited
    for plain in (
        f"an {w} in a repo",
        f"the t{w} 3",
        f"{w}–PR pairs",
        "Fixes #3",
        f"{w} #{{key}} is neither",
        f"https://github.com/x/y/{w}s/123",
        f"mobile_data_{w}]",
        f"{W}s are bugs. 2 more",
        f"the {w}\n\n3. next",
    ):
        assert not citations(plain), plain


def test_no_tracked_text_file_cites_an_issue_by_number() -> None:
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, timeout=60, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    offenders = []
    for name in sorted(n for n in listed if n.endswith(SUFFIXES)):
        path = REPO / name
        if not path.is_file():  # deleted in the work tree but still in the index
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{name}:{line}: {shown}" for line, shown in citations(text)]
    assert not offenders, "cite the reason, not the issue number:\n" + "\n".join(offenders)
