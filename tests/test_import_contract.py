"""The import layering of docs/ARCHITECTURE.md's "Rooms" table, enforced.

Every ``.py`` file under the rooms is parsed with ``ast`` (nothing is imported), every import
statement is read (top-level and deferred ones inside functions alike, since a deferred import
still ties the importer to the imported room), and two rules are checked:

* an import from one room into another must be allowed by the table's "imports" column, read
  from the doc itself so that doc and test cannot drift apart;
* no import cycle between modules (a cycle hides a constant or helper in the wrong module: the
  fix is to move it to a module both sides import).

Imports guarded by ``if TYPE_CHECKING:`` never run, and those under ``if __name__ == "__main__":``
run only when the module is a script (``python -m``, where it is ``__main__``, not itself), so
they count for the room arrows but not for cycles.

Most rooms live under ``envgym/`` (``envgym/envs/``, ``envgym/trainer/``, ...), inside the core's
folder: a module belongs to the room with the longest folder that holds it, so ``envgym.envs.x``
is in ``envgym/envs/`` and ``envgym.bundle`` in the core, ``envgym/``.  Parent packages that an import runs implicitly (``import a.b`` runs ``a/__init__.py``)
are not edges: an edge goes to the module the statement names.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
EVERYTHING = "everything"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (the longest known module the statement names)
    line: int
    runs: bool  # False under `if TYPE_CHECKING:` or `if __name__ == "__main__":`


def read_rooms(doc: str) -> dict[str, set[str] | None]:
    """The Rooms table: room → the rooms it may import (None: everything)."""
    section = doc.split("## Rooms", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "docs/ARCHITECTURE.md has no Rooms table"
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    rooms = [c[0].strip("`").rstrip("/") for c in cells]
    allowed: dict[str, set[str] | None] = {}
    for room, row in zip(rooms, cells):
        column = row[-1]
        if EVERYTHING in column:
            allowed[room] = None
            continue
        names = {
            re.sub(r"\s*\(.*\)$", "", n.strip().strip("`").rstrip("/")) for n in column.split(",")
        }
        allowed[room] = {n for n in names if n in rooms}
    return allowed


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(rooms: list[str]) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for room in rooms:  # a room inside another's folder is read twice, into the same keys
        for path in sorted((ROOT / room).rglob("*.py")):
            if ".venv" not in path.parts and "__pycache__" not in path.parts:
                files[module_name(path)] = path
    return files


def _guarded_lines(tree: ast.AST) -> set[int]:
    """Lines under ``if TYPE_CHECKING:`` or ``if __name__ == "__main__":``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        test = ast.unparse(node.test) if isinstance(node, ast.If) else ""
        if "TYPE_CHECKING" in test or test in ("__name__ == '__main__'", "'__main__' == __name__"):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _known(name: str, modules: set[str]) -> str:
    """The longest prefix of a dotted name that is a module of ours (or the name itself)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return name


def imports_of(module: str, path: Path, modules: set[str]) -> Iterator[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    guarded = _guarded_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import sub` imports the submodule when there is one, else pkg itself
            names = [f"{base}.{alias.name}" for alias in node.names]
            names = [n if n in modules else base for n in names]
        else:
            continue
        for name in dict.fromkeys(names):
            target = _known(name, modules)
            if target != module:
                yield Import(module, target, node.lineno, node.lineno not in guarded)


@functools.cache
def build_graph() -> tuple[dict[str, set[str] | None], list[Import]]:
    allowed = read_rooms(DOC.read_text(encoding="utf-8"))
    files = python_files(list(allowed))
    modules = set(files)
    edges = [imp for mod, path in files.items() for imp in imports_of(mod, path, modules)]
    return allowed, edges


def room_of(module: str, rooms: Iterable[str]) -> str | None:
    """The room (a folder such as ``envgym/envs``) of a dotted module: the longest room whose
    folder holds it, since rooms nest (``envgym/envs`` in ``envgym``); None outside every room."""
    holding = [
        room
        for room in rooms
        if module == room.replace("/", ".") or module.startswith(room.replace("/", ".") + ".")
    ]
    return max(holding, key=len) if holding else None


def forbidden_arrows(allowed: dict[str, set[str] | None], edges: list[Import]) -> list[str]:
    bad = []
    for imp in edges:
        src, dst = room_of(imp.source, allowed), room_of(imp.target, allowed)
        may = allowed[src] if src is not None else None
        if dst is not None and dst != src and may is not None and dst not in may:
            bad.append(f"{imp.source}:{imp.line} imports {imp.target} ({src} → {dst})")
    return bad


def cycles(edges: list[Import]) -> list[tuple[list[str], set[str]]]:
    """Per strongly connected component of more than one module (Tarjan): a shortest cycle
    through it and all its modules (a component may hold several cycles)."""
    graph: dict[str, set[str]] = {}
    for imp in edges:
        if imp.runs:
            graph.setdefault(imp.source, set()).add(imp.target)
            graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the number of modules
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [(_cycle_in(graph, component), component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's smallest module (breadth-first)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if nxt not in parents:
                    parents[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle in a strongly connected component: {component}")


def test_every_room_with_python_is_in_the_table() -> None:
    """Every top-level folder with Python is a room; every room is a folder with Python (the
    rooms under envgym/ are told apart from the core's own subpackages only by the table)."""
    allowed = read_rooms(DOC.read_text(encoding="utf-8"))
    on_disk = {
        p.parent.name
        for p in ROOT.glob("*/*.py")
        if not p.parent.name.startswith(".") and p.parent.name != "docs"
    }
    top = {room for room in allowed if "/" not in room}
    assert on_disk - top == set(), "add these folders to the Rooms table"
    without = {room for room in allowed if not any((ROOT / room).glob("*.py"))}
    assert without == set(), "the Rooms table names folders without Python"
    nested = {room for room in allowed if "/" in room}
    assert {room.split("/", 1)[0] for room in nested} <= top, "a nested room outside a room"


def test_room_arrows_follow_the_architecture_table() -> None:
    allowed, edges = build_graph()
    bad = forbidden_arrows(allowed, edges)
    assert not bad, f"{len(bad)} imports the Rooms table does not allow:\n" + "\n".join(bad)


def test_no_import_cycles_between_modules() -> None:
    _, edges = build_graph()
    found = cycles(edges)
    text = "\n".join(
        " → ".join(cycle) + (f"   (all of: {', '.join(sorted(scc))})" if len(scc) > 2 else "")
        for cycle, scc in found
    )
    assert not found, f"{len(found)} import cycles:\n{text}"


@pytest.mark.parametrize(
    ("sources", "expect_arrows", "expect_cycles"),
    [
        ({"envgym/a.py": "def f():\n    import envgym.trainer.b\n"}, 1, 0),
        ({"envgym/a.py": "from envgym.trainer import b\n"}, 1, 0),
        ({"envgym/a.py": "from .trainer import b\n"}, 1, 0),
        ({"envgym/trainer/b.py": "from envgym import a\n", "envgym/a.py": ""}, 0, 0),
        ({"envgym/trainer/b.py": "from .. import a\n", "envgym/a.py": ""}, 0, 0),
        ({"envgym/a.py": "from envgym import b\n", "envgym/b.py": "from . import a\n"}, 0, 1),
        (
            {
                "envgym/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    import envgym.b\n",
                "envgym/b.py": "import envgym.a\n",
            },
            0,
            0,
        ),
        ({"envgym/trainer/b.py": "import envgym.a\n", "envgym/a.py": "import os\n"}, 0, 0),
        (
            {
                "envgym/a.py": "if __name__ == '__main__':\n    import envgym.b\n",
                "envgym/b.py": "import envgym.a\n",
            },
            0,
            0,
        ),
        ({"envgym/a.py": "if __name__ == '__main__':\n    import envgym.trainer.b\n"}, 1, 0),
    ],
)
def test_the_checker_sees_deferred_relative_and_guarded_imports(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sources: dict[str, str],
    expect_arrows: int,
    expect_cycles: int,
) -> None:
    """The checker itself on small trees: it must be able to fail."""
    for rel, text in {
        "envgym/__init__.py": "",
        "envgym/trainer/__init__.py": "",
        **sources,
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    allowed: dict[str, set[str] | None] = {"envgym": set(), "envgym/trainer": {"envgym"}}
    files = python_files(list(allowed))
    edges = [imp for mod, path in files.items() for imp in imports_of(mod, path, set(files))]
    assert len(forbidden_arrows(allowed, edges)) == expect_arrows
    assert len(cycles(edges)) == expect_cycles


def test_the_rooms_table_is_read_column_by_column() -> None:
    doc = """# x

## Rooms

| folder | holds | imports |
|---|---|---|
| `core/` | everything a core holds | nothing from other rooms |
| `lib/` | a library | core, `torch (optional)`, numpy |
| `top/` | commands | core, lib/ |
| `tests/` | the suite | everything |

## Next

| `other/` | not a room | everything |
"""
    assert read_rooms(doc) == {
        "core": set(),
        "lib": {"core"},
        "top": {"core", "lib"},
        "tests": None,
    }


def test_a_module_belongs_to_the_longest_room_holding_it() -> None:
    rooms = ["envgym", "envgym/envs", "envgym/trainer", "tests"]
    assert room_of("envgym.envs.swe.env", rooms) == "envgym/envs"
    assert room_of("envgym.envs", rooms) == "envgym/envs"
    assert room_of("envgym.trainer.loop", rooms) == "envgym/trainer"
    assert room_of("envgym.bundle", rooms) == "envgym"
    assert room_of("envgym", rooms) == "envgym"
    assert room_of("envgym.envs_extra", rooms) == "envgym"  # a prefix of a name is not a folder
    assert room_of("torch.nn", rooms) is None


def test_the_core_imports_no_other_room_in_the_doc() -> None:
    """The rule this file exists for, read from the real doc: a rewording must keep it."""
    allowed = read_rooms(DOC.read_text(encoding="utf-8"))
    assert allowed["envgym"] == set() and allowed["tests"] is None


def test_the_procedural_kit_imports_no_family() -> None:
    """The families import the kit, never the reverse: a kit that reaches into one family
    (it once took its in-process runner from trip planning) ties every family to that one."""
    kit = "envgym.envs.procedural_kit"
    _, edges = build_graph()
    into_families = [
        f"{imp.source} line {imp.line} imports {imp.target}"
        for imp in edges
        if imp.source.startswith(kit + ".")
        and imp.target.startswith("envgym.envs.")
        and not imp.target.startswith(kit + ".")
        and imp.target != kit
    ]
    assert not into_families, into_families
