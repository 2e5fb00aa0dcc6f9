"""JUnit XML parsing and the F2P / P2P / P2F / flaky arithmetic: exact values on tiny inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from envgym.envs.swe.junit import JunitError, collection_errors, parse_junit, test_outcomes
from envgym.envs.swe.outcomes import Classification, check_expected, classify, outcome_class

pytestmark = pytest.mark.timeout(30)


def _xml(*cases: str) -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
        '<testsuite name="pytest" errors="0" failures="0" skipped="0" tests="1">'
        + "".join(cases)
        + "</testsuite></testsuites>"
    )


def test_outcomes_params_classes_errors_skips() -> None:
    text = _xml(
        '<testcase classname="tests.test_a.TestX" name="test_y[a.b]" time="0"/>',
        '<testcase classname="tests.test_a.TestX" name="test_y[c::d]"><failure message="x">t</failure></testcase>',
        '<testcase classname="tests.test_a.TestX.TestInner" name="test_in"/>',
        '<testcase classname="tests.test_a" name="test_err"><error message="failed on setup"/></testcase>',
        '<testcase classname="tests.test_a" name="test_skip"><skipped type="pytest.skip" message="no"/></testcase>',
        '<testcase classname="tests.test_a" name="test_xf"><skipped type="pytest.xfail" message=""/></testcase>',
        '<testcase classname="test_root" name="test_top"/>',
        '<testcase classname="" name="tests.test_bad"><error message="collection failure">E</error></testcase>',
    )
    assert parse_junit(text) == {
        "tests/test_a.py::TestX::test_y[a.b]": "passed",
        "tests/test_a.py::TestX::test_y[c::d]": "failed",
        "tests/test_a.py::TestX::TestInner::test_in": "passed",
        "tests/test_a.py::test_err": "error",
        "tests/test_a.py::test_skip": "skipped",
        "tests/test_a.py::test_xf": "skipped",
        "test_root.py::test_top": "passed",
        "tests/test_bad.py": "error",
    }
    outcomes = parse_junit(text)
    assert collection_errors(outcomes) == ("tests/test_bad.py",)
    assert "tests/test_bad.py" not in test_outcomes(outcomes)


def test_module_found_from_files_and_file_attribute(tmp_path: Path) -> None:
    # Lower-case class and a module folder with a capital letter: convention alone would guess wrong.
    (tmp_path / "Pkg").mkdir()
    (tmp_path / "Pkg" / "test_m.py").write_text("")
    text = _xml('<testcase classname="Pkg.test_m.lowercls" name="test_q"/>')
    assert parse_junit(text, repo_dir=tmp_path) == {"Pkg/test_m.py::lowercls::test_q": "passed"}
    xunit1 = _xml(
        '<testcase classname="a.b.test_c.TestD" name="test_e" file="a/b/test_c.py" line="3"/>'
    )
    assert parse_junit(xunit1) == {"a/b/test_c.py::TestD::test_e": "passed"}


def test_duplicate_id_keeps_the_worse_outcome() -> None:
    text = _xml(
        '<testcase classname="t" name="test_x"/>',
        '<testcase classname="t" name="test_x"><error message="teardown"/></testcase>',
        '<testcase classname="t" name="test_x"/>',
    )
    assert parse_junit(text) == {"t.py::test_x": "error"}


def test_a_bare_testsuite_root_and_bytes_parse() -> None:
    text = b'<testsuite name="pytest"><testcase classname="t" name="test_x"/></testsuite>'
    assert parse_junit(text) == {"t.py::test_x": "passed"}
    assert parse_junit(_xml()) == {}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ('<testsuites><testsuite name="pytest"><testcase classname="t" name="te', "malformed"),
        ("not xml at all", "malformed"),
        ("<html><body/></html>", "root element <html>"),
        ('<!DOCTYPE x [<!ENTITY a "aaaa">]><testsuites/>', "DOCTYPE"),
        ('<testsuites><testcase classname="" name=""/></testsuites>', "neither"),
    ],
)
def test_unusable_reports_raise_junit_error(text: str, words: str) -> None:
    with pytest.raises(JunitError, match=words):
        parse_junit(text)


# --- the arithmetic ----------------------------------------------------------------------------

P, F, E, S = "passed", "failed", "error", "skipped"


def test_classify_exact_sets() -> None:
    base = [
        {"t.py::a": F, "t.py::b": P, "t.py::c": P, "t.py::d": P, "t.py::e": S, "t.py::f": E},
        {"t.py::a": E, "t.py::b": P, "t.py::c": P, "t.py::d": F, "t.py::e": S, "t.py::f": F},
    ]
    gold = [
        {"t.py::a": P, "t.py::b": P, "t.py::c": F, "t.py::d": P, "t.py::e": P, "t.py::f": P},
        {"t.py::a": P, "t.py::b": P, "t.py::c": F, "t.py::d": P, "t.py::e": P, "t.py::f": F},
    ]
    assert classify(base, gold) == Classification(
        fail_to_pass=("t.py::a",),
        pass_to_pass=("t.py::b",),
        pass_to_fail=("t.py::c",),
        flaky=("t.py::d", "t.py::f"),
    )


def test_collection_error_before_the_fix_counts_as_fail() -> None:
    base = [{"tests/test_new.py": E, "tests/test_old.py::t": P}]
    gold = [{"tests/test_new.py::test_fix": P, "tests/test_old.py::t": P}]
    assert outcome_class("tests/test_new.py::test_fix", base[0]) == "fail"
    assert outcome_class("tests/test_x.py::gone", base[0]) == "absent"
    assert classify(base, gold) == Classification(
        ("tests/test_new.py::test_fix",), ("tests/test_old.py::t",), (), ()
    )


def test_a_test_that_disappears_or_is_skipped_after_the_fix_is_p2f() -> None:
    base = [{"t.py::gone": P, "t.py::skipped": P, "t.py::new": P}]
    gold = [{"t.py::skipped": S, "u.py::other": P}]
    found = classify(base, gold)
    assert found.pass_to_fail == ("t.py::gone", "t.py::new", "t.py::skipped")
    assert found.pass_to_pass == () and found.fail_to_pass == ()


def test_absent_in_one_repeat_is_flaky_and_classify_needs_runs() -> None:
    assert classify([{"t.py::x": P}, {}], [{"t.py::x": P}]).flaky == ("t.py::x",)
    with pytest.raises(ValueError):
        classify([], [{}])


def test_check_expected_names_every_disagreement() -> None:
    found = Classification(("t.py::a",), ("t.py::b",), (), ("t.py::d",))
    assert check_expected(found, ["t.py::a"], ["t.py::b"]) == ""
    assert check_expected(found, ["t.py::b", "t.py::d"], ["t.py::a"]) == (
        "FAIL_TO_PASS test t.py::b does not flip from fail to pass; FAIL_TO_PASS test t.py::d is flaky; "
        "PASS_TO_PASS test t.py::a does not pass before and after"
    )
