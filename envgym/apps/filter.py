"""``envgym filter TARGET... --model M --out kept.json``: the pass@k filter of existing bundles
with the policy that will train on them (DeepSeek-V3.2 §3.2.3: a task is kept when the policy
solves it at least once in k tries).

TARGET is a suite (its ``--split``, default train) or a bundle directory.  The kept-tasks file
(envgym/kept_tasks.py) is what a training config's ``envs[i].kept`` reads.  Sampling and budget
options default to ``envgym train``'s rollout defaults; give the values of the config the
policy will train with, so the filter keeps what training can solve.  A rerun with the same
settings resumes the file (bundles already decided are skipped).  docs/SYNTHESIS.md, "Filtering
existing bundles", has the measured numbers.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from envgym.synth_agents.passk import FilterConfig


def register(app: typer.Typer) -> None:
    app.command("filter")(filter_command)


def filter_command(
    targets: list[str] = typer.Argument(..., help="suites (their --split) or bundle directories"),
    model: str = typer.Option(
        ..., "--model", "-m", help="the policy: a model folder, smollm2, a server URL, gold, random"
    ),
    out: Path = typer.Option(..., "--out", "-o", help="the kept-tasks file (JSON) to write"),
    split: str = typer.Option(
        "train", "--split", help="a suite's split: train | validation | held_out | all"
    ),
    k: int = typer.Option(8, "--k", help="samples per task at most (train's default group size)"),
    temperature: float = typer.Option(1.0, "--temperature"),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k", help="0: off"),
    max_tokens: int = typer.Option(512, "--max-tokens", help="sampled tokens per turn"),
    episode_tokens: int = typer.Option(2048, "--episode-tokens", help="sampled tokens per episode"),
    max_turns: int = typer.Option(16, "--max-turns"),
    drop_always_solved: bool = typer.Option(
        False, "--drop-always-solved", help="also drop tasks all k samples solve"
    ),
    concurrency: int = typer.Option(4, "--concurrency", help="episodes at a time per bundle"),
    lanes: int = typer.Option(2, "--lanes", help="bundles at a time"),
    sample: int = typer.Option(
        None, "--sample", help="filter a seeded sample of this many bundles (--seed)"
    ),
    sandbox: str = typer.Option("bwrap", "--sandbox", help="bwrap | docker | inprocess"),
    context: str = typer.Option("thinking-retention", "--context"),
    parser: str = typer.Option("hermes", "--parser"),
    seed: int = typer.Option(0, "--seed"),
    restart: bool = typer.Option(False, "--restart", help="replace an existing file"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON summary on stdout"),
) -> None:
    """Keep the tasks a policy solves at least once in k tries; write them for envgym train."""
    err = Console(stderr=True)
    try:
        from envgym.policy import SamplingParams
        from envgym.rollout import RolloutBudget
        from envgym.synth_agents.passk import FilterConfig

        if max_turns < 1 or episode_tokens < 1 or max_tokens < 1:
            raise ValueError("--max-turns, --episode-tokens and --max-tokens must be ≥ 1")
        config = FilterConfig(
            k=k,
            drop_always_solved=drop_always_solved,
            concurrency=concurrency,
            params=SamplingParams(
                temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens
            ),
            budget=RolloutBudget(max_turns=max_turns, max_tokens=episode_tokens),
            derive_budget=False,  # the policy's own budget: the one it trains with
            sandbox=sandbox,
            context=context,
            parser=parser,
            seed=seed,
        )
        summary = run_filter(
            targets, model, out, config, split=split, restart=restart, lanes=lanes, sample=sample,
            console=err,
        )  # fmt: skip
    except (ValueError, OSError, RuntimeError) as exc:
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        err.print(
            f"kept {summary['kept']} of {summary['tasks']} tasks in {summary['bundles']} bundles "
            f"(pass@{k} > 0; mean pass rate {summary['mean_pass_rate']:.3f}) → {out}",
            highlight=False,
        )


def run_filter(
    targets: list[str],
    model: str,
    out: Path,
    config: FilterConfig,
    *,
    split: str,
    restart: bool,
    lanes: int,
    sample: int | None = None,
    console: Console,
) -> dict[str, object]:
    """Filter what the file at ``out`` lacks of ``targets``; returns the file's summary."""
    from envgym.evaluate.models import model_ref
    from envgym.kept_tasks import KeptBundle
    from envgym.suite_manifest import split_dirs
    from envgym.synth_agents.filter_run import model_policy_factory
    from envgym.synth_agents.kept_run import filter_into, filter_settings, resume_or_start

    dirs: list[Path] = []
    for target in targets:
        found = split_dirs(target, split, "train")
        dirs += found if found is not None else [Path(target)]
    ref = model_ref(model)
    start = resume_or_start(
        out, filter_settings(ref.spec, ref.fingerprint, config), restart=restart
    )

    def heard(root: Path, entry: KeptBundle) -> None:
        console.print(f"  {root.name}: {len(entry.kept)}/{entry.tasks} kept", highlight=False)

    kept = asyncio.run(
        filter_into(
            dirs,
            model_policy_factory(model, config.sandbox),
            config,
            out,
            start,
            lanes=lanes,
            sample=sample,
            on_bundle=heard,
        )  # fmt: skip
    )
    return {
        "out": str(out),
        "bundles": sum(b.filtered for b in kept.bundles.values()),
        "not_sampled": sum(not b.filtered for b in kept.bundles.values()),
        "tasks": kept.tasks,
        "kept": kept.kept,
        "mean_pass_rate": kept.mean_pass_rate,
        "settings": kept.settings,
    }
