"""``envgym check swe:PATH`` (or a bare instances file / Harbor task dir): the SWE check, printed.

SWE instances are not bundles: their check replays the gold patch, an empty submission and the
exploits of envgym/envs/swe/exploits.py through ``swe-v0`` (envgym/envs/swe/check.py).
registration.py registers this as the family's check handler.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from envgym.envs.swe.instance import InstanceError, SweInstance

PREFIX = "swe:"


def claims(target: str) -> bool:
    """``swe:PATH``; a ``.jsonl`` whose first record has ``base_commit`` and ``patch``; a Harbor
    task directory of our export (``task.toml`` + ``tests/config.json``) or a directory of them."""
    target = str(target)
    if target.startswith(PREFIX):
        return True
    path = Path(target)
    try:
        if path.is_file() and path.suffix == ".jsonl":
            return _first_record_is_instance(path)
        if path.is_dir() and not (path / "manifest.json").exists():  # a bundle is never ours
            return _is_task_dir(path) or any(
                _is_task_dir(child) for child in path.iterdir() if child.is_dir()
            )
    except OSError:
        return False
    return False


def _is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file() and (path / "tests" / "config.json").is_file()


def _first_record_is_instance(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(record, dict) and "base_commit" in record and "patch" in record
    return False


def load_target(target: str) -> list[SweInstance]:
    """The instances ``target`` names (see :func:`claims`); ``InstanceError`` if unreadable."""
    from envgym.envs.swe.interchange import import_harbor, import_harbor_dir, import_jsonl

    path = Path(str(target).removeprefix(PREFIX))
    if path.is_dir():
        return [import_harbor(path)] if (path / "task.toml").is_file() else import_harbor_dir(path)
    return import_jsonl(path)


def swe_check_main(
    target: str,
    *,
    as_json: bool = False,
    console: Any = None,
    sandbox: str = "bwrap",
    reruns: int = 2,
) -> int:
    """Check every instance of ``target`` and print the report; the exit code (0: all pass)."""
    from rich.console import Console

    from envgym.envs.swe.check import check_instances

    err = Console(stderr=True)
    try:
        instances = load_target(target)
    except InstanceError as exc:
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        return 2
    if not instances:
        err.print(f"[bold red]error:[/] {target} holds no SWE instances")
        return 2
    from envgym.progress import progress_bar

    with progress_bar(err) as bar:
        task = bar.add_task(
            f"envgym check · {len(instances)} SWE instances · {sandbox}", total=len(instances)
        )
        report = check_instances(
            instances,
            backend=sandbox,
            reruns=reruns,
            target=str(target),
            progress=lambda done, total, _: bar.update(task, completed=done, total=total),
        )
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict()) + "\n")
    else:
        _print(report, console or Console())
    return 0 if report.passed else 1


def _print(report: Any, console: Any) -> None:
    from rich.table import Table

    table = Table(title=f"envgym check {report.target} · swe-v0 · {report.backend}")
    for col in ("instance", "gold", "reruns agree", "empty", "exploits at 0", "problems"):
        table.add_column(col)
    for row in report.instances:
        if not row.valid:
            table.add_row(row.instance_id[:48], "-", "-", "-", "-", f"[red]{row.problems[0]}[/]")
            continue
        zero = sum(e.reward == 0 for e in row.exploits)
        table.add_row(row.instance_id[:48], " ".join(f"{e.reward:g}" for e in row.gold),
                      "yes" if row.reruns_agree else "[red]no[/]", f"{row.empty.reward:g}" if row.empty else "-",
                      f"{zero}/{len(row.exploits)}", "; ".join(row.problems)[:160] or "[green]none[/]")  # fmt: skip
    console.print(table)
    for row in report.instances:
        for episode in row.exploits:
            if episode.reward > 0:
                console.print(f"[bold red]exploit rewarded[/] on {row.instance_id}: {episode.name} "
                              f"(tests {episode.status}: {episode.detail})")  # fmt: skip
    passed = sum(i.passed for i in report.instances)
    verdict = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
    tried = sum(len(i.exploits) for i in report.instances)
    console.print(f"{verdict}: {passed}/{len(report.instances)} instances pass; "
                  f"{sum(not i.valid for i in report.instances)} invalid; {tried} exploits tried, "
                  f"{sum(len(i.rewarded_exploits) for i in report.instances)} rewarded · {report.seconds:.1f} s")  # fmt: skip
