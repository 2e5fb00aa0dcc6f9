"""``envgym eval ENV_OR_BUNDLE_DIR --model M -k K``: pass@k, pass^k, CIs; resumable; HTML report."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import TaskID, TextColumn
from rich.table import Table

from envgym.evaluate import (
    EvalConfig,
    EvalError,
    EvalRun,
    EvalSummary,
    Interval,
    ModelSpecError,
    evaluate,
    model_ref,
)
from envgym.evaluate.budgets import DerivedBudget
from envgym.evaluate.runner import ERRORS_DOMINATE
from envgym.evaluate.watch import InFlight
from envgym.models.resolve import resolve_model
from envgym.models.tool_support import decide_tools
from envgym.policy import SamplingParams
from envgym.progress import progress_bar
from envgym.rollout.gold_budget import GoldBudgetRule
from envgym.store import Store, StoreError


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


def eval_command(
    target: str = typer.Argument(
        ..., help="environment id, bundle directory or suite directory (docs/SUITES.md)"
    ),
    split: str = typer.Option(
        None, "--split", help="suite: train | held_out | all (default held_out)"
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
            sys.stdout.write(json.dumps({**_payload(run), "tools_view": asdict(tools)}) + "\n")
        else:
            print_summary(run, Console(width=None if sys.stdout.isatty() else 160))
            print(f"tools: {tools.view} — {tools.reason}")
    if report_errors(runs, err):
        raise typer.Exit(1)


def report_errors(runs: list[EvalRun], err: Console) -> bool:
    """Say what errored and how to rerun it; True when errors dominate (the exit is non-zero).

    Errors dominate when more than :data:`ERRORS_DOMINATE` of all the episodes errored: the
    numbers printed then describe the infrastructure more than the model."""
    episodes = sum(r.errored.episodes for r in runs)
    errored = sum(r.errored.errored for r in runs)
    first = next((r.errored.first_cause for r in runs if r.errored.first_cause), "")
    reused = sum(r.reused_errored for r in runs)
    dominate = episodes > 0 and errored / episodes > ERRORS_DOMINATE
    if errored:
        label = "[bold red]error:[/]" if dominate else "[yellow]warning:[/]"
        err.print(
            f"{label} {errored} of {episodes} episodes errored"
            + (f" (more than {ERRORS_DOMINATE:.0%}: errors dominate)" if dominate else "")
            + "; they are left out of the results. First error:",
            soft_wrap=True,
        )
        err.print(f"  {first}", markup=False, highlight=False, soft_wrap=True)
    if reused:
        err.print(
            f"hint: {reused} errored episodes were reused from the store, not rerun; "
            "rerun with --retry-errors to run them again (e.g. after fixing the cause)",
            soft_wrap=True,
        )
    return dominate


def suite_targets(target: str, split: str | None) -> list[str] | None:
    """The bundle directories of a suite's split; None when ``target`` is not a suite."""
    from envgym.suite_manifest import SuiteError, is_suite, load_suite

    if split is None and not is_suite(target):
        return None
    try:
        return [str(d) for d in load_suite(target).bundle_dirs(split or "held_out")]
    except SuiteError as exc:
        raise EvalError(f"{exc} (--split {split!r})" if split else str(exc)) from None


def print_suite(
    target: str, split: str, bundles: list[str], runs: list[EvalRun], as_json: bool
) -> None:
    """One row per bundle, then the task-weighted means over the split."""
    tasks = sum(r.summary.tasks for r in runs)

    def weighted(get: Callable[[EvalSummary], float]) -> float:
        values = [(r.summary.tasks, get(r.summary)) for r in runs]
        return sum(n * v for n, v in values) / tasks if tasks else 0.0

    k = runs[0].summary.k
    aggregate = {
        "suite": target,
        "split": split,
        "bundles": len(runs),
        "tasks": tasks,
        "episodes": sum(r.summary.episodes for r in runs),
        "errored": sum(r.summary.errored for r in runs),
        f"pass@{k}": weighted(lambda s: s.pass_at_k[k].value if k in s.pass_at_k else 0.0),
        "mean_reward": weighted(lambda s: s.mean_reward.value),
    }
    if as_json:
        per = [{"bundle": b, **_payload(r)} for b, r in zip(bundles, runs)]
        sys.stdout.write(json.dumps({**aggregate, "per_bundle": per}) + "\n")
        return
    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"envgym eval · suite {target} · {split}")
    for col in ("bundle", "tasks", f"pass@{k}", "mean reward"):
        table.add_column(col)
    for b, r in zip(bundles, runs):
        p = r.summary.pass_at_k.get(k)
        table.add_row(
            Path(b).name,
            str(r.summary.tasks),
            f"{p.value:.3f}" if p else "n/a",
            f"{r.summary.mean_reward.value:.3f}",
        )
    table.add_row(
        "all (task-weighted)",
        str(tasks),
        f"{aggregate[f'pass@{k}']:.3f}",
        f"{aggregate['mean_reward']:.3f}",
    )
    console.print(table)


def write_html(
    out: Path, target: str, run: EvalRun, err: Console, tools_view: dict[str, object] | None = None
) -> None:
    """The report, with the tools the model was given and its exact prompt text."""
    from envgym.evaluate import model_decoder, offered_tools
    from envgym.report import write_report

    tools = decode = None
    try:
        tools = offered_tools(target, run)
    except Exception as exc:  # noqa: BLE001 - the report is still worth writing without them
        err.print(f"[yellow]warning:[/] the report has no tool list: cannot open an env ({exc})")
    try:
        decode = model_decoder(run.model)
    except Exception as exc:  # noqa: BLE001
        err.print(f"[yellow]warning:[/] the report has no prompt text: no tokenizer ({exc})")
    index = write_report(
        out, run.summary, run.episodes, tools=tools, decode=decode, tools_view=tools_view
    )
    err.print(f"report: {index}")


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


def _payload(run: EvalRun) -> dict[str, object]:
    data = run.summary.to_dict()
    data["ran"] = run.ran
    data["reused_errored"] = run.reused_errored
    data["first_error"] = run.errored.first_cause or None
    return data


def interval_note(iv: Interval) -> str:
    """How an interval was made, e.g. ``Wilson, clustered by task: n_eff 66`` (docs/EVAL.md)."""
    if iv.method == "bootstrap":
        return "bootstrap over tasks"
    return f"Wilson, clustered by task: n_eff {iv.n_eff:.4g}" if iv.n_eff is not None else ""


def context_cells(config: dict[str, object]) -> tuple[str, str, str]:
    """The context row: reasoning policy, overflow strategy and the model's window."""
    policy = str(config.get("context", ""))
    if "context_window" not in config:
        return policy, "", "no context window known (pass --context-window N)"
    overflow = config.get("overflow") or "no overflow strategy"
    return f"{policy} + {overflow}", "", f"window {config['context_window']} tokens"


def budget_cell(config: dict[str, object]) -> str:
    """The episode budget as keyed: derived per task from its gold solution, or fixed."""
    budget = config.get("budget")
    if not isinstance(budget, dict):
        return ""
    if budget.get("derived_from") == "gold_calls":
        try:
            fields = {k: v for k, v in budget.items() if k not in ("derived_from", "rule")}
            rule = GoldBudgetRule(**dict(budget.get("rule") or {}))
            return DerivedBudget(rule=rule, **fields).describe()
        except (TypeError, ValueError):
            return "derived per task from its gold solution"
    return f"{budget.get('max_turns')} turns, {budget.get('max_tokens')} tokens, {budget.get('max_seconds')} s"


def print_summary(run: EvalRun, console: Console) -> None:
    s: EvalSummary = run.summary
    table = Table(title=f"envgym eval · {run.bundle.manifest.name} · {run.model.spec}")
    for col in ("metric", "value", "95% CI", "note"):
        table.add_column(col)
    for name, values in (("pass@", s.pass_at_k), ("pass^", s.pass_hat_k)):
        for j, iv in values.items():
            notes = [interval_note(iv)]
            if s.excluded.get(j):
                notes.append(f"{s.excluded[j]} tasks with < {j} valid samples left out")
            table.add_row(
                f"{name}{j}", f"{iv.value:.3f}", f"[{iv.low:.3f}, {iv.high:.3f}]", "; ".join(notes)
            )
    mr = s.mean_reward
    table.add_row(
        "mean reward", f"{mr.value:.3f}", f"[{mr.low:.3f}, {mr.high:.3f}]", interval_note(mr)
    )
    table.add_row("tokens / episode", f"{s.tokens_per_episode:.1f}", "", "sampled")
    table.add_row("turns / episode", f"{s.turns_per_episode:.2f}", "", "")
    table.add_row("tool calls / episode", f"{s.tool_calls_per_episode:.2f}", "", "")
    table.add_row(
        "episodes", str(s.episodes), "", f"{run.ran} run now, {s.episodes - run.ran} from the store"
    )
    table.add_row("context", *context_cells(s.meta.get("config") or {}))
    table.add_row("budget", budget_cell(s.meta.get("config") or {}), "", "")
    if run.identity:
        table.add_row("model identity", run.identity, "", "what the server lists for it")
    table.add_row(
        "errored",
        str(s.errored),
        "",
        ", ".join(f"{k}: {v}" for k, v in sorted(s.errors_by_kind.items())),
    )
    if s.truncations:
        table.add_row(
            "truncated",
            str(sum(s.truncations.values())),
            "",
            ", ".join(f"{k}: {v}" for k, v in sorted(s.truncations.items())),
        )
    console.print(table)
    if s.excluded_tasks:
        console.print(excluded_note(s.excluded_tasks), markup=False)  # ids may hold brackets
    console.print(f"evaluation key {run.key}")


def excluded_note(excluded: dict[str, str]) -> str:
    """Which tasks the numbers above leave out, and why (a do-nothing agent passes them)."""
    reasons = sorted(set(excluded.values()))
    ids = ", ".join(sorted(excluded)[:8]) + (", …" if len(excluded) > 8 else "")
    return (
        f"{len(excluded)} tasks excluded from pass@k, pass^k and mean reward: "
        f"{'; '.join(reasons)} ({ids}); --include-noop-tasks scores them"
    )
