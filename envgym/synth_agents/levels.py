"""Every agreeing difficulty level of the LLM agent becomes a task of one environment.

The seed (DeepSeek-V3.2 §3.2.3) keeps many tasks per synthesized environment (4,417 tasks over
1,827 environments); the agent used to keep only its hardest level.  Each level's reply defines
its own ``solve``/``verify`` and helpers, so to merge the levels into one ``solution.py`` and one
``verifier.py`` each level's code becomes the body of a private factory ``_level_<n>()`` that
returns its entry function, and a top-level ``solve_l<n>(tools, task)`` calls it.  The levels'
helpers live in separate scopes and cannot clobber each other (renaming names instead would
miss keyword arguments and shadowed parameters).
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field
from typing import Any


def scoped(code: str, entry: str, name: str, params: tuple[str, str]) -> str:
    """``code`` wrapped as ``_<name>_scope()`` returning ``entry``, plus ``def <name>(*params)``."""
    tree = ast.parse(code)
    body = [
        n for n in tree.body if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
    ]
    inner = ast.unparse(ast.Module(body=body, type_ignores=[])) or "pass"
    a, b = params
    return (
        f"def _{name}_scope():\n{textwrap.indent(inner, '    ')}\n    return {entry}\n\n\n"
        f"def {name}({a}, {b}):\n    return _{name}_scope()({a}, {b})\n"
    )


@dataclass
class Level:
    """One agreeing level: its task line and its code as the model wrote it."""

    level: int
    task: dict[str, Any]
    solution: str
    verifier: str


@dataclass
class Levels:
    """The agreeing levels so far, merged on demand into one bundle's code and task lines."""

    kept: list[Level] = field(default_factory=list)

    def add(self, level: Level) -> None:
        self.kept = [x for x in self.kept if x.level != level.level] + [level]

    def merged(self) -> tuple[str, str, list[dict[str, Any]]]:
        """(solution.py, verifier.py, task lines) with level *n*'s entries named ``solve_l<n>``/``verify_l<n>``."""
        solutions, verifiers, tasks = [], [], []
        for x in sorted(self.kept, key=lambda k: k.level):
            solve, verify = f"solve_l{x.level}", f"verify_l{x.level}"
            solutions.append(scoped(x.solution, x.task["solution"], solve, ("tools", "task")))
            verifiers.append(scoped(x.verifier, x.task["verifier"], verify, ("submission", "task")))
            tasks.append({**x.task, "solution": solve, "verifier": verify})
        return "\n\n".join(solutions), "\n\n".join(verifiers), tasks
