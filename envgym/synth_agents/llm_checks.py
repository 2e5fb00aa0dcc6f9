"""The checks between the LLM agent's stages, each answering with problems the model can fix.

* :func:`inspect_data` — the workspace database, read *inside* the sandbox (the host never
  opens a file the model's code wrote): tables, columns, row counts, sample rows.
* :func:`check_tools` — a tools.py that parses, is typed, imports only the standard library and
  envgym.runtime, loads in the sandbox and survives a schema-valid call of every tool.
* :func:`check_agreement` — the seed's loop condition: run the solution in the sandbox, verify
  its submission, and require that the verifier rejects an empty answer; then, when witnesses
  are given, that every rule (check name) the gold verdict reports has a *per-rule witness*: a
  submission whose verdict fails exactly that one check (docs/CHECK.md).

The full validator (:mod:`envgym.synth_agents.validate`) runs afterwards on the finished bundle.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.bundle import BundleError, Task, write_manifest
from envgym.sandbox import Limits, SandboxUnavailable, open_sandbox
from envgym.state import EpisodeDirs
from envgym.synth_agents.code_blocks import tools_problems
from envgym.synth_agents.provenance import check_provenance
from envgym.synth_agents.solution_rules import check_solution_source
from envgym.synth_agents.tool_probe import probe_tools
from envgym.synth_agents.workbench import Workbench
from envgym.verdict import Verdict

SUBMIT_TOOL = '''

def submit_result(answer_text: str) -> str:
    """Submit the final answer; this ends the task.

    Args:
        answer_text: The answer.
    """
    return "submitted"
'''
_INSPECT = r"""
import json, os, sqlite3
out = {"exists": os.path.exists("db.sqlite"), "bytes": os.path.getsize("db.sqlite") if os.path.exists("db.sqlite") else 0, "tables": []}
if out["exists"]:
    con = sqlite3.connect("db.sqlite")
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"):
        cur = con.execute('SELECT * FROM "%s" LIMIT 3' % name.replace('"', '""'))
        cols = [d[0] for d in cur.description]
        rows = [[str(v)[:40] for v in r] for r in cur.fetchall()]
        count = con.execute('SELECT COUNT(*) FROM "%s"' % name.replace('"', '""')).fetchone()[0]
        out["tables"].append({"name": name, "columns": cols, "rows": count, "sample": rows})
print(json.dumps(out))
"""
MAX_DB_BYTES = 16 << 20


@dataclass(frozen=True)
class DataReport:
    problems: tuple[str, ...]
    schema: str  # for the next prompt
    tables: int = 0
    rows: int = 0


def inspect_data(bench: Workbench) -> DataReport:
    outcome = bench.run_python(_INSPECT, "_inspect_db.py")
    if not outcome.ok or outcome.value.get("exit_code") != 0:
        why = outcome.message if not outcome.ok else outcome.value.get("stderr", "")
        return DataReport((f"db.sqlite cannot be read as SQLite: {why.strip()[-300:]}",), "")
    try:
        info = json.loads(outcome.value["stdout"])
    except (json.JSONDecodeError, KeyError):
        return DataReport(("db.sqlite cannot be inspected",), "")
    if not info["exists"]:
        return DataReport(("there is no db.sqlite in the workspace yet",), "")
    if info["bytes"] > MAX_DB_BYTES:
        return DataReport(
            (f"db.sqlite is {info['bytes']} bytes; keep it under {MAX_DB_BYTES}",), ""
        )
    tables = info["tables"]
    rows = sum(t["rows"] for t in tables)
    problems = (
        []
        if tables and rows >= 3
        else [
            f"db.sqlite has {len(tables)} tables and {rows} rows; "
            "it needs at least one table and 3 rows"
        ]
    )
    schema = "\n".join(
        f"- {t['name']}({', '.join(t['columns'])}): {t['rows']} rows, e.g. "
        + "; ".join(str(tuple(r)) for r in t["sample"])
        for t in tables
    )
    return DataReport(tuple(problems), schema, len(tables), rows)


def with_submit_tool(code: str) -> str:
    """The agent's tools.py, with the standard submit tool appended when it lacks one."""
    return code if "def submit_result(" in code else code.rstrip() + "\n" + SUBMIT_TOOL


def write_draft(
    root: Path,
    db: Path,
    tools: str,
    solution: str,
    verifier: str,
    tasks: list[dict[str, Any]],
    *,
    name: str,
    category: str,
    provenance: dict[str, Any],
) -> Path:
    """A complete bundle directory for the current draft (replacing ``root``)."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "state").mkdir(parents=True)
    data = _read_plain_file(db)
    if data is not None:
        (root / "state" / "db.sqlite").write_bytes(data)
    (root / "tools.py").write_text(tools)
    (root / "solution.py").write_text(solution)
    (root / "verifier.py").write_text(verifier)
    (root / "tasks.jsonl").write_text(
        "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    )
    write_manifest(
        root,
        name=name,
        category=category,
        provenance=provenance,
        description=f"LLM-synthesized environment for {category!r}",
    )
    return root


def _read_plain_file(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file — never through a link the model planted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_DB_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def check_tools(root: Path, *, sandbox: str) -> list[str]:
    """Problems of ``root/tools.py`` (a draft bundle with the workspace db in ``state/``)."""
    problems = tools_problems((root / "tools.py").read_text())
    if problems:
        return problems
    dirs = EpisodeDirs(root / "state")
    try:
        with open_sandbox(root, backend=sandbox, limits=Limits(call_timeout_s=5)) as box:
            specs = box.describe_tools()
            box.reset(dirs.refill())
            return [str(f) for f in probe_tools(box, specs, [])]
    except BundleError as exc:
        return [f"tools.py does not load: {exc}"]
    finally:
        dirs.cleanup()


def check_agreement(
    root: Path, task: dict[str, Any], *, sandbox: str, witnesses: list[dict[str, Any]] | None = None
) -> list[str]:
    """Problems of the draft's task: static solution rules, then solution → verifier in the sandbox,
    then (``witnesses`` not None) the per-rule witnesses."""
    task = {k: v for k, v in task.items() if k != "witnesses"}  # host-side only: never sent inside
    violations = check_solution_source((root / "solution.py").read_text(), (task["solution"],))
    if violations:
        return [str(v) for v in violations[:5]]
    dirs = EpisodeDirs(root / "state")
    try:
        with open_sandbox(
            root, backend=sandbox, limits=Limits(call_timeout_s=10, solve_timeout_s=30)
        ) as box:
            box.describe_tools()
            box.reset(dirs.refill())
            solved = box.solve(task["solution"], task, task["submit_tool"])
            if not solved.outcome.ok:
                return [f"the solution failed: {solved.outcome.message[-600:]}"]
            if solved.submission is None:
                return ["the solution never called submit_result"]
            box.reset(dirs.refill())
            verdict = _verdict(box.verify(task["verifier"], solved.submission, task))
            if not verdict.passed:
                failed = "; ".join(f"{c.name}: {c.detail}" for c in verdict.failed[:4])
                return [
                    f"the verifier rejected the solution's answer {json.dumps(solved.submission)[:300]}: {failed}. "
                    "Fix whichever of the two is wrong."
                ]
            empty = _verdict(box.verify(task["verifier"], {"answer_text": ""}, task))
            if empty.passed:
                return [
                    "the verifier accepts an empty answer; it must check the answer against the data"
                ]
            # The validator's tools-only provenance checks, here too, so the model hears about an
            # answer key while it can still fix it (envgym.synth_agents.provenance).
            gold = Task(
                id=task["id"],
                prompt=task["prompt"],
                solution=task["solution"],
                verifier=task["verifier"],
                submit_tool=task["submit_tool"],
                metadata=task.get("metadata", {}),
            )
            answer_key = check_provenance(box, dirs, gold, list(solved.calls), solved.submission)
            if answer_key:
                return [p.detail for p in answer_key]
            if witnesses is None:
                return []
            rules = [c.name for c in verdict.checks]

            def verify_fresh(submission: dict[str, Any]) -> Verdict:
                box.reset(dirs.refill())
                return _verdict(box.verify(task["verifier"], submission, task))

            return witness_problems(rules, witnesses, verify_fresh)
    except BundleError as exc:
        return [f"the bundle does not load: {exc}"]
    except SandboxUnavailable:
        raise
    finally:
        dirs.cleanup()


def witness_problems(
    rules: list[str],
    witnesses: list[dict[str, Any]],
    verify_fresh: Callable[[dict[str, Any]], Verdict],
) -> list[str]:
    """Why ``witnesses`` do not cover ``rules`` (empty: each rule has a witness failing only it)."""
    problems, covered = [], set()
    for i, w in enumerate(witnesses):
        rule, submission = w["rule"], w["submission"]
        if rule not in rules:
            problems.append(
                f"witness {i} names the rule {rule!r}, but the verifier reports only {rules}"
            )
            continue
        verdict = verify_fresh(submission)
        failed = sorted(verdict.failed_names)
        if verdict.passed:
            problems.append(
                f"witness {i} for {rule!r} passes the verifier: {json.dumps(submission)[:200]} must "
                f"violate {rule!r}"
            )
        elif failed != [rule]:
            problems.append(
                f"witness {i} for {rule!r} fails {failed}, not exactly [{rule!r}]: change only what "
                f"{rule!r} checks, keep everything else correct"
            )
        else:
            covered.add(rule)
    missing = [r for r in dict.fromkeys(rules) if r not in covered]
    if missing:
        problems.append(
            f"no valid witness for the rule(s) {missing}: give one submission per rule that fails "
            "exactly that check"
        )
    return problems


def _verdict(outcome: Any) -> Verdict:
    if not outcome.ok:
        return Verdict.failure("verifier_error", outcome.message[-400:])
    return Verdict.from_report(outcome.value)
