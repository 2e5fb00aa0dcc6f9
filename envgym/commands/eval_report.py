"""What ``envgym eval`` prints and writes: the summary table, a suite's rows, the JSON payload, the
HTML report, and what errored."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from envgym.evaluate import (
    EvalRun,
    EvalSummary,
    Interval,
)
from envgym.evaluate.budgets import DerivedBudget
from envgym.evaluate.config import ERRORS_DOMINATE
from envgym.rollout.gold_budget import GoldBudgetRule


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


def print_suite(
    target: str, split: str, bundles: list[str], runs: list[EvalRun], as_json: bool
) -> None:
    """One row per bundle, then the split as one task set: pass@k and mean reward with their
    intervals over all its tasks (``envgym.evaluate.summary.pool``).  ``--json`` also lists
    every task as ``BUNDLE::TASK`` in ``per_task``, so ``envgym compare`` reads it like a
    one-bundle evaluation."""
    from envgym.evaluate.summary import pool

    k = runs[0].summary.k
    pooled = pool(((Path(b).name, r.summary) for b, r in zip(bundles, runs)), k)

    def figure(iv: Interval | None) -> dict[str, float] | None:
        return None if iv is None else {"value": iv.value, "low": iv.low, "high": iv.high}

    aggregate = {
        "suite": target,
        "split": split,
        "bundles": len(runs),
        "tasks": pooled.tasks,
        "episodes": sum(r.summary.episodes for r in runs),
        "errored": sum(r.summary.errored for r in runs),
        f"pass@{k}": figure(pooled.pass_at_k),
        "mean_reward": figure(pooled.mean_reward),
    }
    if as_json:
        per = [{"bundle": b, **payload(r)} for b, r in zip(bundles, runs)]
        rows = [
            {"task_id": t, "mean_reward": pooled.rewards[t], "n": pooled.samples[t]}
            for t in pooled.rewards
        ]
        sys.stdout.write(json.dumps({**aggregate, "per_task": rows, "per_bundle": per}) + "\n")
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

    def cell(iv: Interval | None) -> str:
        return "n/a" if iv is None else f"{iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}]"

    table.add_row(
        "all tasks (95% CI)", str(pooled.tasks), cell(pooled.pass_at_k), cell(pooled.mean_reward)
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


def payload(run: EvalRun) -> dict[str, object]:
    """One run as ``--json`` prints it: the summary, what ran now, and the first error."""
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
