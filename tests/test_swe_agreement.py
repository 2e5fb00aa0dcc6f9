"""Synthesis and ``envgym check`` agree on what part of a gold patch is the fix
(envgym/envs/swe/acceptance.py): the same files are tried, by the same rule, under the same name.

The heavy test builds a repository whose fix commit also renames a variable in another file (a
cosmetic change no test needs), runs the real ``envgym synth swe`` and ``envgym check`` on what
it wrote, and the uncleaned instance through check: synthesis takes the rename out of the gold
patch and check passes the result; check fails the uncleaned one as ``unrelated_change[PATH]``,
the name synthesis gave the file it set aside.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from swe_fixtures import private_cache
from swe_history import TEST_ADD, TEST_SUB, run_git
from typer.testing import CliRunner

from envgym.cli import app
from envgym.envs.swe.acceptance import removable_paths, still_solves, unrelated_reason, without_path
from envgym.envs.swe.check import GradedSubmission, InstanceCheck
from envgym.envs.swe.exploits import exploits
from envgym.envs.swe.instance import SweInstance, read_instances, write_instances

SHA = "a" * 40


def _modify(path: str, old: str, new: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"
    )


TWO = _modify("src/a.py", "x = 1", "x = 2") + _modify("src/b.py", "y = 1", "z = 1")
RENAME = (
    "diff --git a/src/old.py b/src/new.py\nsimilarity index 90%\nrename from src/old.py\n"
    "rename to src/new.py\n"
)


def test_removable_paths_are_python_files_of_single_path_sections_of_a_multi_file_patch() -> None:
    assert removable_paths(TWO) == ["src/a.py", "src/b.py"]
    assert (
        removable_paths(_modify("src/a.py", "x = 1", "x = 2")) == []
    )  # one file: nothing to leave out
    assert removable_paths(TWO + _modify("README.md", "a", "b")) == ["src/a.py", "src/b.py"]
    assert removable_paths(TWO + RENAME) == ["src/a.py", "src/b.py"]  # a rename is not split
    assert removable_paths(TWO + _modify("src/c.py", "1", "2"), limit=2) == ["src/a.py", "src/b.py"]


def test_without_path_drops_exactly_one_section() -> None:
    assert without_path(TWO, "src/b.py") == _modify("src/a.py", "x = 1", "x = 2")
    with pytest.raises(ValueError, match="no section"):
        without_path(TWO, "src/c.py")


def test_still_solves_is_gradings_rule() -> None:
    passed = {"t::f": "passed", "t::p": "passed"}
    assert still_solves(passed, ["t::f"], ["t::p"])
    assert not still_solves({**passed, "t::p": "skipped"}, ["t::f"], ["t::p"])
    assert not still_solves({"t::p": "passed"}, ["t::f"], ["t::p"])  # missing is not passed
    assert not still_solves(passed, [], ["t::p"])  # no F2P: nothing is solved


def test_check_tries_the_files_synthesis_tries() -> None:
    instance = SweInstance("x-1", "r", SHA, "s", TWO + RENAME, "", fail_to_pass=("tests/t.py::f",))
    gold = [("create", {"path": p, "content": ""}) for p in ("src/a.py", "src/b.py", "src/new.py")]
    gold += [("bash", {"command": "rm -f -- src/old.py"}), ("submit", {})]
    partial = [e for e in exploits(instance, gold) if e.name.startswith("partial_fix")]
    assert removable_paths(instance.patch) == ["src/a.py", "src/b.py"]
    assert [e.name for e in partial] == ["partial_fix[-src/a.py]", "partial_fix[-src/b.py]"]


def test_a_rewarded_partial_fix_is_named_unrelated_change() -> None:
    ok = GradedSubmission("gold", 1.0, "ok")
    rows = [
        GradedSubmission("partial_fix[-src/b.py]", 1.0, "ok", omitted="src/b.py"),
        GradedSubmission("delete_tests", 0.0, "ok"),
    ]
    row = InstanceCheck("x-1", True, "", (ok,), GradedSubmission("empty", 0.0, "ok"), tuple(rows))
    assert row.problems == [unrelated_reason("src/b.py")]
    assert row.problems[0].startswith("unrelated_change[src/b.py]: ") and not row.passed
    assert row.to_dict()["unrelated_changes"] == ["src/b.py"]


# -- the real commands on a real repository -------------------------------------------------

OPS_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
OPS_FIXED = OPS_BUGGY.replace("return a - b", "return a + b", 1)
FIX_MESSAGE = (
    "Fix add() returning the difference\n\nadd(2, 3) returned -1 instead of 5: the function"
    " subtracted its arguments. It must return their sum."
)
SHOW = "def show({0}):\n    return 'value: ' + str({0})\n"
TEST_SHOW = "from calc.fmt import show\n\n\ndef test_show():\n    assert show(2) == 'value: 2'\n"


def _make_repo(repo: Path) -> None:
    """Two commits; the fix also renames ``value`` to ``number`` in fmt.py (no test needs it)."""
    repo.mkdir(parents=True)
    tick = [0]
    run_git(repo, "init", "-q")
    for message, files in (
            ("Start calc", {"pyproject.toml": '[project]\nname = "calc"\nversion = "0.1"\n',
                            "src/calc/__init__.py": "", "src/calc/ops.py": OPS_BUGGY,
                            "src/calc/fmt.py": SHOW.format("value"), "tests/test_ops.py": TEST_SUB,
                            "tests/test_fmt.py": TEST_SHOW}),
            (FIX_MESSAGE, {"src/calc/ops.py": OPS_FIXED, "src/calc/fmt.py": SHOW.format("number"),
                           "tests/test_add.py": TEST_ADD})):  # fmt: skip
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        run_git(repo, "add", "-A")
        run_git(repo, "commit", "-q", "-m", message, tick=tick)


def _check(path: Path) -> dict:
    done = CliRunner().invoke(app, ["check", f"swe:{path}", "--json", "--reruns", "1"])
    assert done.exit_code in (0, 1), done.output
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_synth_and_check_agree_on_a_fix_with_a_cosmetic_rename(tmp_path: Path) -> None:
    from envgym.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap unavailable")
    with private_cache(tmp_path / "cache"):
        _make_repo(tmp_path / "calc")
        out = tmp_path / "out"
        done = CliRunner().invoke(app, ["synth", "swe", "--repo", str(tmp_path / "calc"), "--out", str(out),
                                        "--json"])  # fmt: skip
        assert done.exit_code == 0, done.output
        (instance,) = read_instances(out / "instances.jsonl")
        journal = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
        (validated,) = [r for r in journal if r.get("type") == "validate"]
        # synthesis: the rename left the gold patch, under the shared name, and is kept aside
        assert "set aside unrelated_change[src/calc/fmt.py]" in validated["reason"], validated
        assert removable_paths(instance.patch) == [] and "src/calc/ops.py" in instance.patch
        assert "src/calc/fmt.py" in instance.metadata["unrelated_patch"]
        assert instance.fail_to_pass == ("tests/test_add.py::test_add",)
        # check on synthesis' output: accepted too
        clean = _check(out / "instances.jsonl")
        assert clean["passed"], clean["instances"][0]["problems"]
        # the uncleaned instance: check names the same file with the same reason
        raw = replace(
            instance, instance_id="raw", patch=instance.patch + instance.metadata["unrelated_patch"]
        )
        report = _check(write_instances(tmp_path / "raw.jsonl", [raw]))
        assert not report["passed"]
        assert report["instances"][0]["problems"] == [unrelated_reason("src/calc/fmt.py")], report
