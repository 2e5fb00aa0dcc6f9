"""``envgym sft [CONFIG.yaml]``: cold-start SFT (DeepSeek-V3.2 §3.2.2) on gold replays.

Options override the config (or replace it: ``--env`` and ``--out`` are enough).  The config
is checked before anything runs; the trainer room is imported inside the command so
``envgym`` stays light for users who never train.  docs/SFT.md has the measured numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import TextColumn
from rich.table import Table

from envgym.progress import progress_bar


def register(app: typer.Typer) -> None:
    app.command("sft")(sft_command)


def sft_command(
    config_path: Path = typer.Argument(
        None, help="the run's YAML config (configs/sft_smollm2.yaml); options override it"
    ),
    env: list[str] = typer.Option(
        None,
        "--env",
        "-e",
        help="training env id, bundle directory, or suite (its train split; repeatable)",
    ),
    held_out: list[str] = typer.Option(
        None,
        "--held-out",
        help="held-out env id, bundle directory, sha256 hash, or suite (its held-out split; repeatable)",
    ),
    held_out_task: list[str] = typer.Option(
        None, "--held-out-task", help="held-out task id, in any bundle (repeatable)"
    ),
    model: str = typer.Option(None, "--model", "-m", help="smollm2 | HF model folder"),
    out: str = typer.Option(None, "--out", "-o", help="output folder for the fine-tuned model"),
    epochs: int = typer.Option(None, "--epochs"),
    lr: float = typer.Option(None, "--lr"),
    max_examples: int = typer.Option(
        None, "--max-examples", help="train on a seeded random subset of this many examples"
    ),
    limit: int = typer.Option(None, "--limit", help="gold tasks per training target"),
    max_turns: int = typer.Option(
        None, "--max-turns", help="drop gold episodes of more assistant turns (the policy's budget)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Fine-tune a policy on gold replays (and successful store episodes) of training tasks."""
    err = Console(stderr=True)
    from envgym.trainer.sft_run import (
        SFTConfigError,
        load_run_config,
        override,
        run_config_from_dict,
    )

    try:
        if config_path is not None:
            cfg = load_run_config(config_path)
        else:
            if not env or not out:
                raise SFTConfigError("give a CONFIG.yaml, or at least --env and --out")
            cfg = run_config_from_dict({"train": list(env), "out": out})
        cfg = override(
            cfg,
            train=tuple(env) if env else None,
            held_out_bundles=tuple(held_out) if held_out else None,
            held_out_tasks=tuple(held_out_task) if held_out_task else None,
            model=model,
            out=out,
            limit=limit,
            max_turns=max_turns,
            sft_epochs=epochs,
            sft_lr=lr,
            sft_max_examples=max_examples,
        )
    except SFTConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None

    from envgym.trainer.sft_run import run_sft

    with progress_bar(err, after=(TextColumn("{task.fields[info]}"),)) as bar:
        tasks: dict[str, Any] = {}

        def on_data(target: str, done: int, total: int) -> None:
            if target not in tasks:
                tasks[target] = bar.add_task(f"gold {Path(target).name}", total=total, info="")
            bar.update(tasks[target], completed=done)

        def on_step(stats: Any, total: int) -> None:
            if "train" not in tasks:
                tasks["train"] = bar.add_task("sft", total=total, info="")
            info = f"loss {stats.loss:.3f} lr {stats.lr:.2e}"
            bar.update(tasks["train"], completed=stats.step + 1, info=info)

        try:
            run = run_sft(cfg, on_data=on_data, on_step=on_step)
        except (ValueError, TypeError, FileExistsError) as exc:
            err.print(f"[bold red]error:[/] {exc}")
            raise typer.Exit(2) from None

    result = run.result
    assert result is not None and run.out is not None
    summary = {
        "out": str(run.out),
        "data": run.report.to_dict(),
        "held_out": run.held_out.to_dict(),
        "steps": len(result.steps),
        "skipped_steps": result.skipped,
        "first_loss": result.steps[0].loss,
        "last_loss": result.steps[-1].loss,
        "seconds": result.seconds,
        "cpu_seconds": result.cpu_seconds,
    }
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    table = Table(title="envgym sft")
    table.add_column("")
    table.add_column("value", justify="right")
    data = summary["data"]
    for label, value in (
        ("tasks replayed", data["tasks"]),
        ("episodes kept", data["episodes"]),
        ("examples trained on", result.examples),
        ("tokens / policy tokens", f"{data['tokens']} / {data['policy_tokens']}"),
        ("dropped", ", ".join(f"{k} {v}" for k, v in data["dropped"].items()) or "none"),
        ("held-out bundles / tasks", f"{len(run.held_out.bundles)} / {len(run.held_out.tasks)}"),
        ("steps (skipped)", f"{summary['steps']} ({summary['skipped_steps']})"),
        ("loss first → last", f"{summary['first_loss']:.3f} → {summary['last_loss']:.3f}"),
        ("wall / CPU seconds", f"{result.seconds:.0f} / {result.cpu_seconds:.0f}"),
        ("model", str(run.out)),
    ):
        table.add_row(label, str(value))
    Console(width=None if sys.stdout.isatty() else 120).print(table)
