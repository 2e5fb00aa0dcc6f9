"""``envgym eval ENV_OR_BUNDLE_DIR --model M -k K``: pass@k, pass^k, CIs; resumable; HTML report."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import TaskID, TextColumn

from envgym.commands.eval_report import (
    payload,
    print_suite,
    print_summary,
    report_errors,
    write_html,
)
from envgym.evaluate import (
    EvalConfig,
    EvalError,
    ModelSpecError,
    evaluate,
    model_ref,
)
from envgym.evaluate.budgets import DerivedBudget
from envgym.evaluate.watch import InFlight
from envgym.models.resolve import resolve_model
from envgym.models.tool_support import decide_tools
from envgym.policy import SamplingParams
from envgym.progress import progress_bar
from envgym.store import Store, StoreError


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


def eval_command(
    target: str = typer.Argument(
        ..., help="environment id, bundle directory or suite directory (docs/SUITES.md)"
    ),
    split: str = typer.Option(
        None, "--split", help="suite: train | validation | held_out | all (default held_out)"
    ),
    model: str = typer.Option(
        "smollm2",
        "--model",
        "-m",
        help="smollm2 | HF model dir | http(s)://server/v1[#model] | vllm+http(s)://server/v1"
        "[#model] | gold | random (docs/MODELS.md)",
    ),
    tools_in_prompt: bool = typer.Option(
        False,
        "--tools-in-prompt",
        help="describe the tools in the system prompt (--parser format) instead of passing them "
        "natively; chosen by itself when a server's chat template drops tools",
    ),
    k: int = typer.Option(1, "-k", help="the k of pass@k / pass^k"),
    samples: int = typer.Option(None, "--samples", "-n", help="samples per task (≥ k; default k)"),
    limit: int = typer.Option(None, "--limit", help="evaluate the first N tasks"),
    include_noop_tasks: bool = typer.Option(
        False,
        "--include-noop-tasks",
        help="also score tasks a do-nothing agent passes (left out by default; τ²'s official "
        "numbers include them)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print exactly one JSON object on stdout"),
    html: Path = typer.Option(
        None, "--html", help="write the static trajectory report into this directory"
    ),
    db: str = typer.Option(
        None,
        "--db",
        help="SQLAlchemy URL of the store (default $ENVGYM_DB or ~/.cache/envgym/envgym.db)",
    ),
    concurrency: int = typer.Option(8, "--concurrency", "-c", help="episodes in flight"),
    max_tokens: int = typer.Option(512, "--max-tokens", help="sampled tokens per turn"),
    episode_tokens: int = typer.Option(
        None,
        "--episode-tokens",
        help="sampled tokens per episode (default: per task, 2 × gold calls × 128, ≥ --max-tokens)",
    ),
    max_turns: int = typer.Option(
        None,
        "--max-turns",
        help="assistant turns per episode (default: per task, 2 × gold calls + 8)",
    ),
    max_seconds: float = typer.Option(
        600.0, "--max-seconds", help="wall-clock seconds per episode (a hang guard)"
    ),
    temperature: float = typer.Option(0.7, "--temperature"),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k"),
    seed: int = typer.Option(0, "--seed", help="base seed; each (task, sample) derives its own"),
    sandbox: str = typer.Option(
        "bwrap", "--sandbox", help="bwrap | docker | inprocess (trusted bundles only)"
    ),
    context: str = typer.Option(
        "thinking-retention+discard-all",
        "--context",
        help="POLICY[+OVERFLOW]: thinking-retention | discard-reasoning | keep-all, and the "
        "overflow strategy past 80%% of the model's window: discard-all | discard-75 | none",
    ),
    context_window: int = typer.Option(
        None,
        "--context-window",
        help="the model's context window in tokens (default: read from the model)",
    ),
    parser: str = typer.Option("hermes", "--parser", help="tool-call parser for raw model text"),
    retry_errors: bool = typer.Option(
        False, "--retry-errors", help="rerun episodes that ended with an error"
    ),
    same_model: bool = typer.Option(
        False,
        "--same-model",
        help="reuse stored results of a server whose model cannot be identified (you vouch "
        "that it still serves the model they came from)",
    ),
    ray: str = typer.Option(
        None, "--ray", help="run env workers as Ray actors: 'local' or a cluster address"
    ),
    max_errored_share: float = typer.Option(
        None, "--max-errored-share", help="stop when more than this share of episodes errored"
    ),
) -> None:
    """Evaluate a model on an environment: pass@k, pass^k, mean reward with 95% CIs (resumable)."""
    err = Console(stderr=True)
    try:
        policy_name, overflow = parse_context(context)
        ref = model_ref(model)
        tools = decide_tools(resolve_model(model), tools_in_prompt=tools_in_prompt, parser=parser)
        err.print(f"tools: {tools.view} — {tools.reason}", markup=False, highlight=False)
        config = EvalConfig(
            native_tools=tools.native_tools,
            k=k,
            samples=samples,
            limit=limit,
            include_noop_tasks=include_noop_tasks,
            concurrency=concurrency,
            sandbox=sandbox,
            context=policy_name,
            overflow=overflow,
            context_window=context_window,
            parser=parser,
            seed=seed,
            retry_errors=retry_errors,
            same_model=same_model,
            ray=ray,
            max_errored_share=max_errored_share,
            params=SamplingParams(
                temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens
            ),
            budget=DerivedBudget(
                max_turns=max_turns,
                max_tokens=episode_tokens,
                max_seconds=max_seconds,
                min_tokens=max_tokens,
            ),
        )
        targets = suite_targets(target, split)
        store = Store(db)
    except (
        EvalError,
        ModelSpecError,
        StoreError,
        ValueError,
        FileNotFoundError,
        ModuleNotFoundError,
    ) as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    try:
        # "inside": the running episodes' turns and tokens, so a slow episode shows it is alive
        with progress_bar(err, after=(TextColumn("{task.fields[inside]}"),)) as bar:
            runs = []
            for one in targets or [target]:
                task = bar.add_task(f"eval {one} · {model}", total=None, inside="")

                def advance(done: int, total: int, result: object, task: TaskID = task) -> None:
                    bar.update(task, completed=done, total=total)

                def turned(flight: InFlight, task: TaskID = task) -> None:
                    bar.update(task, inside=flight.describe())

                runs.append(
                    evaluate(one, ref, config, store=store, progress=advance, on_turn=turned)
                )
    except (EvalError, ModelSpecError, StoreError) as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    finally:
        store.close()
    if targets is not None:
        print_suite(target, split or "held_out", targets, runs, as_json)
    else:
        run = runs[0]
        if html is not None:
            write_html(html, target, run, err, tools_view=asdict(tools))
        if as_json:
            sys.stdout.write(json.dumps({**payload(run), "tools_view": asdict(tools)}) + "\n")
        else:
            print_summary(run, Console(width=None if sys.stdout.isatty() else 160))
            print(f"tools: {tools.view} — {tools.reason}")
    if report_errors(runs, err):
        raise typer.Exit(1)


def suite_targets(target: str, split: str | None) -> list[str] | None:
    """The bundle directories of a suite's split; None when ``target`` is not a suite."""
    from envgym.suite_manifest import SuiteError, split_dirs

    try:
        dirs = split_dirs(target, split, "held_out")
    except SuiteError as exc:
        raise EvalError(f"{exc} (--split {split!r})" if split else str(exc)) from None
    return None if dirs is None else [str(d) for d in dirs]


def parse_context(spec: str) -> tuple[str, str | None]:
    """``POLICY[+OVERFLOW]`` → (reasoning policy, overflow strategy or None)."""
    from envgym.context import POLICIES

    policy, plus, overflow = spec.partition("+")
    if policy not in POLICIES:
        raise ValueError(
            f"--context {spec!r}: unknown context policy {policy!r}; known: {', '.join(POLICIES)}"
        )
    if not plus:
        return policy, "discard-all"
    return policy, None if overflow == "none" else overflow
