"""Tools-only solvability of synthesized tasks:
the gold answer must come from tool results, and the verifier must judge against the data."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from bundle_factory import TASK
from synth_notes import make_witnessed_notes

from envgym.bundle import Task, write_manifest
from envgym.synth_agents.provenance import atoms, hidden_answer_leaves
from envgym.synth_agents.validate import REASONS, validate_bundle

pytestmark = pytest.mark.timeout(180)

HONEST = """
def solve_secret(tools, task):
    tools.submit_result(answer_text=tools.get_note(key=task["metadata"]["key"]))
"""
KEYED_META = {"key": "secret", "expected": "tangerine"}  # an answer key the prompt does not show


def notes(
    tmp_path: Path,
    *,
    solution: str = HONEST,
    verifier: str | None = None,
    metadata: dict | None = None,
) -> Path:
    root = make_witnessed_notes(
        tmp_path / "notes", tasks=[{**TASK, "metadata": metadata or TASK["metadata"]}]
    )
    (root / "solution.py").write_text(textwrap.dedent(solution))
    if verifier is not None:
        (root / "verifier.py").write_text(textwrap.dedent(verifier))
    write_manifest(root, name="notes", category="test", provenance={"agent": "test", "seed": 0})
    return root


@pytest.fixture(autouse=True)
def _bwrap(require_backend) -> None:  # noqa: ANN001
    require_backend("bwrap")


def test_atoms_and_hidden_leaves() -> None:
    sub = {"answer_text": json.dumps({"title": "Dune", "n": [3, True]}), "x": 2.5}
    assert list(atoms(sub)) == ["Dune", 3, 2.5]
    task = Task(
        id="t",
        prompt="Find the note 'secret' (year 1800).",
        solution="s",
        verifier="v",
        metadata={"key": "secret", "after": 1800, "answer": "Dune", "flag": True, "n": 3},
    )
    # 'secret' and 1800 are in the prompt; the flag is not an answer; 3 and "Dune" are hidden and submitted
    assert hidden_answer_leaves(task, sub) == [(("answer",), "Dune"), (("n",), 3)]


def test_an_honest_bundle_with_an_unused_answer_key_passes(tmp_path: Path) -> None:
    # A procedural generator may store the expected value; what matters is that the gold derives it.
    result = validate_bundle(notes(tmp_path, metadata=KEYED_META))
    assert result.passed, result.problems


def test_a_gold_copying_a_hidden_metadata_answer_is_rejected(tmp_path: Path) -> None:
    copying = """
    def solve_secret(tools, task):
        tools.get_note(key=task["metadata"]["key"])  # a data call, then the answer key
        tools.submit_result(answer_text=task["metadata"]["expected"])
    """
    result = validate_bundle(notes(tmp_path, solution=copying, metadata=KEYED_META))
    assert result.reasons == ("answer_not_from_tools",), result.problems
    assert (
        "hidden_metadata" in result.problems[0].detail and "'expected'" in result.problems[0].detail
    )


def test_a_gold_that_ignores_its_tool_results_is_rejected(tmp_path: Path) -> None:
    blind = """
    def solve_secret(tools, task):
        try:
            tools.list_keys()
        except Exception:
            pass
        tools.submit_result(answer_text="tangerine")
    """
    result = validate_bundle(notes(tmp_path, solution=blind))
    assert result.reasons == ("answer_not_from_tools",), result.problems
    assert "same_without_data" in result.problems[0].detail


def test_a_verifier_judging_against_metadata_alone_is_rejected(tmp_path: Path) -> None:
    keyed = """
    def verify_secret(submission, task):
        ok = submission.get("answer_text") == task["metadata"]["expected"]
        return {"checks": [{"name": "correct", "passed": ok, "detail": ""}]}
    """
    result = validate_bundle(notes(tmp_path, verifier=keyed, metadata=KEYED_META))
    assert result.reasons == ("verifier_answer_key",), result.problems
    assert all(r in REASONS for r in result.reasons)


def test_the_reported_answer_key_bundle_is_rejected(tmp_path: Path) -> None:
    """The finding, exactly: metadata {"answer": ...} wrong for the database, a solution that submits
    it with no data tool call and a verifier comparing against metadata. It was kept before."""
    from test_synth_llm_agent import DATA, TOOLS, synthesize

    key = (
        '```json task\n{"prompt": "Which available book published after 1800 is the oldest? Submit its title.", '
        '"metadata": {"after": 1800, "answer": "Hamlet"}}\n```\n'
        '```python solution\ndef solve(tools, task):\n    tools.submit_result(answer_text=task["metadata"]["answer"])\n```\n'
        "```python verifier\ndef verify(submission, task):\n"
        '    ok = submission.get("answer_text") == task["metadata"]["answer"]\n'
        '    return {"checks": [{"name": "correct", "passed": ok, "detail": ""}]}\n```\n'
        '```json witnesses\n[{"rule": "correct", "submission": {"answer_text": "Dune"}}]\n```'
    )
    # The agent's own loop now hears about it and, out of rounds, makes no bundle.
    records, _ = synthesize(tmp_path, [DATA, TOOLS, key], max_levels=0)
    r = records[0]
    assert (r["status"], r["made"], r["reasons"]) == ("rejected", False, ["no_agreement"])
    assert "called no tool but 'submit_result'" in r["problems"][0]["detail"]
    # Validation rejects the same bundle whoever made it (it was kept before).
    from envgym.synth_agents import code_blocks as cb
    from envgym.synth_agents.llm_checks import with_submit_tool, write_draft

    found = cb.blocks(key)
    body, _why = cb.task_json(found)
    witnesses, _why = cb.witnesses_json(found)
    line = {
        "id": "task-l0",
        "prompt": body["prompt"],
        "solution": "solve",
        "verifier": "verify",
        "difficulty": 1,
        "submit_tool": "submit_result",
        "system_prompt": None,
        "metadata": body["metadata"],
        "witnesses": witnesses,
    }
    db = books_db(tmp_path / "books.sqlite")
    root = write_draft(
        tmp_path / "keyed",
        db,
        with_submit_tool(cb.blocks(TOOLS)[0].code),
        found[1].code,
        found[2].code,
        [line],
        name="keyed",
        category="library loans",
        provenance={"agent": "test"},
    )
    result = validate_bundle(root)
    assert result.reasons == ("answer_not_from_tools", "verifier_answer_key"), result.problems
    details = " ".join(p.detail for p in result.problems)
    assert (
        "no_data_call" in details
        and "hidden_metadata" in details
        and "verifier_without_data" in details
    )


def books_db(path: Path) -> Path:
    import sqlite3

    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE books (title TEXT PRIMARY KEY, author TEXT, year INTEGER, copies INTEGER)"
    )
    con.executemany(
        "INSERT INTO books VALUES (?, ?, ?, ?)",
        [
            ("Dune", "Herbert", 1965, 3),
            ("Emma", "Austen", 1815, 1),
            ("Ulysses", "Joyce", 1922, 0),
            ("Beloved", "Morrison", 1987, 2),
            ("Hamlet", "Shakespeare", 1603, 4),
        ],
    )
    con.commit()
    con.close()
    return path


def test_provenance_runs_with_the_inprocess_backend_too(tmp_path: Path) -> None:
    copying = """
    def solve_secret(tools, task):
        tools.get_note(key=task["metadata"]["key"])
        tools.submit_result(answer_text=task["metadata"]["expected"])
    """
    assert validate_bundle(
        notes(tmp_path / "good", metadata=KEYED_META), sandbox="inprocess"
    ).passed
    result = validate_bundle(
        notes(tmp_path / "bad", solution=copying, metadata=KEYED_META), sandbox="inprocess"
    )
    assert result.reasons == ("answer_not_from_tools",), result.problems
