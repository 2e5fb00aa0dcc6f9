"""Validation of every bundle: the static tools-only rules, the dynamic isolation check, the tool
probe, envgym check's figures, near-duplicates and the crash-safe journal."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from bundle_factory import TOOLS, make_notes_bundle
from synth_notes import make_witnessed_notes

from envgym.bundle import load_bundle, write_manifest
from envgym.synth_agents.dedup import NearDuplicateIndex, jaccard, shingles
from envgym.synth_agents.isolation import check_isolation
from envgym.synth_agents.journal import Journal, JournalError
from envgym.synth_agents.solution_rules import check_solution_source
from envgym.synth_agents.validate import validate_bundle

pytestmark = pytest.mark.timeout(120)


def rewrite(root: Path, **files: str) -> Path:
    for name, text in files.items():
        (root / f"{name}.py").write_text(textwrap.dedent(text))
    write_manifest(root, name="notes", category="test", provenance={"agent": "test", "seed": 0})
    return root


@pytest.fixture
def notes(tmp_path: Path, require_backend) -> Path:
    require_backend("bwrap")
    return make_witnessed_notes(tmp_path / "notes")


# -- static rules ---------------------------------------------------------------------------
def test_static_rules_accept_tools_and_computation() -> None:
    source = """
    from __future__ import annotations
    import json
    from itertools import combinations

    class _Plan:
        def __init__(self, tools):
            self.tools = tools

    def solve_x(tools, task):
        fn = getattr(tools, "get_note")
        best = max(combinations([1, 2, 3], 2))
        tools.submit_result(answer_text=json.dumps([fn(key="a"), best]))
    """
    assert check_solution_source(textwrap.dedent(source), ("solve_x",)) == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("import sqlite3", "imports 'sqlite3'"),
        ("from envgym.runtime import sqlite", "imports from 'envgym.runtime'"),
        ("import os.path", "imports 'os.path'"),
        ("x = open('db.sqlite').read()", "uses 'open'"),
        ("x = eval('1')", "uses 'eval'"),
        ("x = __import__('os')", "uses '__import__'"),
        ("x = (lambda: 0).__globals__", "dunder attribute '__globals__'"),
        ("x = getattr(task, 'keys')", "getattr() is allowed on the tools object only"),
        ("x = '__class__'", "spells the dunder name '__class__'"),
    ],
)
def test_static_rules_name_each_violation(line: str, message: str) -> None:
    top = line.startswith(("import", "from"))
    body = "x = 1" if top else line
    source = f"def solve_x(tools, task):\n    {body}\n    tools.submit_result(answer_text='x')\n"
    if top:
        source = line + "\n" + source
    violations = check_solution_source(source, ("solve_x",))
    assert len(violations) == 1 and message in str(violations[0]), violations


def test_static_rules_syntax_and_missing_function() -> None:
    assert "SyntaxError" in str(check_solution_source("def broken(:\n", ()))
    assert "no top-level function 'solve_y'" in str(
        check_solution_source("def solve_x(t, k): pass\n", ("solve_y",))[0]
    )


# -- whole-bundle validation ------------------------------------------------------------------
def test_a_good_bundle_passes(notes: Path) -> None:
    result = validate_bundle(notes)
    assert result.passed and result.problems == ()
    assert result.tasks[0]["gold_passed"] and result.tasks[0]["rejection_rate"] == 1.0
    assert result.content_hash == load_bundle(notes).manifest.content_hash


def test_a_verifier_that_always_passes_is_rejected(notes: Path) -> None:
    rewrite(
        notes,
        verifier="""
    def verify_secret(submission, task):
        return {"checks": [{"name": "ok", "passed": True, "detail": ""}]}
    """,
    )
    result = validate_bundle(notes)
    assert not result.passed
    assert result.reasons == (
        "noop_accepted",
        "corruptions_accepted",
        "rules_uncovered",
        "exploit_accepted",
        "verifier_answer_key",
    )


def test_a_solution_reading_the_database_is_rejected_statically_and_dynamically(
    notes: Path,
) -> None:
    rewrite(
        notes,
        solution="""
    from envgym.runtime import sqlite

    def solve_secret(tools, task):
        value = sqlite().execute("SELECT value FROM notes WHERE key = 'secret'").fetchone()[0]
        tools.submit_result(answer_text=value)
    """,
    )
    assert validate_bundle(notes).reasons == ("solution_not_tools_only",)
    isolation = check_isolation(load_bundle(notes))
    assert not isolation[0].ok and "envgym.runtime.sqlite" in isolation[0].detail


def test_isolation_catches_file_reads_and_allows_tools(notes: Path) -> None:
    assert check_isolation(load_bundle(notes))[0].ok  # the gold only calls tools
    assert check_isolation(load_bundle(notes))[0].calls == (
        ("get_note", {"key": "secret"}),
        ("submit_result", {"answer_text": "tangerine"}),
    )
    rewrite(
        notes,
        solution="""
    def solve_secret(tools, task):
        data = open("db.sqlite", "rb").read()
        tools.submit_result(answer_text="tangerine" if b"tangerine" in data else "")
    """,
    )
    result = check_isolation(load_bundle(notes))[0]
    assert not result.ok and "(open)" in result.detail
    assert check_isolation(load_bundle(notes), sandbox="inprocess")[0].skipped


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        (
            'def shout(text: str, times: int = 1) -> str:\n    """Shout.\n\n    Args:\n        text: t.\n        times: n.\n    """\n'
            "    return text.upper() * times + len(text)\n",
            "does not accept its schema",
        ),
        (
            'def shout(text: str) -> str:\n    """Hang.\n\n    Args:\n        text: t.\n    """\n    while True:\n        pass\n',
            "timeout",
        ),
        (
            'def shout(text: str) -> str:\n    """Crash.\n\n    Args:\n        text: t.\n    """\n    import os\n    os._exit(3)\n',
            "crash",
        ),
        (
            'def shout(text: str) -> object:\n    """Not JSON.\n\n    Args:\n        text: t.\n    """\n    return object()\n',
            "does not accept its schema",
        ),
    ],
)
def test_tools_that_break_hang_or_crash_are_rejected(
    tmp_path: Path, require_backend, tool: str, why: str
) -> None:
    require_backend("bwrap")
    start = TOOLS.index("def shout")
    end = TOOLS.index("def submit_result")
    root = make_witnessed_notes(tmp_path / "b", tools=TOOLS[:start] + tool + "\n\n" + TOOLS[end:])
    from envgym.sandbox import Limits

    result = validate_bundle(root, limits=Limits(call_timeout_s=2))
    assert result.reasons == ("tool_broken",), result.problems
    assert why in result.problems[0].detail and "shout(" in result.problems[0].detail


def test_a_malformed_bundle_is_rejected_with_the_file_named(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    (root / "tools.py").write_text("def broken(:\n")
    result = validate_bundle(root)
    assert result.reasons == ("malformed_bundle",) and "content hash" in result.problems[0].detail
    rewrite(root)
    (root / "tools.py").write_text("def broken(:\n")
    write_manifest(root, name="notes", category="test", provenance={"agent": "test", "seed": 0})
    assert "tools.py" in validate_bundle(root).problems[0].detail


# -- near-duplicates -------------------------------------------------------------------------
def test_shingles_and_jaccard_exact() -> None:
    assert shingles("A b, c d!") == frozenset({"a b c", "b c d"})
    assert shingles("one two") == frozenset({"one two"})
    assert jaccard(frozenset({"x", "y"}), frozenset({"y", "z"})) == 1 / 3


def test_near_duplicate_index() -> None:
    index = NearDuplicateIndex(threshold=0.9)
    base = (
        "Plan a five day trip from Hangzhou starting on October 1st. Never repeat a city, hotel or "
        "restaurant. Every hotel must cost under 500 per night and be rated at least 4.0; on rainy days "
        "visit indoor attractions only, and take trains of at most three hours between cities. Lunch and "
        "dinner should be at two different restaurants each day, both in the city I stay in, and the total "
        "spent on meals across the whole trip should stay below two thousand yuan if that is possible."
    )
    meta = {"days": 5}
    index.add("trip", "b1/t1", base, "s1", meta)
    assert index.find("trip", base.upper(), "s2", {"days": 5}) == (
        "b1/t1",
        1.0,
    )  # same words and parameters
    tweaked = base.replace("under 500", "under 510", 1)
    hit = index.find("trip", tweaked, "s1", meta)
    assert hit is not None and hit[0] == "b1/t1" and 0.9 <= hit[1] < 1.0
    assert index.find("trip", tweaked, "s1", {"days": 4}) is None  # other parameters: another task
    assert index.find("trip", tweaked, "s2", meta) is None  # another database: another task
    assert index.find("retail", base, "s1", meta) is None  # another category
    assert index.find("trip", "Route four shipments through the hub network", "s1", meta) is None


# -- the journal ------------------------------------------------------------------------------
def test_journal_recovers_from_a_torn_write(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.append("job", "a", {"n": 1})
    with pytest.raises(JournalError, match="already written"):
        journal.append("job", "a", {"n": 2})
    with open(path, "ab") as fh:
        fh.write(b'{"type": "job", "key": "b", "n"')  # killed mid-write
    again = Journal(path)
    assert [r["key"] for r in again.records("job")] == ["a"]
    again.append("job", "b", {"n": 3})
    assert [json.loads(x)["key"] for x in path.read_text().splitlines()] == ["a", "b"]
    path.write_text('{"type": "job", "key": "a"}\ngarbage\n{"type": "job", "key": "c"}\n')
    with pytest.raises(JournalError, match="line 2"):
        Journal(path)


def test_the_guard_goes_after_the_docstring_and_future_imports(notes: Path) -> None:
    rewrite(
        notes,
        solution='''
    """A solution module with a docstring."""
    from __future__ import annotations

    import sqlite3

    def solve_secret(tools, task):
        sqlite3.connect("db.sqlite")
        tools.submit_result(answer_text="tangerine")
    ''',
    )
    result = check_isolation(load_bundle(notes))[0]
    assert not result.ok and "(sqlite3.connect)" in result.detail


# -- per-rule witnesses (docs/CHECK.md) --------------------------------------------------------
@pytest.mark.parametrize(
    ("witnesses", "why"),
    [
        ([], "no valid witness for ['correct']"),
        (
            [{"rule": "correct", "submission": {"answer_text": "tangerine"}}],
            "accepted, so the rule is not enforced",
        ),
    ],
)
def test_a_bundle_without_valid_witnesses_is_rejected(
    notes: Path, witnesses: list, why: str
) -> None:
    from bundle_factory import TASK
    from synth_notes import set_tasks

    set_tasks(notes, [{**TASK, "witnesses": witnesses}])
    result = validate_bundle(notes)
    assert result.reasons == ("rules_uncovered",), result.problems
    assert why in result.problems[0].detail
    assert result.tasks[0]["rule_coverage"] == 0.0 and list(result.tasks[0]["rules"]) == ["correct"]


def test_validation_opens_one_sandbox(notes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import envgym.check
    import envgym.synth_agents.isolation as isolation
    import envgym.synth_agents.validate as validate

    opened: list[Path] = []
    for module in (isolation, validate, envgym.check):
        real = module.open_sandbox
        monkeypatch.setattr(
            module,
            "open_sandbox",
            lambda root, real=real, **kw: opened.append(root) or real(root, **kw),
        )
    assert validate_bundle(notes).passed and len(opened) == 1
