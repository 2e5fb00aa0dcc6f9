"""``envgym synth swe``: the SWE branch of the synth command (envgym/apps/synth.py).

    envgym synth swe --repo ../myproject --out out/swe --max-candidates 20 --repeats 2
    envgym synth swe --repo https://github.com/o/p.git --judge-model http://host:8000/v1#qwen

Rerunning the same command into the same ``--out`` resumes (envgym/synth_agents/swe/pipeline.py).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import typer
from rich.console import Console


def is_swe(category: str) -> bool:
    """``swe``, ``SWE``, ``swe-bench``, ``swe_instances``…"""
    return (
        isinstance(category, str)
        and re.fullmatch(r"swe([\s_-]*(bench|instances?))?", category.strip().lower()) is not None
    )


def default_out(repo: str) -> Path:
    name = (
        re.sub(r"[^\w.-]", "_", repo.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")) or "repo"
    )
    return Path("synth-swe") / name


def swe_command(
    *,
    repo: str | None,
    out: Path | None,
    max_candidates: int,
    repeats: int,
    sandbox: str,
    judge_model: str,
    as_json: bool,
) -> None:
    from envgym.progress import print_stages, progress_bar
    from envgym.synth_agents.swe.pipeline import (
        SweSynthConfig,
        SweSynthesis,
        normalized_repo,
        summary_rows,
    )

    err = Console(stderr=True)
    try:
        if not repo:
            raise ValueError("envgym synth swe needs --repo PATH_OR_URL")
        config = SweSynthConfig(repo=normalized_repo(repo), max_candidates=max_candidates, repeats=repeats,
                                sandbox=sandbox, judge_model=judge_model)  # fmt: skip
        synthesis = SweSynthesis(out or default_out(repo), config)
        with progress_bar(err) as bar:
            task = bar.add_task("synth swe · mining", total=None)

            def progress(done: int, total: int, current: str) -> None:
                bar.update(task, completed=done, total=total,
                           description=f"synth swe · {current or 'done'}"[:60])  # fmt: skip

            payload = synthesis.run(progress)
    except (ValueError, RuntimeError, OSError) as exc:  # bad options, other settings, git failures
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    console = print_stages(f"envgym synth swe · {payload['repo']}", summary_rows(payload))
    console.print(f"accepted: {payload['instances']}  ·  rejected: {payload['rejected']}")
