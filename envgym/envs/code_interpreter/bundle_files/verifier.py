"""Verifier of code-interpreter tasks: is the submitted answer an equivalent *value*?

Runs in the bundle sandbox (``python -I -S``, standard library only).  A number must be
written as a value -- integer, decimal, scientific, fraction in lowest terms, simplified surd,
with ``\\boxed``/``$``/``x =``/currency/units the prompt names -- never as arithmetic still to
compute (echoing the prompt's ``478 / 1 + -682`` must not score).  Tolerance follows the task's
stated precision, arithmetic is exact (``Fraction``), symbolic answers are rational functions
compared at random rational points, every input is bounded, and ``verify_answer`` never raises.
The accepted forms and the reasons are in docs/CODE_INTERPRETER.md, "Answer equivalence".
"""

from __future__ import annotations

import ast
import json
import math
import random
import re
from decimal import Context, Decimal
from fractions import Fraction
from typing import NamedTuple

MAX_CHARS = 20_000  # an answer longer than this is rejected before any parsing
MAX_BITS = 200_000  # size limit of exact intermediate results
MAX_EXP10 = 1_000  # |k| of 1e±k / ×10^k: 1e999999999 would build a huge exact integer
MAX_DEPTH = 64  # bracket nesting: ast.parse recurses (3,000 nested signs -> RecursionError)
MAX_SIGNS = 4  # consecutive unary signs
MAX_TOKENS = 1_500
MAX_ROOT = 10**8  # radicand limit: squarefree test by trial division stays < 10^4 steps
_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
}


class AnswerError(ValueError):
    """The answer text cannot be read as the expected kind of answer."""


# -- extraction ---------------------------------------------------------------------------
def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def final_answer(content: str) -> str:
    """The answer in a final message: the last \\boxed{...}, else the last 'Answer:' line."""
    boxed = last_boxed(content)
    if boxed is not None:
        return boxed
    for line in reversed(content.strip().splitlines()):
        match = re.match(r"^[\s*#_]*(?:final answer|answer)\s*[:：]\s*(.+)$", line, re.IGNORECASE)
        if match:
            return match.group(1).strip().strip("*_ ").rstrip(".")
    raise AnswerError("no final answer found: write it as \\boxed{...} or on a line 'Answer: ...'")


def clean(text: str) -> str:
    if len(text) > MAX_CHARS:
        raise AnswerError(f"answer longer than {MAX_CHARS} characters")
    text = text.strip()
    boxed = last_boxed(text)
    if boxed is not None and text.startswith("\\boxed{") and text.endswith("}"):
        text = boxed.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("`", "`")):
        if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
            text = text[len(left) : -len(right)].strip()
    return text


# -- values -------------------------------------------------------------------------------
class Num(NamedTuple):
    """``rat + coef * sqrt(rad)``; ``form`` says how it was written."""

    rat: Fraction
    coef: Fraction
    rad: int
    form: str  # int | decimal | sci | fraction | surd

    def approx(self) -> Fraction:
        if not self.coef:
            return self.rat
        return self.rat + self.coef * Fraction(Decimal(self.rad).sqrt(Context(prec=60)))


_LATEX_SPACES = (("\\left", ""), ("\\right", ""), ("\\displaystyle", ""), ("\\!", ""), ("\\,", ""),
                 ("\\;", " "), ("\\ ", " "), ("{,}", ","), ("−", "-"), ("\u2009", ""), ("\u202f", ""))  # fmt: skip
_HEX = re.compile(r"[+-]?0(?:[xX][0-9a-fA-F]+|[bB][01]+|[oO][0-7]+)")
_PLAIN = re.compile(r"([+-]?)(\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+))?")
_SCI = re.compile(
    r"([+-]?)([1-9](?:\.\d*)?)\s*(?:\\times|\\cdot|×|·|\*)\s*10\s*(?:\^|\*\*)\s*\{?\s*([+-]?\d+)\s*\}?"
)
_RATIO = re.compile(r"([+-]?)\s*(\d+)\s*/\s*(\d+)")
# [±] [p/q | k] √n [/m]: \frac{..}{..} and \sqrt{..} are rewritten to a/b and √n first
_SURD = re.compile(r"([+-]?)\s*(?:(\d+)\s*/\s*(\d+)|(\d+))?\s*\*?\s*√(\d+)(?:\s*/\s*(\d+))?")
_REWRITES = ((r"\\sqrt\s*\{\s*(\d+)\s*\}|\\sqrt\s*(\d)|\bsqrt\s*\(\s*(\d+)\s*\)|√\s*[{(]\s*(\d+)\s*[})]", r"√\1\2\3\4"),
             (r"\\[dt]?frac\s*(?:\{\s*([+-]?\d*\s*√?\d+)\s*\}\s*\{\s*(\d+)\s*\}|(\d)\s*(\d))", r"\1\3/\2\4"),
             (r"\\(?:text|mathrm|textrm|mbox|operatorname)\s*\{([^{}]*)\}", r" \1"))  # fmt: skip


def _int(digits: str) -> int:
    try:
        return int(digits, 0) if _HEX.fullmatch(digits) else int(digits)
    except ValueError:  # Python refuses int() of > 4300 digits
        raise AnswerError("number with too many digits") from None


def _reduced(p: int, q: int, strict: bool, what: str) -> Fraction:
    if q == 0:
        raise AnswerError("division by zero")
    if strict and (q < 2 or math.gcd(p, q) != 1):
        raise AnswerError(
            f"{what} is not a fraction in lowest terms (denominator >= 2): simplify it"
        )
    return Fraction(p, q)


def _rational(t: str, strict: bool) -> Num | None:
    """An integer, decimal, scientific number or fraction of integers; None if ``t`` is none."""
    if _HEX.fullmatch(t):
        return Num(Fraction(_int(t)), Fraction(0), 1, "int")
    match = _PLAIN.fullmatch(t) or _SCI.fullmatch(t)
    if match:
        sign, mantissa, exponent = match.groups()
        power = _int(exponent) if exponent else 0
        if abs(power) > MAX_EXP10:
            raise AnswerError(f"exponent {power} is out of range (|exponent| <= {MAX_EXP10})")
        value = Fraction(
            _int(mantissa.replace(",", "").replace(".", "") or "0"),
            10 ** len(mantissa.partition(".")[2]),
        )
        value *= Fraction(10) ** power
        form = "sci" if exponent else "decimal" if "." in mantissa else "int"
        return Num(-value if sign == "-" else value, Fraction(0), 1, form)
    match = _RATIO.fullmatch(t)
    if match:
        sign, p, q = match.groups()
        return Num(_reduced(_int(sign + p), _int(q), strict, t), Fraction(0), 1, "fraction")
    return None


def _surd(t: str, strict: bool) -> tuple[Fraction, int] | None:
    """(coefficient, radicand) of ``[±]k√n``, ``k√n/m``, ``p/q√n``; None if ``t`` is none."""
    match = _SURD.fullmatch(t)
    if match is None:
        return None
    sign, p, q, k, n, m = match.groups()
    if q and m:
        raise AnswerError(f"{t[:60]!r} has two denominators: simplify it")
    coef = _reduced(_int(p or k or "1"), _int(q or m or "1"), strict and bool(q or m), t)
    rad = _int(n)
    if strict and (
        rad < 2 or rad > MAX_ROOT or any(rad % (d * d) == 0 for d in range(2, math.isqrt(rad) + 1))
    ):
        raise AnswerError(
            f"√{rad} is not a simplified surd (radicand >= 2, squarefree, <= {MAX_ROOT})"
        )
    if not coef:
        raise AnswerError("a zero coefficient before a square root")
    return (-coef if sign == "-" else coef), rad


def read_number(text: str, prompt: str = "", strict: bool = True) -> Num:
    """A number written as a value (see the module docstring); AnswerError names what is wrong."""
    t = clean(text)
    for old, new in _LATEX_SPACES:
        t = t.replace(old, new)
    for pattern, repl in _REWRITES:
        t = re.sub(pattern, repl, t)
    t = _strip_decorations(t.strip(), prompt) if strict else t.strip()
    value = _rational(t, strict)
    term = None if value else _surd(t, strict)
    if value or term:
        return value or Num(Fraction(0), term[0], term[1], "surd")  # type: ignore[index]
    # r ± k√n or k√n ± r: split at the one binary sign (not the sign of an exponent, 1e-5)
    split = re.fullmatch(r"([+-]?[^+-]*[^+\-eE\s(\[{^*/])\s*([+-])\s*([^+-]+)", t)
    if split:
        left, sign, right = (s.strip() for s in split.groups())
        minus = "-" if sign == "-" else ""
        for rat_text, surd_text in ((left, minus + right), (minus + right, left)):
            rat = _rational(rat_text, strict)
            term = _surd(surd_text, strict) if rat and rat.form != "sci" else None
            if rat and term:
                return Num(rat.rat, term[0], term[1], "surd")
    if re.search(r"[-+*/^×÷·()]|\\[a-z]|\d\s+\d|[a-zA-Z]{2,}\s*\(", t):
        raise AnswerError(
            f"{t[:60]!r} is an expression, not a value: compute it and give the result"
        )
    raise AnswerError(f"{t[:60]!r} is not a number")


def _strip_decorations(t: str, prompt: str) -> str:
    """Drop ``x =``, a currency sign, and a trailing unit word that the prompt uses."""
    match = re.fullmatch(r"[A-Za-z]\w*\s*=\s*(.+)", t, re.S)
    t = match.group(1).strip() if match else t
    match = re.fullmatch(r"([+-]?)\s*(?:\\\$|\$|€|£|¥)\s*(.+)", t, re.S)
    t = match.group(1) + match.group(2).strip() if match else t
    match = (
        None
        if _HEX.fullmatch(t)
        else re.fullmatch(r"(.*[\d}.])\s*([A-Za-z%°][A-Za-z%° ]*)", t, re.S)
    )
    if match:
        said = set(re.findall(r"[a-z%°]+", prompt.lower())) | (
            {"percent"} if "%" in prompt else set()
        )
        unit = [w.rstrip("s") for w in match.group(2).lower().split()]
        if any(len(w) < 2 and w not in ("%", "°") for w in match.group(2).split()) or not all(
            u in said or u + "s" in said or u in ("%", "percent") and "percent" in said
            for u in unit
        ):
            raise AnswerError(
                f"unexpected text {match.group(2)!r} after the number (units only where the task names them)"
            )
        t = match.group(1).strip()
    return t


# -- precision --------------------------------------------------------------------------------
def precision(task: dict) -> tuple[str, int] | None:
    """("dec", N) or ("sig", N) as the task states it (metadata keys, else the prompt's words)."""
    meta = task.get("metadata") or {}
    if isinstance(meta.get("decimals"), int):
        return ("dec", meta["decimals"])
    if isinstance(meta.get("sig_figs"), int):
        return ("sig", meta["sig_figs"])
    prompt = str(task.get("prompt") or "").lower()
    count = r"(\d+|" + "|".join(_NUMBER_WORDS) + r")"
    for kind, pattern in (
        ("dec", count + r" decimal (?:places?|digits?)"),
        ("sig", count + r" significant (?:figures?|digits?)"),
    ):
        match = re.search(pattern, prompt)
        if match:
            word = match.group(1)
            return (kind, min(int(word) if word.isdigit() else _NUMBER_WORDS[word], 100))
    return None


def _round_sig(x: Fraction, figures: int) -> Fraction:
    """``x`` rounded half-even to ``figures`` significant figures, exactly (reasoning-gym's rule)."""
    if not x:
        return x
    exponent = (
        Context(prec=120).divide(Decimal(abs(x.numerator)), Decimal(x.denominator)).adjusted()
    )
    unit = Fraction(10) ** (exponent - figures + 1)
    return round(x / unit) * unit


def numbers_match(given: Num, expected: Num, task: dict) -> bool:
    meta = task.get("metadata") or {}
    stated = precision(task)
    if stated and stated[0] == "dec":
        e = round(expected.approx(), stated[1])
        return abs(given.approx() - e) <= Fraction(1, 2 * 10 ** stated[1])
    if stated:
        return _round_sig(given.approx(), stated[1]) == _round_sig(expected.approx(), stated[1])
    abs_tol, rel_tol = Fraction(str(meta.get("abs_tol", 0))), Fraction(str(meta.get("rel_tol", 0)))
    if abs_tol or rel_tol:
        e = expected.approx()
        return abs(given.approx() - e) <= max(abs_tol, rel_tol * abs(e))
    return (given.rat, given.coef, given.rad if given.coef else 1) == (
        expected.rat,
        expected.coef,
        expected.rad if expected.coef else 1,
    )


# -- symbolic answers: rational functions, exact ----------------------------------------------
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.?\d*|\.\d+)|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<op>\*\*|[-+*/()^]))"
)
_OPS = {
    ast.Add: Fraction.__add__,
    ast.Sub: Fraction.__sub__,
    ast.Mult: Fraction.__mul__,
    ast.Div: Fraction.__truediv__,
}
_LATEX = ((r"\left", ""), (r"\right", ""), (r"\cdot", "*"), (r"\times", "*"), ("×", "*"), ("·", "*"), ("−", "-"),
          (r"\,", ""), (r"\!", ""), ("{", "("), ("}", ")"))  # fmt: skip


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos, depth, signs = [], 0, 0, 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise AnswerError(f"unexpected character {text[pos:].strip()[:1]!r}")
        kind = match.lastgroup or ""
        tok = match.group(kind)
        depth += {"(": 1, ")": -1}.get(tok, 0)
        signs = (
            signs + 1
            if tok in ("+", "-") and (not out or out[-1][1] in ("+", "-", "*", "/", "(", "^", "**"))
            else 0
        )
        if depth > MAX_DEPTH or signs > MAX_SIGNS or len(out) >= MAX_TOKENS:
            raise AnswerError("expression too deeply nested or too long")
        out.append((kind, tok))
        pos = match.end()
    return out


def to_python(text: str) -> str:
    """Math text -> a Python expression: \\frac, LaTeX products, ^, implicit products (2x, 3(x+1))."""
    for _ in range(20):  # \frac{a}{b} -> ((a)/(b)), innermost first
        new = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"((\1)/(\2))", text)
        if new == text:
            break
        text = new
    for old, new in _LATEX:
        text = text.replace(old, new)
    parts: list[str] = []
    prev = ("", "")
    for kind, tok in _tokens(text):
        if (prev[0] in ("num", "name") or prev[1] == ")") and (
            kind in ("num", "name") or tok == "("
        ):
            parts.append("*")
        parts.append("**" if tok == "^" else tok)
        prev = (kind, tok)
    return " ".join(parts)


def parse(text: str) -> ast.Expression:
    try:
        return ast.parse(to_python(clean(text)), mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        raise AnswerError(f"not a well-formed expression: {text.strip()[:80]!r}") from None


def evaluate(node: ast.AST, env: dict[str, Fraction]) -> Fraction:
    """Exact value of a whitelisted expression (numbers, variables, + - * /, integer powers)."""
    if isinstance(node, ast.Expression):
        return evaluate(node.body, env)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if not math.isfinite(node.value):
            raise AnswerError("number out of range")
        return Fraction(node.value) if isinstance(node.value, int) else Fraction(repr(node.value))
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise AnswerError(f"unknown name {node.id!r}")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = evaluate(node.operand, env)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(
        node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
    ):
        a, b = evaluate(node.left, env), evaluate(node.right, env)
        if isinstance(node.op, ast.Pow):
            if (
                b.denominator != 1
                or abs(b.numerator) > 10_000
                or (a.numerator.bit_length() + a.denominator.bit_length()) * abs(b.numerator)
                > MAX_BITS
            ):
                raise AnswerError("only integer powers of moderate size are allowed")
            if not a and b < 0:
                raise AnswerError("division by zero")
            return a**b.numerator  # type: ignore[return-value]
        if isinstance(node.op, ast.Div) and not b:
            raise AnswerError("division by zero")
        out = _OPS[type(node.op)](a, b)
        if out.numerator.bit_length() + out.denominator.bit_length() > MAX_BITS:
            raise AnswerError("number too large")
        return out
    raise AnswerError(f"unsupported syntax: {type(node).__name__}")


def same_expression(given: str, expected: str, seed: str, points: int = 6) -> bool:
    g, e = parse(given), parse(expected)
    names = [{n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} for tree in (g, e)]
    # A variable the reference lacks is no part of the answer: "0 * y" is zero everywhere, but
    # it is not the simplification of an expression without y (and words like "(approx)" parse
    # as variables too).
    extra = sorted(names[0] - names[1])
    if extra:
        raise AnswerError(f"unknown variable {extra[0][:40]!r}: the task has no such variable")
    variables = sorted(names[1])
    rng = random.Random(seed)
    agreed = 0
    for _ in range(points * 4):
        env = {v: Fraction(rng.randint(-97, 97), rng.randint(1, 13)) for v in variables}
        try:
            ev = evaluate(e, env)
        except AnswerError:
            continue  # a pole of the reference: pick another point
        if evaluate(g, env) != ev:
            return False
        agreed += 1
        if agreed >= points:
            return True
    raise AnswerError("could not evaluate the expressions at enough points")


def expanded(node: ast.AST) -> str:
    """'' when ``node`` is a sum of distinct monomials (one numeric coefficient each), else why not."""
    terms: list[ast.AST] = []
    while isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        terms.append(node.right)
        node = node.left
    terms.append(node)
    seen: set[tuple[tuple[str, int], ...]] = set()
    for term in terms:
        factors, numbers = _factors(term), 0
        if factors is None:
            return "not expanded into a sum of terms"
        powers: dict[str, int] = {}
        for name, exponent in factors:
            numbers += name == ""
            if name:
                powers[name] = powers.get(name, 0) + exponent
        key = tuple(sorted(powers.items()))
        if numbers > 1 or key in seen:
            return "not simplified: multiply out the numbers and combine like terms"
        seen.add(key)
    return ""


def _factors(node: ast.AST) -> list[tuple[str, int]] | None:
    """A term's factors as (variable, exponent) and ("", 0) per number; None if not a product."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _factors(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left, right = _factors(node.left), _factors(node.right)
        return None if left is None or right is None else left + right
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Pow)
        and isinstance(node.left, ast.Name)
    ):
        right = node.right
        return (
            [(node.left.id, right.value)]
            if isinstance(right, ast.Constant) and type(right.value) is int
            else None
        )
    if isinstance(node, ast.Name):
        return [(node.id, 1)]
    return [("", 0)] if isinstance(node, ast.Constant) else None


# -- structured answers ------------------------------------------------------------------------
def _items(text: str) -> list[str]:
    t = clean(text).replace("\\{", "{").replace("\\}", "}")
    while len(t) >= 2 and t[0] + t[-1] in ("[]", "()", "{}"):
        t = t[1:-1].strip()
    return [x for x in re.split(r"[\s,;]+", t) if x]


def int_list(text: str, factors: bool = False) -> list[int]:
    """Integers in a list (``[1, 2]``, ``1 2``, ``{1, 2}``); ``factors``: ``2 × 2 × 3``, ``2^2 \\cdot 3``."""
    t = clean(text)
    if factors:
        for old in ("\\times", "\\cdot", "·", "**", "*"):
            t = t.replace(old, "^" if old == "**" else "×")
        t = t.replace("×", " ")
    out: list[int] = []
    for item in _items(t):
        match = (
            re.fullmatch(r"([+-]?\d+)(?:\^\{?(\d+)\}?)?", item)
            if factors
            else re.fullmatch(r"[+-]?\d+", item)
        )
        if match is None:
            raise AnswerError(f"expected a list of integers, found {item[:40]!r}")
        times = _int(match.group(2)) if factors and match.group(2) else 1
        if times > 64:
            raise AnswerError("exponent of a factor above 64")
        out += [_int(match.group(1) if factors else item)] * times
    return out


def int_grid(text: str) -> list[list[int]]:
    text = clean(text)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = [
            [x for x in re.split(r"[\s,]+", line.strip("[]() ,")) if x]
            for line in text.strip().splitlines()
            if line.strip()
        ]
    if not isinstance(data, list) or not data or not all(isinstance(row, list) for row in data):
        raise AnswerError("expected a grid: rows of integers")
    if not all(
        type(x) is int or isinstance(x, str) and re.fullmatch(r"[+-]?\d+", x)
        for row in data
        for x in row
    ):
        raise AnswerError("expected a grid of integers")
    return [[_int(str(x)) for x in row] for row in data]


def sudoku_ok(grid: list[list[int]], puzzle: list[list[int]]) -> str:
    """'' when ``grid`` solves ``puzzle``, else what is wrong."""
    n = len(puzzle)
    box = math.isqrt(n)
    if len(grid) != n or any(len(r) != n for r in grid):
        return f"the grid must be {n}x{n}"
    full = set(range(1, n + 1))
    for i in range(n):
        if set(grid[i]) != full:
            return f"row {i + 1} does not hold 1..{n} once each"
        if {grid[r][i] for r in range(n)} != full:
            return f"column {i + 1} does not hold 1..{n} once each"
    for br in range(0, n, box):
        for bc in range(0, n, box):
            if {grid[r][c] for r in range(br, br + box) for c in range(bc, bc + box)} != full:
                return f"the box at row {br + 1}, column {bc + 1} does not hold 1..{n} once each"
    for r in range(n):
        for c in range(n):
            if puzzle[r][c] and puzzle[r][c] != grid[r][c]:
                return f"the given digit at row {r + 1}, column {c + 1} was changed"
    return ""


def words(text: str) -> list[str]:
    """``a, b``, ``[a, b]``, ``['a', 'b']``, ``["a", "b"]``: the words in order, quotes removed."""
    t = clean(text)
    if len(t) >= 2 and t[0] + t[-1] in ("[]", "()"):
        t = t[1:-1]
    items = [w.strip() for w in t.split(",")]
    return [w[1:-1] if len(w) >= 2 and w[0] == w[-1] and w[0] in "'\"" else w for w in items if w]


# -- the verifier -----------------------------------------------------------------------------
def compare(given: str, task: dict) -> tuple[bool, str]:
    """(equivalent, detail).  Raises AnswerError when ``given`` does not parse as the kind."""
    meta = task["metadata"]
    kind, expected, prompt = meta["answer_kind"], str(meta["answer"]), str(task.get("prompt") or "")
    if kind in ("number", "reduced_fraction"):
        g, e = read_number(given, prompt), read_number(expected, strict=False)
        if kind == "reduced_fraction" and g.form not in ("fraction", "int"):
            return False, "write the answer as a fraction a/b in lowest terms"
        ok = numbers_match(g, e, task)
        return ok, "" if ok else f"{clean(given)[:60]} is not equal to the expected value"
    if kind == "expression":
        if not same_expression(given, expected, str(task.get("id", ""))):
            return False, "not equivalent to the expected expression"
        why = expanded(parse(given).body) if meta.get("form") == "expanded" else ""
        return (False, f"equivalent, but {why}") if why else (True, "")
    if kind in ("int_multiset", "int_list", "int_set"):
        factors = kind == "int_multiset"
        g, e = int_list(given, factors), int_list(expected, factors)
        ok = (
            g == e
            if kind == "int_list"
            else sorted(g) == sorted(e)
            if factors
            else set(g) == set(e)
        )
        return ok, "" if ok else "different numbers" if factors else "different list"
    if kind == "int_grid":
        ok = int_grid(given) == int_grid(expected)
        return ok, "" if ok else "different grid"
    if kind == "sudoku":
        problem = sudoku_ok(int_grid(given), meta["puzzle"])
        return not problem, problem
    if kind == "word_list":
        ok = words(given) == words(expected)
        return ok, "" if ok else "different words or order"
    if kind in ("text", "text_ci"):
        g, e = clean(given), expected.strip()
        ok = g.lower() == e.lower() if kind == "text_ci" else g == e
        return ok, "" if ok else "different text"
    raise AnswerError(f"unknown answer kind {kind!r} in the task")


def _given(submission: dict) -> tuple[str | None, str]:
    """The answer text and, when there is none, why."""
    if "answer" in submission:
        value = submission.get("answer")
        return (
            (value, "")
            if isinstance(value, str) and value.strip()
            else (None, "the answer is empty")
        )
    if "content" in submission:
        try:
            return final_answer(str(submission.get("content") or "")), ""
        except AnswerError as exc:
            return None, str(exc)
    return None, "no answer was submitted"


def verify_answer(submission: dict, task: dict) -> dict:
    given, why = _given(submission)
    checks = [{"name": "answer_present", "passed": given is not None, "detail": why}]
    if given is None:
        return {"checks": checks}
    try:
        ok, detail = compare(given, task)
    except AnswerError as exc:
        checks.append({"name": "answer_parses", "passed": False, "detail": str(exc)})
        return {"checks": checks}
    except Exception as exc:  # noqa: BLE001 -- last resort: a verifier must reject, never crash
        checks.append(
            {
                "name": "answer_parses",
                "passed": False,
                "detail": f"could not be checked ({type(exc).__name__})",
            }
        )
        return {"checks": checks}
    checks.append({"name": "answer_parses", "passed": True, "detail": ""})
    checks.append({"name": "answer_correct", "passed": ok, "detail": detail})
    return {"checks": checks}
