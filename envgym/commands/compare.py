"""``envgym compare A.json B.json``: is B better than A on the tasks both evaluated?

Reads two ``envgym eval --json`` outputs and prints the paired per-task difference of B − A with
a 95 % interval (Newcombe's paired score interval over clustered Wilson intervals;
envgym.evaluate.paired).  Exit status 2 on a file that is not
such an output, or when the two share no task.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)


def compare_command(
    a: Path = typer.Argument(..., help="`envgym eval --json` output of the baseline"),
    b: Path = typer.Argument(..., help="`envgym eval --json` output of the model compared"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout"),
    resamples: int = typer.Option(
        2000, "--resamples", min=100, help="bootstrap resamples (rewards outside [0, 1] only)"
    ),
    seed: int = typer.Option(0, "--seed", help="bootstrap seed (rewards outside [0, 1] only)"),
) -> None:
    """Paired difference of two evaluations (B − A per task), with a 95% CI."""
    from envgym.evaluate.paired import CompareError, load_scores, paired_difference

    try:
        sa, sb = load_scores(a), load_scores(b)
        result = paired_difference(
            sa.rewards,
            sb.rewards,
            a_samples=sa.samples,
            b_samples=sb.samples,
            resamples=resamples,
            seed=seed,
        )
    except CompareError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps(result.to_dict()))
        return
    out = Console()
    out.print(f"{result.tasks} shared tasks: A {result.a_mean:.3f} → B {result.b_mean:.3f}")
    verdict = "excludes 0" if result.excludes_zero else "includes 0"
    out.print(
        f"B − A = {result.difference:+.3f}  95% CI [{result.low:+.3f}, {result.high:+.3f}]"
        f" ({verdict}); B higher on {result.gained} tasks, lower on {result.lost}"
    )
    how = (
        "Newcombe paired score interval over clustered Wilson intervals"
        if result.method != "bootstrap"
        else "percentile bootstrap over tasks"
    )
    out.print(f"interval: {how}; per-task reward correlation {result.correlation:+.2f}")
    for name, only in (("A", result.only_a), ("B", result.only_b)):
        if only:
            out.print(
                f"{len(only)} tasks only in {name} (not compared): {', '.join(only[:5])}"
                + (" …" if len(only) > 5 else "")
            )
