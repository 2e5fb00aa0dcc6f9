"""``envgym check`` for the offline MCP suite: every task's gold passes, its no-op fails.

MCPMark tasks are judged on the final state, not on a submitted answer, so the answer-level
checks of :func:`envgym.check.check_bundle` (corrupted submissions, exploits, per-rule
witnesses) do not apply.  What does, per task, through the env an agent would use:

1. **gold passes** — on a fresh state copy, each call of ``gold.json`` is sent as an agent's tool
   call through the env (validated against the server's schema, run by the real MCP server);
   every call must succeed, then ``finish``; ``verify.py`` must pass (reward 1).  Done
   ``reruns`` times; the verdicts must agree.
2. **no-op fails** — on a fresh state copy, ``finish`` at once: ``verify.py`` must fail (reward 0)
   *without* breaking (a crash or timeout of the verifier is an error, never a rejection).

A task without a gold plan (e.g. one of MCPMark's own) fails the check, naming why.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from envgym.bundle_env import BundleEnv
from envgym.envs.mcp_suite import layout
from envgym.envs.mcp_suite.services import CATEGORIES
from envgym.envs.mcp_suite.suite import SUBMIT_TOOL, make_env

TARGET = re.compile(r"mcp-suite/([a-z]+)(?:/([a-z0-9_]+))?")
ENV_ID = re.compile(r"mcp-suite-([a-z]+)-v0")


@dataclass(frozen=True)
class SuiteTaskCheck:
    task_id: str
    gold_passed: bool
    noop_rejected: bool
    reruns_agree: bool
    gold_calls: int
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.gold_passed and self.noop_rejected and self.reruns_agree and not self.problems


@dataclass(frozen=True)
class SuiteReport:
    target: str
    tasks: tuple[SuiteTaskCheck, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.tasks) and all(t.passed for t in self.tasks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "passed": self.passed,
            "seconds": round(self.seconds, 2),
            "gold_passed": sum(t.gold_passed for t in self.tasks),
            "noop_rejected": sum(t.noop_rejected for t in self.tasks),
            "tasks": [{**asdict(t), "passed": t.passed} for t in self.tasks],
        }


def categories_of(target: str) -> list[tuple[str, str]]:
    """The (service, category) pairs ``target`` names: ``mcp-suite``, ``mcp-suite/<service>``,
    ``mcp-suite/<service>/<category>`` or a registered id ``mcp-suite-<service>-v0``."""
    if target in ("mcp-suite", "mcp-suite/", "mcp-suite-v0"):
        return layout.categories()
    registered = ENV_ID.fullmatch(target)
    if registered is not None:
        service = registered[1]
        category: str | None = CATEGORIES.get(service, "")
    else:
        match = TARGET.fullmatch(target)
        if match is None:
            raise ValueError(
                f"{target!r} names no part of the MCP suite "
                "(mcp-suite[/<service>[/<category>]] or mcp-suite-<service>-v0)"
            )
        service, category = match[1], match[2]
    found = [(s, c) for s, c in layout.categories() if s == service and category in (None, c)]
    if not found:
        raise ValueError(
            f"{target!r}: no such service/category in the MCP suite; known: "
            + ", ".join(f"{s}/{c}" for s, c in layout.categories())
        )
    return found


def _call(
    env: BundleEnv, n: int, name: str, arguments: dict[str, Any]
) -> tuple[str, float, bool, dict[str, Any]]:
    action = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": f"g{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
    obs, reward, terminated, _, info = env.step(action)
    return str(obs["messages"][-1]["content"]), reward, terminated, info


def _errors(info: dict[str, Any]) -> int:
    return sum(info.get("errors", {}).values())


def check_task(env: BundleEnv, task: layout.McpMarkTask, *, reruns: int = 2) -> SuiteTaskCheck:
    problems: list[str] = []
    tid = task.meta["task_id"]
    if task.gold is None:
        return SuiteTaskCheck(task.id, False, False, False, 0, ("the task has no gold.json plan",))
    verdicts: list[bool] = []
    for _ in range(max(1, reruns)):
        env.reset(options={"task": tid})
        ok = True
        for i, step in enumerate(task.gold):
            reply, _, terminated, info = _call(
                env, i, step["tool"], layout.bind_state(step["arguments"], env.sandbox.state_dir)
            )
            if _errors(info) or terminated:
                problems.append(f"gold call {i} ({step['tool']}) failed: {reply[:200]}")
                ok = False
                break
        if not ok:
            break
        _, reward, terminated, info = _call(env, len(task.gold), SUBMIT_TOOL, {"summary": "done"})
        report = info.get("report") or {}
        if not terminated or report.get("error"):
            problems.append(
                f"gold verdict broken: {report.get('error') or 'the episode did not end'}"
            )
        elif reward != 1.0:
            problems.append(
                "gold rejected: "
                + "; ".join(c.get("detail", "") for c in report.get("checks", []))[:300]
            )
        verdicts.append(reward == 1.0 and not report.get("error"))
    gold_passed = bool(verdicts) and all(verdicts)
    reruns_agree = len(verdicts) == max(1, reruns) and len(set(verdicts)) == 1

    env.reset(options={"task": tid})
    _, reward, terminated, info = _call(env, 0, SUBMIT_TOOL, {"summary": "done"})
    report = info.get("report") or {}
    noop_rejected = terminated and reward == 0.0 and not report.get("error")
    if report.get("error"):
        problems.append(f"verifier broke on the no-op: {report['error'][:200]}")
    elif not noop_rejected:
        problems.append("verify.py accepted the untouched initial state (no-op)")
    return SuiteTaskCheck(
        task.id, gold_passed, noop_rejected, reruns_agree, len(task.gold), tuple(problems)
    )


def check_suite(
    target: str = "mcp-suite", *, reruns: int = 2, sandbox: str = "bwrap"
) -> SuiteReport:
    started = time.monotonic()
    results: list[SuiteTaskCheck] = []
    for service, category in categories_of(target):
        env = make_env(service, category, sandbox=sandbox)
        try:
            for task in layout.load_category(service, category):
                results.append(check_task(env, task, reruns=reruns))
        finally:
            env.close()
    return SuiteReport(target, tuple(results), time.monotonic() - started)


def print_report(report: SuiteReport, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"envgym check {report.target}")
    for col in ("task", "gold", "no-op rejected", "reruns agree", "gold calls", "problems"):
        table.add_column(col)
    mark = {True: "[green]✓[/]", False: "[red]✗[/]"}
    for t in report.tasks:
        table.add_row(
            t.task_id,
            mark[t.gold_passed],
            mark[t.noop_rejected],
            mark[t.reruns_agree],
            str(t.gold_calls),
            "; ".join(t.problems)[:100],
        )
    console.print(table)
    verdict = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
    console.print(
        f"{verdict}: {sum(t.passed for t in report.tasks)}/{len(report.tasks)} tasks pass "
        f"({report.seconds:.1f} s)"
    )


def main(target: str, *, as_json: bool = False, console: Any = None) -> int:
    """Check ``target`` and print the report; the exit code (0: every task passes)."""
    import sys

    report = check_suite(target)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict()) + "\n")
    else:
        print_report(report, console)
    return 0 if report.passed else 1


if __name__ == "__main__":  # python -m envgym.envs.mcp_suite.check mcp-suite/filesystem [--json]
    import sys

    raise SystemExit(
        main(sys.argv[1] if len(sys.argv) > 1 else "mcp-suite", as_json="--json" in sys.argv[2:])
    )
