"""Dynamic check that a gold solution reaches the episode state only through tools.

The static rules (:mod:`envgym.synth_agents.solution_rules`) read the source; this runs it.  The
bundle's code files are copied into a scratch directory and ``solution.py`` gets a *guard*
prepended.  The guard, running in the sandbox worker after ``tools.py`` was imported, wraps
the doors to the episode state — ``envgym.runtime.state_dir``/``sqlite``, ``sqlite3.connect``,
``open``/``io.open``/``os.open``/``os.listdir``/``os.scandir`` — so that each one looks at the
call stack: the innermost *bundle* frame (a frame of tools.py, solution.py or verifier.py)
decides.  A tool (or the verifier) may read the state; when the innermost bundle frame is the
solution's own code, the call raises ``PermissionError`` and the solve fails.  The guard is
compiled under its own file name, so its frames are never mistaken for bundle frames.

Only out-of-process sandboxes run this (the guard patches the interpreter it runs in); with the
``inprocess`` backend the check is skipped and reported as such.

A cleaner hook would live in the sandbox runner (see docs/SYNTHESIS.md, "hooks wanted"): a
``deny_state`` flag on the ``solve`` op under which ``runtime.state_dir()`` raises unless a
tool call is on the stack.
"""

from __future__ import annotations

import ast
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.bundle import CODE_DATA, Bundle
from envgym.sandbox import Limits, open_sandbox
from envgym.state import EpisodeDirs

DENIED = "the solution touched the episode state directly"

_GUARD = r"""
import builtins, io, os, sqlite3, sys
_rt = sys.modules["envgym.runtime"]
_here = __file__
_bundle = {_here.rsplit("/", 1)[0] + "/" + n: n for n in ("tools.py", "solution.py", "verifier.py")}

def _innermost():
    f = sys._getframe(2)
    while f is not None:
        who = _bundle.get(f.f_code.co_filename)
        if who is not None:
            return who
        f = f.f_back
    return None

def _guard(fn, what):
    def guarded(*a, **k):
        if _innermost() == "solution.py":
            raise PermissionError(__DENIED__ + " (" + what + ")")
        return fn(*a, **k)
    return guarded

_rt.state_dir = _guard(_rt.state_dir, "envgym.runtime.state_dir")
_rt.sqlite = _guard(_rt.sqlite, "envgym.runtime.sqlite")
sqlite3.connect = _guard(sqlite3.connect, "sqlite3.connect")
builtins.open = _guard(builtins.open, "open")
io.open = _guard(io.open, "io.open")
for _name in ("open", "listdir", "scandir", "stat", "walk"):
    setattr(os, _name, _guard(getattr(os, _name), "os." + _name))
"""


@dataclass(frozen=True)
class IsolationResult:
    task_id: str
    ok: bool
    skipped: bool = False
    detail: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()  # the gold's tool calls, for the tool probe
    submission: dict[str, Any] | None = (
        None  # the gold's submission (provenance checks compare with it)
    )


def guarded_copy(bundle: Bundle, into: Path) -> Path:
    """The bundle's code files (and code data) in ``into``, the guard prepended to ``solution.py``."""
    into.mkdir(parents=True, exist_ok=True)
    for name in ("tools.py", "verifier.py"):
        shutil.copyfile(bundle.root / name, into / name)
    for name in CODE_DATA:  # what tools.py reads at import (a spec-compiled bundle's tool table)
        if (bundle.root / name).is_file():
            shutil.copyfile(bundle.root / name, into / name)
    guard = _GUARD.replace("__DENIED__", repr(DENIED))
    prelude = (
        f"exec(compile({guard!r}, '<envgym-isolation-guard>', 'exec'), {{'__file__': __file__}})\n"
    )
    source = (bundle.root / "solution.py").read_text()
    lines = source.splitlines(keepends=True)
    at = _after_header(source)
    (into / "solution.py").write_text("".join(lines[:at]) + prelude + "".join(lines[at:]))
    return into


def _after_header(source: str) -> int:
    """The line after the docstring and ``from __future__`` imports (which must come first)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return 0  # the load fails either way; the static rules report it
    end = 0
    for i, node in enumerate(body):
        docstring = (
            i == 0
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        )
        if docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            end = node.end_lineno or end
        else:
            break
    return end


class GuardedRun:
    """A sandbox on the guarded copy of a bundle, with fresh states on demand."""

    def __init__(self, bundle: Bundle, *, sandbox: str, limits: Limits | None) -> None:
        self.bundle = bundle
        self._scratch = Path(tempfile.mkdtemp(prefix="envgym-isolation-"))
        self._dirs = self.dirs = EpisodeDirs(bundle.state_dir)
        try:
            self.box = open_sandbox(
                guarded_copy(bundle, self._scratch / "code"), backend=sandbox, limits=limits
            )
        except BaseException:
            self.close()
            raise

    def fresh(self) -> None:
        self.box.reset(self._dirs.refill())  # the same directory every time: no worker restart

    def solve_all(self) -> list[IsolationResult]:
        out = []
        for task in self.bundle.tasks:
            self.fresh()
            solved = self.box.solve(task.solution, task.to_dict(), task.submit_tool)
            calls = tuple((name, dict(args)) for name, args in solved.calls)
            message = solved.outcome.message
            if solved.outcome.ok:
                out.append(
                    IsolationResult(task.id, ok=True, calls=calls, submission=solved.submission)
                )
            elif DENIED in message:
                line = next((x for x in message.splitlines() if DENIED in x), DENIED)
                out.append(IsolationResult(task.id, ok=False, detail=line.strip(), calls=calls))
            else:  # failed for another reason: envgym check reports that one
                last = message.strip().splitlines()[-1][:200] if message.strip() else "no message"
                out.append(
                    IsolationResult(task.id, ok=True, detail="gold failed: " + last, calls=calls)
                )
        return out

    def close(self) -> None:
        box = getattr(self, "box", None)
        if box is not None:
            box.close()
        self._dirs.cleanup()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> GuardedRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_isolation(
    bundle: Bundle, *, sandbox: str = "bwrap", limits: Limits | None = None
) -> list[IsolationResult]:
    """Run every task's gold solution under the guard; one result per task."""
    if sandbox == "inprocess":
        return [
            IsolationResult(t.id, ok=True, skipped=True, detail="skipped: inprocess backend")
            for t in bundle.tasks
        ]
    with GuardedRun(bundle, sandbox=sandbox, limits=limits) as run:
        return run.solve_all()
