"""``envgym check tau2/<domain>`` (or ``tau2-<domain>-v0``): the τ² oracle check, printed.

τ² tasks are not bundles: their check replays τ²'s gold actions through the envgym adapter
(envgym/envs/tau2/oracle.py).  registration.py registers this as the family's check handler.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any


def tau2_domain(target: str) -> str | None:
    """The τ² domain ``target`` names (``tau2/<domain>`` or ``tau2-<domain>-v0``), else None."""
    match = re.fullmatch(r"tau2/([a-z]+)|tau2-([a-z]+)-v0", str(target))
    return (match[1] or match[2]) if match else None


def tau2_check_main(
    target: str, *, as_json: bool = False, limit: int | None = None, console: Any = None
) -> int:
    """Run the τ² oracle check of ``target`` and print it; the exit code (0: every task passes)."""
    from envgym.envs.tau2.oracle import check_domain

    domain = tau2_domain(target)
    if domain is None:
        raise ValueError(f"{target!r} names no τ² domain (tau2/<domain>)")
    report = check_domain(domain, limit=limit)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict()) + "\n")
    else:
        _print(report, console)
    return 0 if report.passed else 1


def _print(report: Any, console: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"envgym check tau2/{report.domain}")
    for col in (
        "task",
        "basis",
        "gold calls",
        "gold reward",
        "no-op reward",
        "transfer reward",
        "problems",
    ):
        table.add_column(col)
    for t in report.tasks:
        gold = "judge" if t.needs_judge else f"{t.gold_reward}"
        table.add_row(t.task_id[:48], "+".join(t.reward_basis), str(t.gold_calls), gold,
                      f"{t.noop_reward}", f"{t.transfer_reward}", "; ".join(t.problems)[:100])  # fmt: skip
    console.print(table)
    for t in report.noop_full:  # a problem: the task rewards no skill (envgym eval leaves it out)
        console.print(f"[red]problem[/]: {escape(t.task_id)}: {escape(str(t.noop_reason))}")
    for line in report.stale:
        console.print(f"[red]problem[/]: {escape(line)}")
    for t in report.needs_judge:
        console.print(f"[cyan]needs an NL-assertion judge[/] (not scored): {t.task_id}")
    for t in report.tasks:
        if t.supplied_gold:
            console.print(f"[yellow]{t.task_id}[/]: {t.notes[0]}")
    noted = [t for t in report.tasks if t.notes and not t.supplied_gold]
    if noted:
        console.print(
            f"[dim]{len(noted)} tasks: {noted[0].notes[0]} (not scored by τ²; docs/TAU2.md)[/]"
        )
    verdict = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
    passed = sum(t.gold_passed for t in report.tasks)
    console.print(f"{verdict}: {passed}/{len(report.tasks)} tasks pass the gold check; "
                  f"{len(report.failed)} fail it, {len(report.noop_full)} score 1.0 for an agent that does "
                  f"nothing or transfers at once (envgym eval leaves them out of pass@k unless "
                  f"--include-noop-tasks), {len(report.needs_judge)} need an NL judge")  # fmt: skip
