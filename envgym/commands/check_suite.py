"""``envgym check SUITE``: run the suite check (envgym.suite_check) and print its report.

A table of the figures (bundles and tasks passed, exploits, rule coverage against the tasks'
conditions, baselines per level, mutation) and one line per failing bundle; ``--json`` prints
the report as one object.  Exit 0 when every sampled bundle passes, 1 otherwise, 2 on a target
that is not a readable suite or a bad option.
"""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table


def run_suite_check(
    target: str,
    *,
    as_json: bool,
    console: Console,
    sample: int,
    seed: int,
    sandbox: str,
    corruptions: int,
    reruns: int,
    mutation: bool,
    max_mutants: int,
    baselines: tuple[str, ...],
) -> int:
    from envgym.suite_check import check_suite
    from envgym.suite_manifest import SuiteError, load_suite

    if max_mutants < 0:
        console.print(f"error: --max-mutants must be 0 (all) or more, got {max_mutants}")
        return 2
    try:
        suite = load_suite(target)
    except SuiteError as exc:
        console.print(f"error: {exc}", markup=False)
        return 2

    def progress(done: int, total: int, path: str) -> None:
        if not as_json:
            console.print(f"[{done + 1}/{total}] {path}", markup=False, highlight=False)

    try:
        result = check_suite(
            suite,
            sample=sample,
            seed=seed,
            sandbox=sandbox,
            corruptions=corruptions,
            reruns=reruns,
            mutation=mutation,
            max_mutants=max_mutants or None,
            baselines=baselines,
            progress=progress,
        )
    except ValueError as exc:
        console.print(f"error: {exc}", markup=False)
        return 2
    report = result.to_dict()
    if as_json:
        sys.stdout.write(json.dumps(report) + "\n")
    else:
        _print(console, report)
    return 0 if result.passed else 1


def _print(console: Console, report: dict) -> None:
    table = Table(title=f"envgym check {report['suite']} (sample of {report['sampled']})")
    table.add_column("figure")
    table.add_column("value")
    rows = [
        ("bundles in the suite", report["bundles_in_suite"]),
        ("bundles passed", f"{report['bundles_passed']}/{report['sampled']}"),
        ("tasks passed", f"{report['tasks_passed']}/{report['tasks']}"),
        (
            "exploits accepted",
            f"{report['exploits']['accepted']} of {report['exploits']['tried']}",
        ),
        (
            "rules the conditions set, covered",
            f"{report['spec_rule_coverage']['covered']}/{report['spec_rule_coverage']['rules']}",
        ),
    ]
    for name, levels in report["baselines"].items():
        shares = ", ".join(
            f"L{k} {v['solved']}/{v['tasks']} ({v['share']:.0%})" for k, v in levels.items()
        )
        rows.append((f"baseline {name}", shares or "-"))
    if "mutation" in report:
        m = report["mutation"]
        rows.append(
            (
                "mutants killed",
                f"{m['killed']}/{m['behaviour_changing']} behaviour-changing "
                f"({m['kill_rate']:.1%}); {m['mutants']} mutants in {m['bundles']} bundles; "
                f"{m['paying_survivors']} paying survivors",
            )
        )
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    for f in report["failures"]:
        console.print(f"FAILED {f['path']} ({f['category']}): {f['why']}", markup=False)
    console.print("PASSED" if report["passed"] else "FAILED", markup=False)
