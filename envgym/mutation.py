"""Single mutants of a verifier's source (``envgym check --mutation``; docs/CHECK.md).

A mutant is verifier.py with one small change a careless or adversarial author could make: a
comparison flipped or shifted (``<`` to ``>=`` or ``<=``), ``and``/``or`` swapped, an ``if`` test
replaced by ``True`` or ``False``, a statement that records a failure dropped, a constant changed
(an integer by one, a float by a factor of ten: tolerances), a ``return`` of a list emptied.  A
check that a verifier is strict should see each mutant that changes what the verifier pays.

Only the source text is handled here (``ast`` on the host, never executed); running a mutant is
``envgym.mutation_run``'s job, in the sandbox.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass

MAX_MUTANTS = 2000  # a verifier with more mutation points is sampled, not enumerated

_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
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
_SHIFT: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}
# Calls whose statement records a verdict: dropping the statement stops recording that failure.
_RECORDING = {"append", "setdefault", "extend", "add", "update"}


@dataclass(frozen=True)
class Mutant:
    id: str  # stable within one source: "<kind>@<line>:<col>#<n>"
    kind: str  # compare_flip | compare_shift | boolop_swap | if_true | if_false | drop | constant | return_empty
    line: int
    description: str
    source: str


def mutants(source: str, *, limit: int = MAX_MUTANTS) -> list[Mutant]:
    """Every single mutant of ``source`` that still parses, in source order, at most ``limit``.

    Raises ``SyntaxError`` when ``source`` itself does not parse (the bundle loader would have
    refused it already).
    """
    tree = ast.parse(source)
    sites = list(_sites(tree))
    out: list[Mutant] = []
    seen = {ast.unparse(tree)}
    for n, (path, kind, description, line) in enumerate(sites):
        mutated = copy.deepcopy(tree)
        if kind == "drop":  # ``pass`` in the statement's slot of its parent's body
            field, index = path[-1]
            getattr(_follow(mutated, path[:-1]), field)[index] = ast.Pass()
        elif not _apply(_follow(mutated, path), kind):
            continue
        ast.fix_missing_locations(mutated)
        text = ast.unparse(mutated)
        if text in seen:
            continue
        seen.add(text)
        out.append(Mutant(f"{kind}@{line}#{n}", kind.split(":")[0], line, description, text))
        if len(out) >= limit:
            break
    return out


NodePath = tuple[tuple[str, int | None], ...]  # (field, index) steps from the module root


def _walk(node: ast.AST, path: NodePath) -> Iterator[tuple[ast.AST, NodePath]]:
    yield node, path
    for name, value in ast.iter_fields(node):
        if isinstance(value, list):
            for i, child in enumerate(value):
                if isinstance(child, ast.AST):
                    yield from _walk(child, path + ((name, i),))
        elif isinstance(value, ast.AST):
            yield from _walk(value, path + ((name, None),))


def _follow(tree: ast.AST, path: NodePath) -> ast.AST:
    node = tree
    for name, index in path:
        value = getattr(node, name)
        node = value[index] if index is not None else value
    return node


def _in_function(path: NodePath, tree: ast.Module) -> bool:
    node: ast.AST = tree
    for name, index in path:
        value = getattr(node, name)
        node = value[index] if index is not None else value
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


def _sites(tree: ast.Module) -> Iterator[tuple[NodePath, str, str, int]]:
    """(path to node, kind, description, line) of every mutation point inside a function."""
    for node, path in _walk(tree, ()):
        if not path or not _in_function(path, tree):
            continue
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                name = type(op).__name__
                if type(op) in _FLIP:
                    yield path, f"compare_flip:{i}", f"{name} -> {_FLIP[type(op)].__name__}", line
                if type(op) in _SHIFT:
                    yield path, f"compare_shift:{i}", f"{name} -> {_SHIFT[type(op)].__name__}", line
        elif isinstance(node, ast.BoolOp):
            yield path, "boolop_swap", "and <-> or", line
        elif isinstance(node, (ast.If, ast.IfExp)):
            yield path, "if_true", "if test -> True", line
            yield path, "if_false", "if test -> False", line
        elif isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign)) and _records(node):
            yield path, "drop", "statement dropped", line
        elif isinstance(node, ast.Constant) and _number(node.value):
            yield path, "constant:up", f"{node.value!r} changed up", line
            yield path, "constant:down", f"{node.value!r} changed down", line
        elif (
            isinstance(node, ast.Return)
            and isinstance(node.value, (ast.List, ast.Dict))
            and (node.value.elts if isinstance(node.value, ast.List) else node.value.keys)
        ):
            yield path, "return_empty", "returns an empty container", line


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _records(node: ast.stmt) -> bool:
    """A statement that records a failure: ``out.setdefault(k, []).append(...)``, ``out[k] = [...]``."""
    if isinstance(node, ast.Expr):
        call = node.value
        return (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in _RECORDING
        )
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Subscript) for t in node.targets)
    return isinstance(node, ast.AugAssign)


def _apply(node: ast.AST, kind: str) -> bool:
    """Mutate ``node`` in place (a deep copy's node); False when the kind does not apply."""
    base, _, arg = kind.partition(":")
    if base in ("compare_flip", "compare_shift") and isinstance(node, ast.Compare):
        i = int(arg)
        table = _FLIP if base == "compare_flip" else _SHIFT
        node.ops[i] = table[type(node.ops[i])]()
        return True
    if base == "boolop_swap" and isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return True
    if base in ("if_true", "if_false") and isinstance(node, (ast.If, ast.IfExp)):
        node.test = ast.Constant(base == "if_true")
        return True
    if base == "constant" and isinstance(node, ast.Constant) and _number(node.value):
        value = node.value
        if isinstance(value, int):
            node.value = value + 1 if arg == "up" else value - 1
        elif isinstance(value, float):  # _number admits only int and float
            node.value = value * 10 if arg == "up" else value / 10
        return True
    if base == "return_empty" and isinstance(node, ast.Return):
        node.value = (
            ast.List(elts=[], ctx=ast.Load())
            if isinstance(node.value, ast.List)
            else ast.Dict(keys=[], values=[])
        )
        return True
    return False
