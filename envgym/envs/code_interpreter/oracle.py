"""Independent equivalence oracles on the host: sympy and math-verify.

The bundle verifier must run in the sandbox (standard library only), so it has its own exact
evaluator.  These oracles check it from outside: the build asserts that every numeric and
symbolic reference answer is sympy-equivalent to what its reference program printed, and the
tests assert that the verifier agrees with sympy and math-verify on tables of equivalent and
non-equivalent answers.  They parse with ``eval`` underneath (sympy's ``parse_expr``), so they
only ever see *trusted* strings — references and test tables, never an agent's answer.
"""

from __future__ import annotations

import re

_HEX = re.compile(r"-?0[xX][0-9a-fA-F]+")


def sympy_equivalent(a: str, b: str) -> bool:
    """``a`` and ``b`` (Python/sympy syntax, ``^`` allowed, implicit products allowed) are equal
    as numbers or as expressions (``simplify(a - b) == 0``)."""
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    transformations = standard_transformations + (implicit_multiplication_application, convert_xor)

    def read(text: str) -> sympy.Expr:
        text = text.strip().replace("×", "*")
        if _HEX.fullmatch(text):
            return sympy.Integer(int(text, 16))
        return parse_expr(text, transformations=transformations, evaluate=True)

    return bool(sympy.simplify(read(a) - read(b)) == 0)


def math_verify_equivalent(gold: str, answer: str) -> bool:
    """math-verify's verdict on two LaTeX answers (wrapped in ``$...$`` when bare)."""
    from math_verify import parse, verify

    def wrap(text: str) -> str:
        return text if "$" in text or "\\boxed" in text else f"${text}$"

    return bool(verify(parse(wrap(gold)), parse(wrap(answer))))
