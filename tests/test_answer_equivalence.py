"""Answer equivalence that cannot be gamed: the code-interpreter verifier accepts a
*value* in any canonical form and rejects arithmetic that still needs computing, hostile input
without raising, and the prompt's own expressions on every default task."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from envgym.envs.code_interpreter.reasoning import bundle_module

verifier = bundle_module("verifier")

POWER = "Compute -731.2715^-2. Return your final answer correct to 3 significant figures."
ROUND2 = "What is the average salary? Round to 2 decimal places."
ROUND3 = "What is the Pearson correlation? Round to 3 decimal places."
DAYS = "In weather.csv, what is the longest run of consecutive days without rain in Tunis?"
EQUATION = "Solve for e: 33 - 98*e = -8199"


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


N = "number"
# (given, kind, expected, prompt, accepted) -- cases once mishandled are marked "found".
TABLE: list[tuple[str, str, str, str, bool]] = [
    # values in canonical forms: accepted
    ("12", N, "12", "", True),
    ("12.0", N, "12", "", True),
    ("+12", N, "12", "", True),
    ("−5", N, "-5", "", True),  # unicode minus
    ("1,234,567", N, "1234567", "", True),  # found: thousands separators
    ("1{,}234{,}567", N, "1234567", "", True),
    ("1\\,234\\,567", N, "1234567", "", True),
    ("\\frac12", N, "0.5", "", True),  # found
    ("\\frac{1}{2}", N, "0.5", "", True),
    ("\\dfrac{3}{4}", N, "3/4", "", True),
    ("-\\frac{3}{4}", N, "-0.75", "", True),
    ("\\frac{-3}{4}", N, "-0.75", "", True),
    ("3/4", N, "0.75", "", True),
    ("x = 3", N, "3", "", True),  # found
    ("e = 84", N, "84", EQUATION, True),
    ("$12.34", N, "12.34", "", True),  # found: currency
    ("\\$12.34", N, "12.34", "", True),
    ("-$5", N, "-5", "", True),
    ("$12.34$", N, "12.34", "", True),  # math mode, not a dollar sign
    ("\\boxed{12}", N, "12", "", True),
    ("\\boxed{\\frac{1}{2}}", N, "0.5", "", True),
    ("\\(12\\)", N, "12", "", True),
    ("1.5e3", N, "1500", "", True),
    ("1.23 \\times 10^{4}", N, "12300", "", True),
    ("1.23×10^4", N, "12300", "", True),
    ("0x5b993", N, "375187", "", True),
    ("-0x3", N, "-3", "", True),
    ("375187", N, "0x5b993", "", True),
    ("0b101", N, "5", "", True),
    ("2\\sqrt{3}", N, "2\\sqrt{3}", "", True),
    ("\\sqrt{2}/2", N, "\\frac{\\sqrt{2}}{2}", "", True),
    ("\\frac{1}{2}\\sqrt{2}", N, "\\sqrt{2}/2", "", True),
    ("1+\\sqrt{2}", N, "\\sqrt{2}+1", "", True),
    ("3 - 2\\sqrt{5}", N, "-2\\sqrt{5}+3", "", True),
    ("3\\sqrt{2}", N, "4.24", ROUND2, True),  # a surd against a rounded decimal
    ("9 days", N, "9", DAYS, True),  # a unit the task names
    ("1.87e-6", N, "1.8700047263398788e-06", POWER, True),
    ("1.8700047e-06", N, "1.8700047263398788e-06", POWER, True),  # more digits than asked
    ("105611.11", N, "105611.11", ROUND2, True),
    ("105611.114", N, "105611.11", ROUND2, True),  # rounds to the answer
    ("51", N, "51.0", ROUND2, True),
    ("-0.204", N, "-0.204", ROUND3, True),
    ("-0.2044", N, "-0.204", ROUND3, True),
    # expressions, hostile and wrong values: rejected
    ("478 / 1 + -682", N, "-204", "", False),  # found: prompt echo
    ("245.8034^7", N, "5.421446805085293e+16", POWER, False),  # found
    ("\\boxed{657 * 233}", N, "153081", "", False),  # found
    ("3 4", N, "12", "", False),  # found: juxtaposition
    ("abs(-12)", N, "12", "", False),  # found
    ("exp(0)", N, "1", "", False),  # found
    ("1.879e-06", N, "1.8700047263398788e-06", POWER, False),  # found: 5e-3 relative, 3 s.f. differ
    ("1.9e-06", N, "1.8700047263398788e-06", POWER, False),
    ("1e999", N, "1", "", False),  # found: hostile
    ("(-8)^(1/3)", N, "-2", "", False),  # found
    ("-" * 3000 + "1", N, "1", "", False),  # found: 3,000 nested signs
    ("10^400", N, "1" + "0" * 400, "", False),  # found
    ("1e99999999", N, "1", "", False),
    ("9**9**9**9", N, "1", "", False),
    ("nan", N, "1", "", False),
    ("inf", N, "1", "", False),
    ("\\infty", N, "1", "", False),
    ("1" * 1_000_000, N, "1", "", False),  # 1 MB
    ("9" * 5000, N, "1", "", False),  # past Python's int() digit limit
    ("-242 / 22", N, "-11", "", False),  # prompt echo: an unreduced fraction
    ("24/2", N, "12", "", False),
    ("6/8", N, "0.75", "", False),
    ("\\frac{36}{146}", N, "18/73", "", False),
    ("1/0", N, "1", "", False),
    ("2+3", N, "5", "", False),
    ("5 - 3", N, "2", "", False),
    ("2 - -1", N, "3", "", False),
    ("2\\cdot 3", N, "6", "", False),
    ("2^3", N, "8", "", False),
    ("2**10", N, "1024", "", False),
    ("0.1 + 0.2", N, "0.3", "", False),
    ("12 \\times 1", N, "12", "", False),
    ("120 \\times 10^{-1}", N, "12", "", False),  # not scientific notation (mantissa >= 10)
    ("\\sqrt{4}", N, "2", "", False),
    ("\\sqrt{12}", N, "2\\sqrt{3}", "", False),  # not simplified
    ("sqrt(16)", N, "4", "", False),
    ("\\sqrt{100000007}", N, "1", "", False),  # radicand above the bound
    ("1 + \\sqrt{2} + 1", N, "2+\\sqrt{2}", "", False),
    ("12 apples", N, "12", "", False),  # a unit the task does not name
    ("2x", N, "2", EQUATION, False),
    ("12%", N, "12", "", False),
    ("12,5", N, "12.5", "", False),  # a decimal comma is ambiguous
    ("1 234", N, "1234", "", False),
    ("x = 3 = 4", N, "3", "", False),
    ("43", N, "42", "", False),
    ("0.7500001", N, "0.75", "", False),  # no precision stated: exact
    ("24.8", N, "24.83", ROUND2, False),
    ("105611.1", N, "105611.11", ROUND2, False),
    ("105611.116", N, "105611.11", ROUND2, False),
    ("-0.21", N, "-0.204", ROUND3, False),
    # fractions in lowest terms
    ("18/73", "reduced_fraction", "$\\frac{18}{73}$", "", True),
    ("\\frac{18}{73}", "reduced_fraction", "18/73", "", True),
    ("$3899/9710$", "reduced_fraction", "3899/9710", "", True),
    ("\\frac{36}{146}", "reduced_fraction", "$\\frac{18}{73}$", "", False),  # prompt echo
    ("0.2465753424657534", "reduced_fraction", "18/73", "", False),  # not a fraction
    ("19/73", "reduced_fraction", "18/73", "", False),
    ("3", "reduced_fraction", "3", "", True),
    # lists and sets
    ("['a', 'b']", "word_list", "a, b", "", True),  # found
    ('["a", "b"]', "word_list", "a, b", "", True),
    ("[a, b]", "word_list", "a, b", "", True),
    ("b, a", "word_list", "a, b", "", False),
    ("['a', 'b', 'c']", "word_list", "a, b", "", False),
    ("[4, 6, 7, 3]", "int_list", "4 6 7 3", "", True),
    ("4, 6, 7, 3", "int_list", "4 6 7 3", "", True),
    ("[4, 6, 3, 7]", "int_list", "4 6 7 3", "", False),
    ("4 6 7 1+2", "int_list", "4 6 7 3", "", False),
    ("2^2 × 3", "int_multiset", "2 × 2 × 3", "", True),
    ("3 \\times 2 \\times 2", "int_multiset", "2 × 2 × 3", "", True),
    ("2 × 6", "int_multiset", "2 × 2 × 3", "", False),
    ("12", "int_multiset", "2 × 2 × 3", "", False),
    ("2^65", "int_multiset", "2 × 2 × 3", "", False),  # factor exponents up to 64
    ("\\{3, 1, 2\\}", "int_set", "{1, 2, 3}", "", True),
    ("\\{3, 1\\}", "int_set", "{1, 2, 3}", "", False),
    ("[[0,1],[1,0]]", "int_grid", "0 1\n1 0", "", True),
    ("[[0,1],[1,1]]", "int_grid", "0 1\n1 0", "", False),
    ("[" * 100_000 + "]" * 100_000, "int_grid", "0 1\n1 0", "", False),
    # expressions (the answer *is* an expression): equivalence plus the asked form
    ("x^2 + 2x + 1", "expression", "(x+1)**2", "", True),
    ("x**2 + 2*x", "expression", "(x+1)**2", "", False),
    ("(-8)^(1/3)*x", "expression", "-2*x", "", False),
    ("x^20000", "expression", "x", "", False),  # integer powers up to 10,000
    ("(9^9999)^20*x", "expression", "x", "", False),  # exact results up to 200,000 bits
]
EXPANDED_ROWS = [
    ("6*x**2 + 3*x", "6*x**2 + 3*x", True),
    ("3*x + 6*x^2", "6*x**2 + 3*x", True),
    ("3*x*(2*x + 1)", "6*x**2 + 3*x", False),  # the product the prompt asks to expand
    ("2*3*x**2 + 3*x", "6*x**2 + 3*x", False),  # numbers still to multiply
    ("5*x**2 + x**2 + 3*x", "6*x**2 + 3*x", False),  # like terms not combined
]


@pytest.mark.parametrize(
    ("given", "kind", "expected", "prompt", "accepted"),
    TABLE,
    ids=[f"{i}" for i in range(len(TABLE))],
)
def test_table(given: str, kind: str, expected: str, prompt: str, accepted: bool) -> None:
    ok, detail = verdict(given, kind, expected, prompt)
    assert ok is accepted, detail
    assert "could not be checked" not in detail  # rejected on purpose, not by the last-resort guard


@pytest.mark.parametrize(("given", "expected", "accepted"), EXPANDED_ROWS)
def test_expanded_form(given: str, expected: str, accepted: bool) -> None:
    assert verdict(given, "expression", expected, form="expanded")[0] is accepted


def test_table_is_large_and_covers_both_verdicts() -> None:
    assert len(TABLE) + len(EXPANDED_ROWS) >= 80
    assert sum(row[4] for row in TABLE) >= 30 and sum(not row[4] for row in TABLE) >= 30


def test_rejections_say_what_is_wrong() -> None:
    assert verdict("478 / 1 + -682", N, "-204")[1] == (
        "'478 / 1 + -682' is an expression, not a value: compute it and give the result"
    )
    assert (
        verdict("-242 / 22", N, "-11")[1]
        == "-242 / 22 is not a fraction in lowest terms (denominator >= 2): simplify it"
    )
    assert (
        verdict("1e99999999", N, "1")[1] == "exponent 99999999 is out of range (|exponent| <= 1000)"
    )
    assert (
        verdict("12 apples", N, "12")[1]
        == "unexpected text 'apples' after the number (units only where the task names them)"
    )
    assert (
        verdict("\\sqrt{12}", N, "1")[1]
        == "√12 is not a simplified surd (radicand >= 2, squarefree, <= 100000000)"
    )
    assert (
        verdict("0.25", "reduced_fraction", "1/4")[1]
        == "write the answer as a fraction a/b in lowest terms"
    )
    assert verdict("1" * 30_000, N, "1")[1] == "answer longer than 20000 characters"
    assert (
        verdict("-" * 3000 + "1", "expression", "x")[1]
        == "expression too deeply nested or too long"
    )
    assert (
        verdict("-" * 1000 + "x", "expression", "x")[1]
        == "expression too deeply nested or too long"
    )  # < token cap
    assert (
        verdict("(" * 65 + "x" + ")" * 65, "expression", "x")[1]
        == "expression too deeply nested or too long"
    )


# -- cross-check against math-verify (host side, trusted strings only) -----------------------
# math-verify (HuggingFace, parses LaTeX, then sympy) is the maintained parser we measured: it
# cannot run in the sandbox (stdlib only), and on this table it differs from us on exactly these
# rows, for four reasons.  Every difference is math-verify accepting an answer we found
# gameable or reading a form it does not know -- the justification for a stdlib value reader.
_EVALUATES = "evaluates arithmetic / unsimplified forms (the prompt-echo exploit)"
_NO_PRECISION = "does not know the task's stated precision"
_FORMAT = "does not read this notation"
_TEXT = "drops text it does not understand (units the task never named, %)"
MATH_VERIFY_DIFFERS = {
    **{
        g: _FORMAT
        for g in ("1\\,234\\,567", "\\$12.34", "-$5", "1.5e3", "0x5b993", "-0x3", "375187", "0b101")
    },
    **{
        g: _NO_PRECISION
        for g in (
            "3\\sqrt{2}",
            "1.87e-6",
            "1.8700047e-06",
            "105611.114",
            "-0.2044",
            "0.7500001",
            "0.2465753424657534",
        )
    },
    **{
        g: _EVALUATES
        for g in (
            "478 / 1 + -682",
            "\\boxed{657 * 233}",
            "10^400",
            "-242 / 22",
            "24/2",
            "6/8",
            "\\frac{36}{146}",
            "2+3",
            "5 - 3",
            "2 - -1",
            "2\\cdot 3",
            "2^3",
            "0.1 + 0.2",
            "12 \\times 1",
            "120 \\times 10^{-1}",
            "\\sqrt{4}",
            "\\sqrt{12}",
            "sqrt(16)",
            "1 + \\sqrt{2} + 1",
        )
    },
    **{g: _TEXT for g in ("12 apples", "12%")},
}


@pytest.mark.timeout(120)
def test_where_math_verify_differs_and_why() -> None:
    from envgym.envs.code_interpreter.oracle import math_verify_equivalent

    rows = [
        r for r in TABLE if r[1] in (N, "reduced_fraction") and len(r[0]) < 200
    ]  # skip the 1 MB rows
    differs = [
        given
        for given, _, expected, _, ours in rows
        if math_verify_equivalent(expected, given) is not ours
    ]
    assert set(differs) == set(MATH_VERIFY_DIFFERS)
    print(f"math-verify agrees on {len(rows) - len(differs)} of {len(rows)} rows")


# -- the prompt-echo exploit, on every default task ---------------------------------------------
_WORD = re.compile(r"(?<![\\\w])[A-Za-z]{2,}\b")  # an English word (not \frac, not the x of 0x1f)
_NUMBER = re.compile(r"-?(?:0x[0-9a-f]+|\d[\d.,]*(?:e[+-]?\d+)?)", re.IGNORECASE)


def echoes(prompt: str) -> set[str]:
    """The prompt's own text, its lines, the math between its words, equation sides, numbers."""
    out = {prompt, *prompt.splitlines()}
    for line in prompt.splitlines():
        for span in _WORD.split(line):
            if re.search(r"\d", span):
                out.add(span.strip(" .,:?\"'"))
                out.update(side.strip(" .,:?\"'") for side in re.split(r"[=:]", span))
    out.update(_NUMBER.findall(prompt))
    out.update(m.group(0) for m in re.finditer(r"\\[dt]?frac\{\d+\}\{\d+\}", prompt))
    grid = re.search(r"\[\[.*\]\]", prompt, re.S)
    if grid:
        out.add(grid.group(0))
    return {c for c in out if c.strip()}


def literally_the_answer(candidate: str, answer: str) -> bool:
    """An echo that *is* the right answer written as a value (e.g. 3877 = its own factorization)."""
    squash = lambda s: re.sub(r"[\s\[\],$]", "", s).rstrip(".")  # noqa: E731
    return not re.search(r"[+*/^×]|\d\s*-", candidate) and squash(candidate) == squash(answer)


@pytest.fixture(scope="module")
def default_tasks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    from envgym.envs.code_interpreter.build import build_bundle

    out = build_bundle(tmp_path_factory.mktemp("ci") / "bundle")  # the default bundle's arguments
    return [json.loads(line) for line in Path(out, "tasks.jsonl").read_text().splitlines()]


@pytest.mark.timeout(300)
def test_prompt_echo_is_rejected_on_every_default_task(default_tasks: list[dict[str, Any]]) -> None:
    assert len(default_tasks) == 121
    tried = legit = 0
    accepted: list[tuple[str, str]] = []
    for task in default_tasks:
        answer = str(task["metadata"]["answer"])
        for echo in echoes(task["prompt"]):
            if literally_the_answer(echo, answer):
                legit += 1
                continue
            for submission in ({"answer": echo}, {"answer": f"\\boxed{{{echo}}}"}, {"answer": f"${echo}$"},
                               {"content": f"So the result is \\boxed{{{echo}}}"}):  # fmt: skip
                tried += 1
                report = verifier.verify_answer(submission, task)
                if all(c["passed"] for c in report["checks"]):
                    accepted.append((task["id"], echo[:80]))
    assert accepted == []
    print(f"echo candidates tried: {tried}, literally the answer (skipped): {legit}")
    assert tried > 4 * 121 and legit < tried // 20
