"""The core tests' notes bundle, made to meet the per-rule witness contract (docs/CHECK.md):
a verifier whose rules can each be violated alone, and a per-rule witness for each in tasks.jsonl.

(The core notes verifier's ``answered`` rule cannot be violated without also failing ``correct``,
so no witness can cover it and synthesis validation rightly rejects it as ``rules_uncovered``.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bundle_factory import TASK, make_notes_bundle

from envgym.bundle import write_manifest

VERIFIER = """
from envgym.runtime import sqlite


def verify_secret(submission, task):
    key = task["metadata"]["key"]
    want = sqlite().execute("SELECT value FROM notes WHERE key = ?", (key,)).fetchone()[0]
    return {"checks": [{"name": "correct", "passed": submission.get("answer_text") == want,
                        "detail": f"expected the note {key!r}"}]}
"""
WITNESSES = [
    {"rule": "correct", "submission": {"answer_text": "plum"}, "note": "another note's value"}
]


def make_witnessed_notes(
    root: Path, *, tools: str | None = None, tasks: list[dict[str, Any]] | None = None
) -> Path:
    lines = [{**t, "witnesses": t.get("witnesses", WITNESSES)} for t in (tasks or [TASK])]
    root = make_notes_bundle(root, **({"tools": tools} if tools is not None else {}), tasks=lines)
    (root / "verifier.py").write_text(VERIFIER)
    return refresh(root)


def refresh(root: Path) -> Path:
    write_manifest(root, name="notes", category="test", provenance={"agent": "test", "seed": 0})
    return root


def set_tasks(root: Path, tasks: list[dict[str, Any]]) -> Path:
    (root / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return refresh(root)
