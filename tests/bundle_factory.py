"""A tiny, valid bundle for core tests (a key/value notes store), built from Python strings."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from envgym.bundle import write_manifest

TOOLS = '''
from envgym.runtime import sqlite


def get_note(key: str) -> str:
    """Read a note.

    Args:
        key: the note's key.
    """
    row = sqlite().execute("SELECT value FROM notes WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise KeyError(f"no note {key!r}")
    return row[0]


def list_keys() -> list[str]:
    """All note keys."""
    return [r[0] for r in sqlite().execute("SELECT key FROM notes ORDER BY key")]


def set_note(key: str, value: str) -> str:
    """Write a note.

    Args:
        key: the note's key.
        value: the new value.
    """
    sqlite().execute("INSERT OR REPLACE INTO notes VALUES (?, ?)", (key, value))
    return "ok"


def shout(text: str, times: int = 1) -> str:
    """Repeat text in capitals.

    Args:
        text: what to repeat.
        times: how often.
    """
    return text.upper() * times


def submit_result(answer_text: str) -> str:
    """Submit the final answer.

    Args:
        answer_text: the answer.
    """
    return "submitted"
'''

SOLUTION = """
def solve_secret(tools, task):
    value = tools.get_note(key=task["metadata"]["key"])
    tools.submit_result(answer_text=value)
"""

VERIFIER = """
from envgym.runtime import sqlite


def verify_secret(submission, task):
    key = task["metadata"]["key"]
    want = sqlite().execute("SELECT value FROM notes WHERE key = ?", (key,)).fetchone()[0]
    got = submission.get("answer_text")
    if not (isinstance(got, str) and got):  # staged: each check must be able to fail alone
        return {"checks": [{"name": "answered", "passed": False, "detail": "no answer_text"}]}
    return {"checks": [
        {"name": "answered", "passed": isinstance(got, str) and bool(got), "detail": ""},
        {"name": "correct", "passed": got == want, "detail": f"expected the note {key!r}"},
    ]}
"""

TASK = {
    "id": "secret",
    "prompt": "Find the note called 'secret' and submit its value with submit_result.",
    "solution": "solve_secret",
    "verifier": "verify_secret",
    "difficulty": 1,
    "submit_tool": "submit_result",
    "metadata": {"key": "secret"},
}


def make_notes_bundle(root: Path, *, tools: str = TOOLS, tasks: list[dict] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "state").mkdir(exist_ok=True)
    db = sqlite3.connect(root / "state" / "db.sqlite")
    db.execute("CREATE TABLE IF NOT EXISTS notes (key TEXT PRIMARY KEY, value TEXT)")
    db.executemany(
        "INSERT OR REPLACE INTO notes VALUES (?, ?)", [("secret", "tangerine"), ("other", "plum")]
    )
    db.commit()
    db.close()
    (root / "tools.py").write_text(tools)
    (root / "solution.py").write_text(SOLUTION)
    (root / "verifier.py").write_text(VERIFIER)
    lines = [json.dumps(t) for t in (tasks if tasks is not None else [TASK])]
    (root / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    write_manifest(root, name="notes", category="test", provenance={"agent": "test", "seed": 0})
    return root
