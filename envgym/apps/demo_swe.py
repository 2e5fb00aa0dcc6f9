"""The demo's SWE step: mine a repository's history, validate, check.

``envgym/envs/swe/demo_repo.py`` writes ``wordstat``, a small project with a real git history; the
step runs what ``envgym synth swe --repo wordstat`` runs (mine issue–fix commits, set the project up
in a jailed venv, keep a candidate iff its fix turns ≥ 1 failing test into a passing one and
breaks none) and then what ``envgym check swe:instances.jsonl`` runs (gold replay through
``swe-v0`` earns 1, an empty submission and the reward hacks earn 0).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console
from rich.table import Table


def demo_swe(
    console: Console, out: Path, sandbox: str = "bwrap", *, step: int = 8, quick: bool = False
) -> bool:
    """False when nothing was accepted or an accepted instance fails its check."""
    from envgym.envs.swe.check import check_instances
    from envgym.envs.swe.demo_repo import make_demo_repo
    from envgym.synth_agents.swe.pipeline import SweSynthConfig, SweSynthesis, summary_rows

    candidates = 1 if quick else 3
    console.rule(f"[bold]{step}. envgym synth swe --repo wordstat --max-candidates {candidates}; "
                 "envgym check swe:instances.jsonl")  # fmt: skip
    repo = make_demo_repo(out / "swe" / "wordstat")
    synth_out = out / "swe" / "synth"
    shutil.rmtree(
        synth_out, ignore_errors=True
    )  # the repository is new each run: so is its journal
    try:
        synthesis = SweSynthesis(
            synth_out, SweSynthConfig(repo=str(repo), max_candidates=candidates, sandbox=sandbox)
        )
        payload = synthesis.run(lambda done, total, current: console.print(f"  candidate {done + 1}/{total}: {current}")
                                if current else None)  # fmt: skip
    except (ValueError, RuntimeError, OSError) as exc:
        console.print(f"[bold red]SWE synthesis failed:[/] {exc}")
        return False
    table = Table(title="envgym synth swe · wordstat")
    for col in ("stage", "count", "note"):
        table.add_column(col)
    for row in summary_rows(payload):
        table.add_row(*row)
    console.print(table)
    accepted = synthesis.accepted()
    if not accepted:
        console.print("[bold red]no instance was accepted[/]")
        return False
    report = check_instances(accepted, backend=sandbox, reruns=1 if quick else 2)
    checks = Table(title="envgym check · swe-v0")
    for col in ("instance", "FAIL_TO_PASS", "gold", "empty", "exploits at 0", "passed"):
        checks.add_column(col)
    f2p = {i.instance_id: i.fail_to_pass for i in accepted}
    for item in report.instances:
        rewarded = item.rewarded_exploits
        tried = len(item.exploits)
        checks.add_row(item.instance_id, ", ".join(t.split("::")[-1] for t in f2p[item.instance_id]),
                       " ".join(f"{g.reward:g}" for g in item.gold), f"{item.empty.reward:g}" if item.empty else "-",
                       f"{tried - len(rewarded)}/{tried}", "yes" if item.passed else "NO")  # fmt: skip
    console.print(checks)
    console.print(
        f"instances: {payload['instances']}  (export: envgym swe export --format harbor …)"
    )
    return report.passed
