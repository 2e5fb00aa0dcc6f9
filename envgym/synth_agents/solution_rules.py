"""Static rules for ``solution.py``: a gold solution may only call tools and compute.

DeepSeek-V3.2 §3.2.3: "The solution function is restricted to invoking tool functions or
performing logical computations, and cannot call other functions or directly access the
database, ensuring the task can only be solved through the tool interface."  This module reads
the source with ``ast`` (never executes it) and names every violation with its line:

- imports only from :data:`ALLOWED_IMPORTS` (pure computation: json, math, itertools, ...);
- no names that reach files, processes, other modules or the interpreter's insides
  (:data:`FORBIDDEN_NAMES`: ``open``, ``eval``, ``exec``, ``__import__``, ``globals``, ...);
- no dunder attributes (``x.__class__``, ``f.__globals__``): the doors out of a sandboxed value;
- ``getattr``/``setattr``/``hasattr``/``delattr`` only on a solution's ``tools`` parameter.

:mod:`envgym.synth_agents.isolation` then checks dynamically that the solution, run in the sandbox,
never touches the episode state itself.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

ALLOWED_IMPORTS = frozenset(
    {
        "__future__",
        "json",
        "math",
        "itertools",
        "collections",
        "collections.abc",
        "functools",
        "heapq",
        "bisect",
        "re",
        "datetime",
        "statistics",
        "string",
        "operator",
        "dataclasses",
        "typing",
        "copy",
        "fractions",
        "decimal",
        "enum",
    }
)
FORBIDDEN_NAMES = frozenset(
    {
        "open",
        "eval",
        "exec",
        "compile",
        "__import__",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "input",
        "memoryview",
        "help",
        "exit",
        "quit",
        "__builtins__",
        "__loader__",
        "__spec__",
        "sqlite3",
        "envgym",
        "os",
        "sys",
        "subprocess",
        "importlib",
        "builtins",
        "ctypes",
        "pathlib",
        "io",
        "shutil",
        "socket",
    }
)
REFLECTION = frozenset({"getattr", "setattr", "delattr", "hasattr"})
ALLOWED_DUNDERS = frozenset(
    {
        "__init__",
        "__post_init__",
        "__name__",
        "__repr__",
        "__eq__",
        "__hash__",
        "__lt__",
        "__len__",
        "__iter__",
        "__contains__",
    }
)


@dataclass(frozen=True)
class RuleViolation:
    line: int
    message: str

    def __str__(self) -> str:
        return f"solution.py line {self.line}: {self.message}"


def check_solution_source(
    source: str, solution_functions: tuple[str, ...] = ()
) -> list[RuleViolation]:
    """Every rule the source breaks (empty: it only calls tools and computes)."""
    try:
        tree = ast.parse(source, filename="solution.py")
    except SyntaxError as exc:
        return [RuleViolation(exc.lineno or 0, f"SyntaxError: {exc.msg}")]
    tools_params = _tools_parameters(tree)
    out: list[RuleViolation] = []
    for node in ast.walk(tree):
        out.extend(_node_violations(node, tools_params))
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name in solution_functions:
        if name not in defined:
            out.append(RuleViolation(0, f"no top-level function {name!r}"))
    return sorted(set(out), key=lambda v: (v.line, v.message))


def _tools_parameters(tree: ast.Module) -> frozenset[str]:
    """Names a solution receives its tools under: the first parameter of each top-level function
    (``tools`` by convention) and any ``self.tools``-style attribute assigned from it."""
    names = {"tools"}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.args.args:
            names.add(node.args.args[0].arg)
    return frozenset(names)


def _node_violations(node: ast.AST, tools_params: frozenset[str]) -> list[RuleViolation]:
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Import):
        return [
            RuleViolation(line, f"imports {a.name!r} (allowed: {_allowed()})")
            for a in node.names
            if a.name not in ALLOWED_IMPORTS
        ]
    if isinstance(node, ast.ImportFrom):
        module = "." * node.level + (node.module or "")
        if node.level or module not in ALLOWED_IMPORTS:
            return [RuleViolation(line, f"imports from {module!r} (allowed: {_allowed()})")]
        return []
    if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
        return [RuleViolation(line, f"uses {node.id!r}, which reaches beyond the tools")]
    if isinstance(node, ast.Attribute) and _dunder(node.attr) and node.attr not in ALLOWED_DUNDERS:
        return [RuleViolation(line, f"accesses the dunder attribute {node.attr!r}")]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in REFLECTION
    ):
        target = node.args[0] if node.args else None
        if not _is_tools(target, tools_params):
            return [RuleViolation(line, f"{node.func.id}() is allowed on the tools object only")]
    if isinstance(node, (ast.Global, ast.Nonlocal)) and any(_dunder(n) for n in node.names):
        return [RuleViolation(line, "declares a dunder name")]
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _dunder(node.value.strip())
    ):
        return [RuleViolation(line, f"spells the dunder name {node.value.strip()!r} in a string")]
    return []


def _is_tools(node: ast.AST | None, tools_params: frozenset[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in tools_params
    return isinstance(node, ast.Attribute) and node.attr == "tools"


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _allowed() -> str:
    return ", ".join(sorted(ALLOWED_IMPORTS - {"__future__", "collections.abc"}))
