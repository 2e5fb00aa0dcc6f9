"""The search-QA verifier never raises: huge, float-overflowing and non-finite number answers,
and any text at all, get a normal verdict (a 400-digit answer used to end in OverflowError)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envgym.envs.search_qa.bundle_files.verifier import MAX_CHARS, equivalent, verify_answer

KINDS = ("number", "name", "version", "person")
BIG = "1" * 400  # int(float(BIG)) is int(inf): OverflowError


def _task(
    answer: str = "12", kind: str = "number", aliases: list[str] | None = None
) -> dict[str, Any]:
    meta = {"answer": answer, "kind": kind, "aliases": aliases or []}
    return {"id": "q", "prompt": "How many?", "metadata": meta}


def _verdict(answer: object, task: dict[str, Any]) -> dict[str, tuple[bool, str]]:
    report = verify_answer({"answer": answer}, task)
    assert isinstance(report, dict) and isinstance(report["checks"], list)
    for check in report["checks"]:
        assert isinstance(check["passed"], bool) and isinstance(check["detail"], str)
    return {c["name"]: (c["passed"], c["detail"]) for c in report["checks"]}


HOSTILE = [
    BIG,
    "-" + BIG,
    BIG + ".0",
    str(10**400) + ".0",  # 10**400 written as a float would be
    "1e400",
    "1.0e+400",
    "1e999999",
    "inf",
    "-inf",
    "Infinity",
    "nan",
    "NaN",
    "9" * 5000,  # past int()'s 4300-digit limit
    "9" * 5000 + ".0",
]


@pytest.mark.parametrize("answer", HOSTILE, ids=lambda a: a[:12] + f"…{len(a)}")
@pytest.mark.parametrize("kind", KINDS)
def test_hostile_numbers_get_a_failing_verdict(answer: str, kind: str) -> None:
    checks = _verdict(answer, _task("12", kind))
    assert checks["answer_given"] == (True, "")
    assert checks["answer_correct"][0] is False
    assert equivalent(answer, "12", [], kind) is False


def test_huge_numbers_compare_exactly() -> None:
    task = _task(BIG)
    assert _verdict(BIG, task)["answer_correct"][0]
    assert _verdict(BIG + ".00", task)["answer_correct"][0]  # the same integer, written as 12.0 is
    assert not _verdict("1" * 399 + "2", task)["answer_correct"][0]  # float would call these equal
    assert not _verdict("1" * 401, task)["answer_correct"][0]
    assert _verdict("12.0", _task("twelve"))["answer_correct"][0]  # the small forms still work


def test_an_overlong_answer_is_wrong_without_being_parsed() -> None:
    checks = _verdict("1" * (MAX_CHARS + 1), _task("1" * (MAX_CHARS + 1)))
    assert checks["answer_correct"] == (False, f"the answer is longer than {MAX_CHARS} characters")
    assert equivalent("x" * (MAX_CHARS + 1), "x", [], "name") is False


def test_answers_that_are_not_text_are_not_given() -> None:
    for answer in (None, 12, 1e308, float("inf"), ["12"], {"n": 12}):
        assert _verdict(answer, _task())["answer_given"][0] is False
    assert verify_answer("not a dict", _task())["checks"][0]["passed"] is False  # type: ignore[arg-type]


NUMBERISH = st.from_regex(r"\A[-+ ]?[0-9]{0,700}(\.[0-9]{0,5})?([eE][-+]?[0-9]{1,7})?\Z")


@settings(max_examples=200, deadline=None)
@given(
    answer=st.text(max_size=300) | NUMBERISH,
    kind=st.sampled_from(KINDS),
    expected=st.sampled_from(["12", BIG, "libfoo1", "2:1.0-1", "Jane Doe <jane@example.org>"]),
)
def test_the_verifier_never_raises(answer: str, kind: str, expected: str) -> None:
    checks = _verdict(answer, _task(expected, kind, aliases=[expected.upper()]))
    assert checks["answer_given"][0] == bool(answer.strip())
    assert isinstance(equivalent(answer, expected, [], kind), bool)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=-(10**600), max_value=10**600),
    st.integers(min_value=-(10**600), max_value=10**600),
)
def test_integer_answers_are_equal_exactly_when_the_integers_are(a: int, b: int) -> None:
    assert equivalent(str(a), str(b), [], "number") is (a == b)
    assert equivalent(f"{a}.0", str(b), [], "number") is (a == b)
