"""One name per concept: no class or type-alias name is defined in two modules of the core
(envgym/, less the rooms that live under it) and envgym/trainer/.

Two ``Policy`` classes, or a ``Budget`` next to a ``Budgets``, make a reader (and an import
completion) pick the wrong one; a second definition of the same concept drifts from the first.
Where two modules need the same thing, one defines it and the other imports it; where they are
different things, each gets a name that says what it is.  Files are parsed with ``ast`` (nothing
is imported).  Private ``_Names`` are each module's own business and are not checked.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("envgym", "envgym/trainer")
# The other rooms live under envgym/ too (docs/ARCHITECTURE.md, "Rooms") and are not scanned.
OTHER_ROOMS = ("envs", "tools", "synth_agents", "kernels", "apps", "benchmarks")

pytestmark = pytest.mark.timeout(60)


#: A type-ish name: CapWords (``Messages``, ``StepResult``), not a CONSTANT or a ``T`` TypeVar.
CAPWORDS = re.compile(r"[A-Z][a-z]\w*")


def _defined(tree: ast.Module) -> list[tuple[str, int]]:
    """Module-level class names, explicit type aliases (``X: TypeAlias = ...``) and plain
    CapWords aliases (``Messages = Sequence[...]``)."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out.append((node.name, node.lineno))
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(node.annotation, ast.Name)
            and node.annotation.id == "TypeAlias"
        ):
            out.append((node.target.id, node.lineno))
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            out.extend((n, node.lineno) for n in names if CAPWORDS.fullmatch(n))
    return out


def definitions(rooms: tuple[str, ...] = ROOMS) -> dict[str, list[str]]:
    """Public name → every ``path:line`` defining it in ``rooms``."""
    found: dict[str, list[str]] = defaultdict(list)
    for room in rooms:
        for path in sorted((ROOT / room).rglob("*.py")):
            inner = path.relative_to(ROOT / room).parts
            if room == "envgym" and inner[0] in (*OTHER_ROOMS, "trainer"):
                continue  # another room (the trainer is scanned as its own room)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for name, line in _defined(tree):
                if not name.startswith("_"):
                    found[name].append(f"{path.relative_to(ROOT)}:{line}")
    return found


def test_the_rooms_are_found() -> None:
    names = definitions()
    assert "Policy" in names and "TrainBatch" in names  # the scan reads both rooms


def test_no_name_is_defined_in_two_modules() -> None:
    twice = {name: where for name, where in definitions().items() if len(where) > 1}
    assert not twice, "one name per concept; defined more than once: " + "; ".join(
        f"{name} at {', '.join(where)}" for name, where in sorted(twice.items())
    )


def test_the_check_sees_a_duplicate() -> None:
    """The scan itself: a class and an alias of one name in two modules are both found."""
    a = ast.parse("class Budget:\n    pass\n")
    b = ast.parse("from typing import TypeAlias\nBudget: TypeAlias = int\n_Private = 1\n")
    c = ast.parse("Budget = dict[str, int]\nLIMIT = 3\nT = 1\n")
    assert _defined(a) == [("Budget", 1)] and _defined(b) == [("Budget", 2)]
    assert _defined(c) == [("Budget", 1)]  # constants and one-letter TypeVars are not names
