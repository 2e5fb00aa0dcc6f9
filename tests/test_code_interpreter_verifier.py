"""Answer checking of code-interpreter tasks: equivalence, not string matching — and the
sandbox verifier agrees with sympy and math-verify (independent oracles) on the same pairs."""

from __future__ import annotations

from typing import Any

import pytest

from envgym.envs.code_interpreter.oracle import math_verify_equivalent, sympy_equivalent
from envgym.envs.code_interpreter.reasoning import bundle_module

verifier = bundle_module("verifier")


def verdict(
    given: str, kind: str, expected: str, prompt: str = "", **meta: Any
) -> tuple[bool, str]:
    task = {
        "id": "t1",
        "prompt": prompt,
        "metadata": {"answer_kind": kind, "answer": expected, **meta},
    }
    report = verifier.verify_answer({"answer": given}, task)
    failed = [c for c in report["checks"] if not c["passed"]]
    return (not failed, failed[0]["detail"] if failed else "")


@pytest.mark.parametrize(
    ("given", "expected", "equal"),
    [
        ("42", "42", True),
        ("42.0", "42", True),
        ("0x5b993", "375187", True),  # hex
        ("-0x3", "-3", True),
        ("3/4", "0.75", True),
        ("$\\frac{3}{4}$", "0.75", True),
        ("\\boxed{6}", "6", True),
        ("1.5e3", "1500", True),
        ("0.3", "0.30000000000000004", False),  # exact rationals, not floats
        ("43", "42", False),
        ("0.7500001", "0.75", False),
    ],
)
def test_numbers_are_compared_exactly(given: str, expected: str, equal: bool) -> None:
    assert verdict(given, "number", expected)[0] is equal


def test_tolerances_come_from_the_task() -> None:
    # metadata tolerances apply when the prompt states no precision
    assert verdict("-1.37e-3", "number", "-0.0013674811612376526", rel_tol=5e-3) == (True, "")
    assert verdict("-1.5e-3", "number", "-0.0013674811612376526", rel_tol=5e-3)[0] is False
    assert verdict("12.3449", "number", "12.34", abs_tol=0.005 + 1e-6) == (True, "")
    assert verdict("12.36", "number", "12.34", abs_tol=0.005 + 1e-6)[0] is False
    # a precision the prompt states wins over a looser rel_tol (5e-3 let 1.879e-06 pass)
    power = {
        "prompt": "Compute 912.0685^-2. Return your final answer correct to 3 significant figures."
    }
    assert verdict("1.20e-06", "number", "1.202112425968132e-06", rel_tol=5e-3, **power) == (
        True,
        "",
    )
    assert (
        verdict("1.206e-06", "number", "1.202112425968132e-06", rel_tol=5e-3, **power)[0] is False
    )


@pytest.mark.parametrize(
    ("prompt", "meta", "stated"),
    [
        ("What is the mean? Round to 2 decimal places.", {}, ("dec", 2)),
        ("Give it rounded to three decimal places", {}, ("dec", 3)),
        ("Return your final answer correct to 3 significant figures.", {}, ("sig", 3)),
        ("How many days?", {}, None),
        ("How many days?", {"decimals": 1}, ("dec", 1)),
        ("Round to 2 decimal places.", {"sig_figs": 4}, ("sig", 4)),
    ],
)
def test_precision_is_read_from_the_task(
    prompt: str, meta: dict[str, Any], stated: tuple[str, int] | None
) -> None:
    assert verifier.precision({"prompt": prompt, "metadata": meta}) == stated


def test_expressions_are_compared_symbolically() -> None:
    assert verdict("x^2 + 2x + 1", "expression", "(x+1)**2") == (True, "")
    assert verdict("x**2 + 2*x", "expression", "(x+1)**2") == (
        False,
        "not equivalent to the expected expression",
    )
    # A variable the reference lacks is rejected even where it cancels: "0 (unverified)" reads as
    # 0 times a variable, zero everywhere, and earned the reward of "Simplify this expression: 0".
    for given, expected, name in (
        ("y*x - x*y + 3", "3", "x"),
        ("0 (unverified)", "0", "unverified"),
    ):
        assert verdict(given, "expression", expected) == (
            False,
            f"unknown variable {name!r}: the task has no such variable",
        )
    expanded = "-896*x**4 + 2240*x**3 + 3584*x"
    assert verdict(expanded, "expression", "64*x*(-14*x**3 + 35*x**2 + 56)", form="expanded") == (
        True,
        "",
    )
    assert verdict("64*x*(-14*x**3 + 35*x**2 + 56)", "expression", expanded, form="expanded") == (
        False,
        "equivalent, but not expanded into a sum of terms",
    )
    assert verdict(
        "-448*x**4 - 448*x**4 + 2240*x**3 + 3584*x", "expression", expanded, form="expanded"
    ) == (
        False,
        "equivalent, but not simplified: multiply out the numbers and combine like terms",
    )


def test_structured_answers() -> None:
    assert verdict("138/583", "reduced_fraction", "138/583") == (True, "")
    assert verdict("276/1166", "reduced_fraction", "138/583") == (
        False,
        "276/1166 is not a fraction in lowest terms (denominator >= 2): simplify it",
    )
    assert verdict("3 × 2 × 2", "int_multiset", "2 × 2 × 3") == (True, "")
    assert verdict("2 × 3", "int_multiset", "2 × 2 × 3") == (False, "different numbers")
    assert verdict("[[0,1],[1,0]]", "int_grid", "0 1\n1 0") == (True, "")
    assert verdict("4 6 7 3", "int_list", "[4, 6, 7, 3]") == (True, "")
    assert verdict("b, a", "word_list", "a, b") == (False, "different words or order")
    assert verdict("9A", "text_ci", "9a") == (True, "")
    assert verdict("Crave", "text", "crave") == (False, "different text")
    puzzle = [[2, 0, 0, 3], [0, 0, 1, 0], [1, 0, 3, 0], [3, 0, 2, 1]]
    assert verdict("2 1 4 3\n4 3 1 2\n1 2 3 4\n3 4 2 1", "sudoku", "", puzzle=puzzle) == (True, "")
    assert verdict("2 1 4 3\n4 3 1 2\n1 2 3 4\n3 4 1 2", "sudoku", "", puzzle=puzzle) == (
        False,
        "column 3 does not hold 1..4 once each",
    )


def test_final_messages_are_read_from_the_box_or_an_answer_line() -> None:
    task = {"id": "t", "metadata": {"answer_kind": "number", "answer": "0.5"}}
    passed = lambda sub: all(c["passed"] for c in verifier.verify_answer(sub, task)["checks"])  # noqa: E731
    assert passed({"content": "First \\boxed{3}, corrected: \\boxed{\\frac{1}{2}}."})
    assert passed({"content": "Work...\n**Final answer:** 1/2"})
    report = verifier.verify_answer({"content": "It is one half."}, task)
    assert report["checks"] == [
        {"name": "answer_present", "passed": False,
         "detail": "no final answer found: write it as \\boxed{...} or on a line 'Answer: ...'"}
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("submission", "detail"),
    [
        ({}, "no answer was submitted"),
        ({"answer": "  "}, "the answer is empty"),
        (
            {"answer": "42 (unverified)"},
            "'42 (unverified)' is an expression, not a value: compute it and give the result",
        ),
        (
            {"answer": "__import__('os').system('id')"},
            "\"__import__('os').system('id')\" is an expression, not a value: compute it and give the result",
        ),
        (
            {"answer": "9**9**9**9"},
            "'9**9**9**9' is an expression, not a value: compute it and give the result",
        ),
        ({"answer": "1" * 30_000}, "answer longer than 20000 characters"),
        (
            {"answer": "(lambda: 1)()"},
            "'(lambda: 1)()' is an expression, not a value: compute it and give the result",
        ),
        ({"answer": "1 +"}, "'1 +' is an expression, not a value: compute it and give the result"),
        (
            {"answer": "forty-two"},
            "'forty-two' is an expression, not a value: compute it and give the result",
        ),
        (
            {"answer": "42abc"},
            "unexpected text 'abc' after the number (units only where the task names them)",
        ),
    ],
)
def test_bad_answers_are_rejected_with_a_reason(submission: dict[str, str], detail: str) -> None:
    report = verifier.verify_answer(
        submission, {"id": "t", "metadata": {"answer_kind": "number", "answer": "42"}}
    )
    failed = [c for c in report["checks"] if not c["passed"]]
    assert [c["detail"] for c in failed] == [detail]


PAIRS = [
    ("x^2+2x+1", "(x+1)^2"),
    ("x^2+2x", "(x+1)^2"),
    ("2x(x-3)", "2x^2-6x"),
    ("(x-1)(x+1)", "x^2+1"),
    ("3/4", "0.75"),
    ("1/3", "0.333"),
    ("2^10", "1024"),
    ("7", "7.0"),
]


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_verifier_agrees_with_sympy_and_math_verify(a: str, b: str) -> None:
    ours = verdict(a, "expression", b)[0]
    assert ours == sympy_equivalent(a, b)
    assert ours == math_verify_equivalent(b, a)


_PIECES = ("1", "0", "9", "-", "+", "*", "/", "^", "(", ")", "{", "}", "[", "]", ",", ".", "e", "x", " ", "\\frac",
           "\\sqrt", "√", "$", "\\boxed{", "=", "0x", "\\times", "10", "%", "days", "\\", "'", '"', "\n", "nan", "×")  # fmt: skip
_KINDS = (("number", "12"), ("reduced_fraction", "3/4"), ("expression", "x**2 + 1"), ("int_multiset", "2 × 3"),
          ("int_list", "1 2"), ("int_grid", "0 1\n1 0"), ("word_list", "a, b"), ("int_set", "{1}"), ("text", "a"))  # fmt: skip


@pytest.mark.timeout(120)
def test_random_answers_never_reach_the_last_resort_guard() -> None:
    """Seeded fuzz: every odd string is rejected by a designed check, never by an exception
    (verify_answer's catch-all exists so the sandbox never sees a crash, but should stay unused)."""
    import random

    rng = random.Random(20240901)
    for i in range(3000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 30)))
        kind, expected = _KINDS[i % len(_KINDS)]
        task = {"id": "t", "prompt": "How many days? Round to 2 decimal places." if i % 2 else "",
                "metadata": {"answer_kind": kind, "answer": expected, **({"form": "expanded"} if i % 3 == 0 else {})}}  # fmt: skip
        for submission in ({"answer": text}, {"content": f"\\boxed{{{text}}}"}):
            report = verifier.verify_answer(submission, task)
            assert all("could not be checked" not in c["detail"] for c in report["checks"]), (
                kind,
                text,
            )


@pytest.mark.parametrize(
    "content",
    [
        "\\boxed{" * 50_000,
        "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_001,
        "Answer: " + "9" * 1_000_000,
        "x" * 2_000_000,
    ],
)
def test_hostile_final_messages_are_rejected(content: str) -> None:
    report = verifier.verify_answer(
        {"content": content}, {"id": "t", "metadata": {"answer_kind": "number", "answer": "1"}}
    )
    assert not all(c["passed"] for c in report["checks"])
    assert all("could not be checked" not in c["detail"] for c in report["checks"])
