"""The graded test run, host side: launch pytest through trace_boot.py and check its evidence.

pytest's JUnit report is a claim made inside a process the agent's code shares.  The grader
runs the hidden tests through ``trace_boot.py`` (mounted read-only, started with ``python -I``
so that its hooks are in place before anything from the repository is importable), which counts
the *normal returns* of every code object of the watched test files and notes tampering, and
signs its report with a per-run key the host wrote for it.  Here the host reads that report
(``O_NOFOLLOW``, bounded), checks the signature, and compares it with the JUnit claim:

* every F2P / P2P test that pytest says passed must have returned normally at least as often
  as pytest says it passed (parametrized ids share one function).  Where the test's function is
  located is computed here, from the graded tree's text, before the run;
* a canary must never return normally (its planted failure always raises);
* any note of tampering, a missing report or a bad signature fails the instance.

A disagreement is the grade's ``rigged`` status, whatever pytest said.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import secrets
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from envgym.envs.swe.pyenv import JAIL_REPO, PythonEnv, run_in
from envgym.envs.swe.safe_read import read_regular
from envgym.sandbox.command_jail import Mount

BOOT = Path(__file__).with_name("trace_boot.py")
JAIL_BOOT = "/envgym-grader/trace_boot.py"
JAIL_TRACE_DIR = "/envgym-trace"
MAX_TRACE_BYTES = 16 * 1024**2
MAX_TEST_FILE_BYTES = 16 * 1024**2


@dataclass(frozen=True)
class Location:
    """Where a test's function is: the code object's filename, first line and qualified name."""

    file: str  # the path inside the jail (what co_filename is there)
    line: int  # co_firstlineno: the first decorator's line, else the def line
    qualname: str


@dataclass(frozen=True)
class Trace:
    returns: Mapping[tuple[str, int, str], int]
    flags: tuple[str, ...]


def launcher(test_command: Sequence[str]) -> list[str] | None:
    """The recipe's pytest invocation as ``python -I -X utf8 trace_boot.py``: the argv head up to
    the key and file list, and the recipe's own extra arguments; None if it is not pytest."""
    argv = list(test_command)
    if (
        len(argv) >= 3
        and PurePosixPath(argv[0]).name.startswith("python")
        and argv[1:3] == ["-m", "pytest"]
    ):
        return [argv[0], "-I", "-X", "utf8", JAIL_BOOT, *argv[3:]]
    if argv and PurePosixPath(argv[0]).name == "pytest":
        return ["python", "-I", "-X", "utf8", JAIL_BOOT, *argv[1:]]
    return None


def locate(tree: Path, test_ids: Sequence[str]) -> dict[str, Location]:
    """The :class:`Location` of each test id whose function is found in its file's text (a
    module-level function, or a method of a class there, inherited within the module)."""
    modules: dict[str, ast.Module | None] = {}
    found: dict[str, Location] = {}
    for test_id in test_ids:
        path, *names = test_id.split("::")
        if not names:
            continue
        if path not in modules:
            modules[path] = _parse(tree, path)
        module = modules[path]
        names[-1] = names[-1].split("[", 1)[0]
        where = _find(module, names) if module is not None else None
        if where is not None:
            node, qualname = where
            line = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            found[test_id] = Location(f"{JAIL_REPO}/{path}", line, qualname)
    return found


def _parse(tree: Path, path: str) -> ast.Module | None:
    try:
        return ast.parse(read_regular(tree, path, max_bytes=MAX_TEST_FILE_BYTES))
    except (OSError, SyntaxError, ValueError):
        return None


_Def = (ast.FunctionDef, ast.AsyncFunctionDef)


def _flat(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` with the statements of its ``if`` / ``try`` / ``with`` blocks spliced in (tests
    defined under ``if sys.version_info >= ...`` or ``try: import x``)."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, (ast.If, ast.With, ast.AsyncWith)):
            out += _flat(node.body) + _flat(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            out += _flat(node.body) + _flat(node.orelse) + _flat(node.finalbody)
            for handler in node.handlers:
                out += _flat(handler.body)
    return out


def _find(
    module: ast.Module, names: list[str]
) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, str] | None:
    top = _flat(module.body)
    classes = {n.name: n for n in top if isinstance(n, ast.ClassDef)}
    body: list[ast.stmt] = top
    qual: list[str] = []
    for name in names[:-1]:
        node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if node is None:
            return None
        body, qual = _flat(node.body), [*qual, name]
    # the last definition wins, as it does when the module runs
    func = next((n for n in reversed(body) if isinstance(n, _Def) and n.name == names[-1]), None)
    if func is not None:
        return func, ".".join([*qual, names[-1]])
    if len(names) == 2:  # a method inherited from a base class of the same module
        seen: set[str] = set()
        pending = [names[0]]
        while pending:
            cls = classes.get(pending.pop(0))
            if cls is None or cls.name in seen:
                continue
            seen.add(cls.name)
            func = next(
                (
                    n
                    for n in reversed(_flat(cls.body))
                    if isinstance(n, _Def) and n.name == names[-1]
                ),
                None,
            )
            if func is not None:
                return func, f"{cls.name}.{names[-1]}"
            pending += [b.id for b in cls.bases if isinstance(b, ast.Name)]
    return None


def graded_run(
    tree: Path, env: PythonEnv, test_ids: Sequence[str], watched: Sequence[str], *, timeout_s: float
) -> tuple[Any, Trace | str]:
    """Run ``test_ids`` in ``tree`` through the launcher; the ``TestRun`` and the verified
    :class:`Trace` (or why there is none).  ``watched``: the test files (relative paths)."""
    from envgym.envs.swe.validation import JAIL_REPORT_DIR, REPORT, TestRun, judge

    head = launcher(env.recipe.test_command)
    if head is None:
        return TestRun("crashed", {}, f"grading needs a pytest test command, not {env.recipe.test_command!r}", 0.0), \
            "no trace: not a pytest command"  # fmt: skip
    genuine = {}
    for path in dict.fromkeys(watched):
        try:
            genuine[f"{JAIL_REPO}/{path}"] = hashlib.sha256(
                read_regular(tree, path, max_bytes=MAX_TEST_FILE_BYTES)
            ).hexdigest()
        except (OSError, ValueError):
            continue
    key = secrets.token_bytes(32)
    with tempfile.TemporaryDirectory(prefix="envgym-junit-") as reports, \
            tempfile.TemporaryDirectory(prefix="envgym-trace-") as trace_dir:  # fmt: skip
        (Path(trace_dir) / "key").write_text(key.hex())
        argv = [*head[:5], JAIL_TRACE_DIR, json.dumps(genuine), *head[5:], "-p", "no:cacheprovider",
                "-o", "junit_family=xunit2", "-o", "junit_logging=no", f"--junitxml={JAIL_REPORT_DIR}/{REPORT}",
                "--continue-on-collection-errors", "-q", "--", *test_ids]  # fmt: skip
        mounts = [Mount(Path(reports), JAIL_REPORT_DIR, writable=True), Mount(BOOT, JAIL_BOOT),
                  Mount(Path(trace_dir), JAIL_TRACE_DIR, writable=True)]  # fmt: skip
        result = run_in(
            env,
            tree,
            argv,
            timeout_s=timeout_s,
            extra_mounts=mounts,
            extra_env={"PYTHONDONTWRITEBYTECODE": "1"},
        )
        run = judge(result, Path(reports), tree)
        return run, read_trace(Path(trace_dir), key)


def read_trace(trace_dir: Path, key: bytes) -> Trace | str:
    """The launcher's report from ``trace_dir/trace.json`` if its signature holds, else why not."""
    try:
        raw = read_regular(trace_dir, "trace.json", max_bytes=MAX_TRACE_BYTES)
    except FileNotFoundError:
        return "no trace report: the test process did not exit through the grader's launcher"
    except OSError as err:
        return f"trace report unreadable: {err}"
    head, _, body = raw.partition(b"\n")
    try:
        mac = json.loads(head)["mac"]
        ok = isinstance(mac, str) and hmac.compare_digest(
            mac, hmac.new(key, body, "sha256").hexdigest()
        )
        data = json.loads(body) if ok else None
        returns = (
            {(str(f), int(line), str(q)): int(n) for f, line, q, n in data["returns"]} if ok else {}
        )
        flags = tuple(str(f) for f in data["flags"]) if ok else ()
    except (ValueError, KeyError, TypeError):
        return "trace report malformed"
    return Trace(returns, flags) if ok else "trace report signature does not match"


def disagreements(
    outcomes: Mapping[str, str],
    tests: Sequence[str],
    canaries: Sequence[str],
    locations: Mapping[str, Location],
    trace: Trace | str,
) -> list[str]:
    """Why pytest's claims and the trace disagree ([] when they agree); see the module docstring."""
    if isinstance(trace, str):
        return [trace]
    problems = [f"tampering noted in the test process: {flag}" for flag in trace.flags]
    claimed: dict[Location, list[str]] = defaultdict(list)
    for test in dict.fromkeys(tests):
        if outcomes.get(test) != "passed":
            continue
        where = locations.get(test)
        if where is None:
            problems.append(
                f"{test}: reported passed, but its function could not be located to check that it ran"
            )
        else:
            claimed[where].append(test)
    for where, passed in claimed.items():
        ran = trace.returns.get((where.file, where.line, where.qualname), 0)
        if ran < len(passed):
            problems.append(
                f"{passed[0]}: reported passed {len(passed)} time(s), but its code returned normally {ran} time(s)"
            )
    for canary in canaries:
        where = locations.get(canary)
        if where is not None and trace.returns.get((where.file, where.line, where.qualname), 0):
            problems.append(f"canary {canary} returned normally (its planted failure never raised)")
    return problems
