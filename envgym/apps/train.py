"""``envgym train CONFIG.yaml``: GRPO on envgym environments (trainer/, docs/TRAINER.md).

The config is read and checked before anything runs (one clear error naming the key); the
trainer room is imported lazily so ``envgym`` stays light for users who never train.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)


def train_command(
    config_path: Path = typer.Argument(
        ..., help="the run's YAML config (configs/grpo_smollm2.yaml)"
    ),
    steps: int = typer.Option(None, "--steps", help="override the config's steps"),
    no_resume: bool = typer.Option(
        False, "--no-resume", help="start fresh even when checkpoint.dir has a checkpoint"
    ),
    as_json: bool = typer.Option(
        False, "--json", help="print the last step's metrics as one JSON object on stdout"
    ),
) -> None:
    """Train a policy with GRPO: rollouts, rewards, group advantages, updates, weight sync."""
    err = Console(stderr=True)
    from envgym.trainer.config import ConfigError, config_from_dict, load_config

    try:
        config = load_config(config_path)
        if steps is not None or no_resume:
            data = config.to_dict()
            if steps is not None:
                data["steps"] = steps
            if no_resume:
                data["checkpoint"]["resume"] = False
            config = config_from_dict(data)
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None

    from envgym.trainer.loop import StepReport, Trainer
    from envgym.trainer.metrics import ProgressDisplay
    from envgym.trainer.ranks_launch import follow, start_ranks
    from envgym.trainer.ranks_rollout import require_ray

    reports: list[StepReport] = []
    try:
        require_ray(config)  # before any rank starts
        spawned = start_ranks(config)  # trainer.world_size > 1: torchrun's, or spawned here
    except ValueError as exc:  # RanksError, no Ray, a launch that does not match the config
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    if not spawned.ranks.is_main:  # a torchrun rank other than 0: trains what rank 0 sends
        try:
            follow(config, spawned.ranks)
        finally:
            spawned.ranks.close()
        return
    failed = True
    try:
        display = ProgressDisplay(config.steps, console=err)
        trainer = Trainer(
            config, on_step=display.update_report, on_phase=display.phase, ranks=spawned.ranks
        )
        with display:
            reports = trainer.run()
        failed = False
    except (ValueError, TypeError) as exc:  # bad tasks, unloadable model, changed config...
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    finally:
        spawned.finish(failed=failed)
    skipped = [r for r in reports if r.skipped]
    for r in skipped:
        err.print(f"[yellow]step {r.step}: update skipped:[/] {r.skipped}")
    last = reports[-1].metrics if reports else {}
    if as_json:
        payload = {"steps": len(reports), "skipped": len(skipped), "last": last}
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    table = Table(title=f"envgym train · {config_path}")
    for col in ("metric", "last step"):
        table.add_column(col)
    for key in (
        "step",
        "reward_mean",
        "pass_rate",
        "heldout_pass_rate",
        "kl",
        "entropy",
        "clip_high_fraction",
        "opsm_masked_fraction",
        "errored",
        "nonfinite_rewards",
        "overlong_masked",
        "tis_ratio_mean",
        "response_len_mean",
        "step_s",
    ):
        if key in last:
            table.add_row(key, f"{last[key]:.4g}")
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    err.print(f"metrics: {config.metrics.dir} · checkpoints: {config.checkpoint.dir}")
