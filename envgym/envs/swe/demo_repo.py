"""``wordstat``: a small pure-Python project with a real git history, for the demo's SWE step.

The history a miner would meet in any repository, in miniature (oldest first):

* ``Start wordstat`` — the package, its tests, a pyproject;
* ``Fix word_count ...`` — a bug fix touching source and tests, with a real description (an
  instance: its new test fails before and passes after);
* ``Describe the package ...`` — README only (no instance: nothing to test);
* ``Make longest_word ...`` — a second fix, again with its test (an instance);
* ``fix`` — a source + test change whose message says nothing (rejected: no description).

Commit dates are fixed, so the same history has the same shas on every machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

_PYPROJECT = '[project]\nname = "wordstat"\nversion = "0.1.0"\n\n[tool.pytest.ini_options]\npythonpath = ["src"]\n'
_STATS = '''"""Word statistics over plain text."""


def words(text):
    return text.split(" ")


def word_count(text):
    return len(words(text))


def longest_word(text):
    best = ""
    for word in words(text):
        if len(word) > len(best):
            best = word
    return best
'''
_TESTS = """from wordstat.stats import longest_word, word_count


def test_word_count_simple():
    assert word_count("a b c") == 3


def test_longest_word():
    assert longest_word("a bb ccc") == "ccc"
"""
_FIX_1 = (
    'def words(text):\n    return text.split(" ")\n',
    "def words(text):\n    return text.split()\n",
)
_TEST_1 = """

def test_word_count_ignores_repeated_spaces():
    assert word_count("a  b") == 2 and word_count("a\\tb\\nc") == 3
"""
_FIX_2 = (
    "        if len(word) > len(best):\n",
    '        if len(word.strip(".,;:!?")) > len(best):\n            word = word.strip(".,;:!?")\n',
)
_TEST_2 = """

def test_longest_word_ignores_punctuation():
    assert longest_word("tiny, enormous! big.") == "enormous"
"""


def make_demo_repo(path: Path) -> Path:
    """Create the project at ``path`` (replacing what is there); returns ``path``."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    clock = [0]

    def git(*args: str) -> str:
        clock[0] += 60
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(path), "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org",
               "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.org",
               "GIT_AUTHOR_DATE": f"{1700000000 + clock[0]} +0000", "GIT_COMMITTER_DATE": f"{1700000000 + clock[0]} +0000"}  # fmt: skip
        return subprocess.run(
            ["git", "-c", "init.defaultBranch=main", *args],
            cwd=path,
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout

    def commit(message: str, files: dict[str, str]) -> None:
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        git("add", "-A")
        git("commit", "-q", "-m", message)

    git("init", "-q")
    stats = _STATS
    tests = _TESTS
    commit("Start wordstat", {"pyproject.toml": _PYPROJECT, "src/wordstat/__init__.py": "",
                              "src/wordstat/stats.py": stats, "tests/test_stats.py": tests})  # fmt: skip
    stats, tests = stats.replace(*_FIX_1), tests + _TEST_1
    commit("Fix word_count counting empty words\n\nword_count('a  b') returned 3: splitting on a single "
           "space yields an empty word between two spaces, and tabs or newlines were not separators "
           "at all. Words are now separated by any run of whitespace.",
           {"src/wordstat/stats.py": stats, "tests/test_stats.py": tests})  # fmt: skip
    commit(
        "Describe the package in a README for people who find it on the index",
        {
            "README.md": "# wordstat\n\nWord statistics over plain text: counts and the longest word.\n"
        },
    )
    stats, tests = stats.replace(*_FIX_2), tests + _TEST_2
    commit("Make longest_word ignore trailing punctuation\n\nlongest_word('tiny, enormous! big.') returned "
           "'enormous!' with its exclamation mark, and a short word followed by punctuation could beat "
           "a longer one. Punctuation at the ends of a word must not count.",
           {"src/wordstat/stats.py": stats, "tests/test_stats.py": tests})  # fmt: skip
    commit("fix", {"src/wordstat/stats.py": stats + "\n\ndef char_count(text):\n    return len(text)\n",
                   "tests/test_stats.py": tests + "\n\ndef test_char_count():\n    from wordstat.stats import "
                   "char_count\n    assert char_count('ab') == 2\n"})  # fmt: skip
    return path
