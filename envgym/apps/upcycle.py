"""``envgym upcycle SRC OUT``: a dense Llama-architecture model → SmolMoE, a standard HF Mixtral.

The command-line face of :func:`envgym.trainer.smolmoe.upcycle` (docs/MOE.md), so the MoE learning
run is reproducible from the shell: ``envgym upcycle runs/sft OUT`` then ``envgym train`` with
``model.path: OUT``.  ``SRC`` may be ``smollm2`` (the embedded model).  An ``OUT`` that already
holds files is refused unless ``--force``: an upcycle must not silently replace a trained policy.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console


def register(app: typer.Typer) -> None:
    app.command("upcycle")(upcycle_command)


def upcycle_command(
    src: str = typer.Argument(..., help="an HF Llama-architecture folder, or 'smollm2' (embedded)"),
    out: Path = typer.Argument(..., help="the folder to write the Mixtral model to"),
    experts: int = typer.Option(4, "--experts", help="copies of each layer's MLP"),
    top_k: int = typer.Option(2, "--top-k", help="experts each token is routed to"),
    noise: float = typer.Option(0.0, "--noise", help="relative Gaussian noise on the experts"),
    seed: int = typer.Option(0, "--seed", help="seed of the router weights and the noise"),
    force: bool = typer.Option(False, "--force", help="write into an OUT that holds files"),
) -> None:
    """Sparse-upcycle a dense model into a Mixtral MoE (equal to it at --noise 0)."""
    err = Console(stderr=True)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        err.print(
            f"[bold red]error:[/] OUT={str(out)!r} already holds files; "
            "pass --force to write into it"
        )
        raise typer.Exit(2)
    from envgym.trainer.smolmoe import upcycle

    source: str | Path = src
    if src == "smollm2":
        from envgym.embedded import hf_dir

        source = hf_dir()
    try:
        folder = upcycle(source, out, n_experts=experts, top_k=top_k, noise=noise, seed=seed)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    print(folder)
