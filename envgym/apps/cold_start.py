"""``envgym cold-start ROLE``: fine-tune a model to play a synthesis role.

    envgym cold-start search-qa --out ~/.cache/envgym/sft/smollm2-sqa [--entities 160] [--hops 2]
    envgym synth search-qa --agent llm --model ~/.cache/envgym/sft/smollm2-sqa --hops 2 --n 12 ...
    envgym cold-start spec-writer --out ~/.cache/envgym/sft/smollm2-spec [--held-out 20] [--probe 20]
    envgym synth "dog grooming" --agent llm --model ~/.cache/envgym/sft/smollm2-spec ...

The embedded SmolLM2 writes no question–answer pair and no valid spec unaided; this gives it a
cold start (DeepSeek-V3.2 §3.2.2) on teacher traces: of the search-QA constructor and verifier
roles over training entities the synthesis run never samples
(envgym/synth_agents/search_qa/cold_start.py; docs/SEARCH_QA.md), or of the spec writer over
training domains, with held-out domains for the probe (envgym/synth_agents/spec_cold_start.py;
docs/ENV_SPEC.md).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import TextColumn

from envgym.progress import progress_bar

CATEGORIES = ("search-qa", "spec-writer")


def register(app: typer.Typer) -> None:
    app.command("cold-start")(cold_start_command)


def cold_start_command(
    category: str = typer.Argument(
        ..., help="the synthesis roles to teach: search-qa | spec-writer"
    ),
    out: Path = typer.Option(..., "--out", "-o", help="output folder for the fine-tuned model"),
    model: str = typer.Option("smollm2", "--model", "-m", help="smollm2 | HF model folder"),
    entities: int = typer.Option(160, "--entities", help="training entities sampled"),
    hops: int = typer.Option(2, "--hops", help="depth of the taught questions (= synth --hops)"),
    breadth: int = typer.Option(3, "--breadth", help="= synth --breadth (it is in the prompt)"),
    exclude_seed: int = typer.Option(0, "--exclude-seed", help="the synthesis run's --seed"),
    exclude_n: int = typer.Option(
        50, "--exclude-n", help="its first N entities are never trained on"
    ),
    held_out: int = typer.Option(
        20, "--held-out", help="spec-writer: corpus domains never trained on"
    ),
    seeds: int = typer.Option(1, "--seeds", help="spec-writer: writer seeds per training domain"),
    probe_base: bool = typer.Option(
        False, "--probe-base", help="spec-writer: probe the untaught model first, to compare"
    ),
    probe_only: bool = typer.Option(
        False,
        "--probe-only",
        help="spec-writer: only probe the folder --out holds (taught earlier with the same "
        "--held-out and --seed)",
    ),
    max_examples: int = typer.Option(
        None,
        "--max-examples",
        help="spec-writer: train on a seeded subset of this many teacher specs (each SFT step "
        "takes ~1 min on 2 cores)",
    ),
    epochs: int = typer.Option(2, "--epochs"),
    lr: float = typer.Option(2e-4, "--lr"),
    seed: int = typer.Option(0, "--seed"),
    probe: int = typer.Option(
        0,
        "--probe",
        help="then probe N held-out items: search-qa pairs for the verifier, spec-writer domains",
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Teacher traces of a synthesis role (the search-QA constructor and verifier, or the spec
    writer) → SFT → a model folder."""
    err = Console(stderr=True)
    if category == "spec-writer":
        settings = {"held_out": held_out, "seeds": seeds, "epochs": epochs, "lr": lr,
                    "seed": seed, "max_examples": max_examples}  # fmt: skip
        raise typer.Exit(_spec_writer(out, model, settings, probe, probe_base, as_json, probe_only))
    try:
        if category not in CATEGORIES:
            raise ValueError(
                f"unknown category {category!r}; cold-start knows {', '.join(CATEGORIES)}"
            )
        from envgym.apps.cold_start_run import ColdStartConfig

        cfg = ColdStartConfig(entities=entities, hops=hops, breadth=breadth, exclude_seed=exclude_seed,
                              exclude_n=exclude_n, epochs=epochs, lr=lr, seed=seed)  # fmt: skip
        if probe < 0:
            raise ValueError(f"--probe must be >= 0, not {probe}")
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    from envgym.apps.cold_start_run import run_cold_start
    from envgym.tools.search import SearchTools
    from envgym.tools.search.build import default_index
    from envgym.tools.search.debian import load_packages

    with sft_progress(err) as on_step:
        try:
            summary = run_cold_start(out.expanduser(), load_packages(), SearchTools(default_index()), cfg,
                                     model=model, probe=probe, on_step=on_step)  # fmt: skip
        except (ValueError, OSError) as exc:
            err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
            raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    console = Console()
    for key in ("out", "entities", "scripts", "verify_verdicts", "examples", "tokens", "policy_tokens", "steps",
                "first_loss", "last_loss", "seconds", "verifier_probe"):  # fmt: skip
        if key in summary:
            console.print(f"{key:>15}: {summary[key]}")


@contextlib.contextmanager
def sft_progress(err: Console) -> Iterator[Callable[[Any, int], None]]:
    """A progress bar of SFT steps with the loss; yields the ``on_step`` callback."""
    with progress_bar(err, after=(TextColumn("{task.fields[info]}"),)) as bar:
        task: dict[str, Any] = {}

        def on_step(stats: Any, total: int) -> None:
            if "id" not in task:
                task["id"] = bar.add_task("sft", total=total, info="")
            bar.update(task["id"], completed=stats.step + 1, info=f"loss {stats.loss:.3f}")

        yield on_step


def _spec_writer(
    out: Path,
    model: str,
    settings: dict[str, Any],
    probe: int,
    probe_base: bool,
    as_json: bool,
    probe_only: bool = False,
) -> int:
    from envgym.apps.spec_cold_start_run import SpecColdStartConfig, run_spec_cold_start

    err = Console(stderr=True)
    try:
        cfg = SpecColdStartConfig(**settings)
        if probe < 0:
            raise ValueError(f"--probe must be >= 0, not {probe}")
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        return 2
    with sft_progress(err) as on_step:
        try:
            summary = run_spec_cold_start(out.expanduser(), cfg, model=model, probe=probe,
                                          probe_base=probe_base, on_step=on_step,
                                          probe_only=probe_only)  # fmt: skip
        except (ValueError, OSError) as exc:
            err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
            return 2
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return 0
    console = Console()
    for key in ("out", "train_domains", "examples", "tokens", "policy_tokens", "steps",
                "first_loss", "last_loss", "seconds", "base_probe", "probe"):  # fmt: skip
        if key in summary:
            value = summary[key]
            if isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != "per_domain"}
            console.print(f"{key:>15}: {value}")
    return 0
