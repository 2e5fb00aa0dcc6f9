"""AST mutations of one function: the bugs SWE-smith-style synthesis (``envgym/envs/swe/smith.py``)
plants.

The source is parsed with ``ast`` but never re-printed as a whole: each :class:`Mutation` is a
replacement of one node's exact character span, built from the original text of its operands, so
the bug's diff touches only the mutated expression (comments and formatting elsewhere survive, and
the gold patch — the reverse diff — is as small as a real one-line fix).

Kinds (one site each):

* ``negate_compare`` — ``<`` ↔ ``>=``, ``>`` ↔ ``<=``, ``==`` ↔ ``!=``, ``in`` ↔ ``not in``,
  ``is`` ↔ ``is not``;
* ``compare_boundary`` — ``<`` ↔ ``<=``, ``>`` ↔ ``>=`` (the classic off-by-one at a bound);
* ``off_by_one`` — an integer literal ± 1;
* ``range_bound`` — ``range(..., stop)`` → ``range(..., (stop) - 1)`` for a computed stop;
* ``swap_boolop`` — ``and`` ↔ ``or``;
* ``drop_not`` — ``not x`` → ``x``;
* ``return_none`` — ``return <expr>`` → ``return None``;
* ``change_binop`` — ``+`` ↔ ``-``, ``*`` → ``+``, ``/`` → ``*``, ``//`` → ``/``, ``%`` → ``//``,
  ``**`` → ``*``, ``<<`` ↔ ``>>``, ``|`` ↔ ``&``.

Operands are copied as written and parenthesised unless they are atoms, and every rebuilt
expression is parenthesised as a whole, so a mutation never changes how its neighbours bind.
Nodes inside f-strings are left alone (Python 3.11 reports unreliable positions there).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

KINDS = (
    "negate_compare",
    "compare_boundary",
    "off_by_one",
    "range_bound",
    "swap_boolop",
    "drop_not",
    "return_none",
    "change_binop",
)
_NEGATE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BOUNDARY: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}
_CMP_TEXT: dict[type[ast.cmpop], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}
_BINOP: dict[type[ast.operator], tuple[str, str]] = {  # operator -> (its text, the mutant's text)
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "+"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "/"),
    ast.Mod: ("%", "//"),
    ast.Pow: ("**", "*"),
    ast.LShift: ("<<", ">>"),
    ast.RShift: (">>", "<<"),
    ast.BitOr: ("|", "&"),
    ast.BitAnd: ("&", "|"),
}
_ATOMS = (
    ast.Name,
    ast.Attribute,
    ast.Call,
    ast.Constant,
    ast.Subscript,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Set,
)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class FunctionSite:
    """A function (or method) in a source file, as the tracer names it."""

    path: str  # relative to the repository root, POSIX separators
    qualname: str  # ``Class.method``, ``outer.<locals>.inner``: Python's own ``co_qualname``
    first_line: int  # ``co_firstlineno``: the first decorator's line, else the ``def`` line
    end_line: int


@dataclass(frozen=True)
class Mutation:
    kind: str
    path: str
    function: str  # FunctionSite.qualname
    line: int  # 1-based line of the mutated node
    start: int  # character offsets of the replaced span in the file's text
    end: int
    original: str  # the span's text before ...
    replacement: str  # ... and after

    def apply(self, text: str) -> str:
        if text[self.start : self.end] != self.original:
            raise ValueError(f"{self.path} changed since the mutation was found")
        return text[: self.start] + self.replacement + text[self.end :]

    def describe(self) -> str:
        return f"{self.kind} in {self.path}::{self.function} line {self.line}: {self.original!r} -> {self.replacement!r}"

    def digest(self) -> str:
        """Stable identity (instance ids, de-duplication): what changes where."""
        key = "\0".join([self.path, self.function, self.kind, str(self.start), self.replacement])
        return hashlib.sha256(key.encode()).hexdigest()


def functions(path: str, source: str) -> list[FunctionSite]:
    """Every function and method in ``source`` (``[]`` when it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[FunctionSite] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append(FunctionSite(path, qualname, first, child.end_lineno or child.lineno))
                visit(child, qualname + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def mutations(source: str, site: FunctionSite) -> list[Mutation]:
    """Every mutation of ``site``'s own body (nested functions are sites of their own), in source order."""
    tree = ast.parse(source)
    node = _find(tree, site)
    if node is None:
        return []
    spans = _Spans(source)
    found: list[Mutation] = []
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]  # the docstring
    for statement in body:
        for target in _walk(statement):
            for kind, replaced, text in _mutants(target, spans):
                start, end = spans.span(replaced)
                found.append(
                    Mutation(
                        kind,
                        site.path,
                        site.qualname,
                        replaced.lineno,
                        start,
                        end,
                        source[start:end],
                        text,
                    )
                )  # type: ignore[attr-defined]
    found.sort(key=lambda m: (m.start, m.end, KINDS.index(m.kind), m.replacement))
    return found


def _find(tree: ast.AST, site: FunctionSite) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    name = site.qualname.rsplit(".", 1)[-1]
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name == name
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) == site.first_line
        ):
            return node
    return None


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and its descendants, without nested scopes, f-strings and annotations."""
    if isinstance(node, (*_SCOPES, ast.JoinedStr)):
        return
    yield node
    for name, value in ast.iter_fields(node):
        if name in ("annotation", "returns", "type_comment"):
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST):
                yield from _walk(child)


class _Spans:
    """Character offsets of AST nodes (``col_offset`` counts UTF-8 bytes, not characters)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def _offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(
            line.encode("utf-8")[:col].decode("utf-8", errors="replace")
        )

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self._offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self._offset(node.end_lineno, node.end_col_offset),
        )  # type: ignore[attr-defined]

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def operand(self, node: ast.AST) -> str:
        text = self.text(node)
        return text if isinstance(node, _ATOMS) else f"({text})"


def _mutants(node: ast.AST, spans: _Spans) -> Iterator[tuple[str, ast.AST, str]]:
    """(kind, the node whose span is replaced, the replacement text) for one node."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            for kind, table in (("negate_compare", _NEGATE), ("compare_boundary", _BOUNDARY)):
                if type(op) in table:
                    ops = [*node.ops[:index], table[type(op)](), *node.ops[index + 1 :]]
                    parts = [spans.operand(node.left)]
                    for other, right in zip(ops, node.comparators):
                        parts += [_CMP_TEXT[type(other)], spans.operand(right)]
                    yield kind, node, "(" + " ".join(parts) + ")"
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        for value in (node.value + 1, node.value - 1):
            yield "off_by_one", node, str(value) if value >= 0 else f"({value})"
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "range"
        and 1 <= len(node.args) <= 3
        and not node.keywords
    ):
        stop = node.args[0] if len(node.args) == 1 else node.args[1]
        if not isinstance(stop, (ast.Constant, ast.Starred)):
            yield "range_bound", stop, f"({spans.text(stop)}) - 1"
    elif isinstance(node, ast.BoolOp):
        other = " or " if isinstance(node.op, ast.And) else " and "
        yield "swap_boolop", node, "(" + other.join(spans.operand(v) for v in node.values) + ")"
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "drop_not", node, f"({spans.text(node.operand)})"
    elif (
        isinstance(node, ast.Return)
        and node.value is not None
        and not (isinstance(node.value, ast.Constant) and node.value.value is None)
    ):
        yield "return_none", node, "return None"
    elif (
        isinstance(node, ast.BinOp)
        and type(node.op) in _BINOP
        and not _is_text(node.left)
        and not _is_text(node.right)
    ):
        _, mutant = _BINOP[type(node.op)]
        yield (
            "change_binop",
            node,
            f"({spans.operand(node.left)} {mutant} {spans.operand(node.right)})",
        )


def _is_text(node: ast.AST) -> bool:
    """A str/bytes literal or f-string: ``%`` there formats, ``+`` concatenates — not arithmetic bugs."""
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
    )
