"""Run the pass@k filter over the kept bundles of a synthesis run (resumable, per task).

Each task's result is journaled (then stored) as soon as it is decided; a rerun skips decided
tasks and never loads the model when nothing is left to do.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envgym.bundle import load_bundle
from envgym.policy import Policy
from envgym.synth_agents.passk import FilterConfig, TaskFilterResult, filter_bundle
from envgym.synth_agents.recorder import FilterKey, SynthRecorder

PolicyFactory = Callable[[Path], Policy]  # bundle dir -> policy (gold replay needs the bundle)


@dataclass
class FilterSummary:
    model: str
    k: int
    drop_always_solved: bool
    tasks: int = 0
    kept: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    full_tokens_estimate: int = 0
    derived_budget: bool = True
    budget_rule: str = ""  # how the episode budget was set, for the table
    longest_gold_calls: int = 0  # over the filtered tasks (0: unknown)
    max_turns: int = 0  # the largest episode budget used
    max_tokens: int = 0
    # Measured difficulty per declared difficulty: {label: {"tasks": n, "pass_rate": mean}} — the
    # label (an LLM task's level) is only a claim; the pass rate is the measurement.
    by_declared_difficulty: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def token_fraction(self) -> float:
        return self.tokens / self.full_tokens_estimate if self.full_tokens_estimate else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "decisions": dict(self.decisions),
            "token_fraction": self.token_fraction,
        }


def model_policy_factory(model: str, sandbox: str) -> PolicyFactory:
    """A factory for ``--filter-model`` names (envgym.evaluate.models: smollm2, URL, HF dir, gold, random)."""
    from envgym.evaluate.models import load_policy, model_ref

    ref = model_ref(model)
    shared: list[Policy] = []

    def make(bundle_dir: Path) -> Policy:
        if ref.kind == "agent":  # gold replay is per bundle
            return load_policy(ref, bundle_dir=bundle_dir, sandbox=sandbox)
        if not shared:
            shared.append(load_policy(ref, bundle_dir=bundle_dir, sandbox=sandbox))
        return shared[0]

    return make


def filter_run(
    recorder: SynthRecorder,
    records: list[dict[str, Any]],
    *,
    model: str,
    factory: PolicyFactory,
    config: FilterConfig,
    progress: Callable[[int, int], None] | None = None,
) -> FilterSummary:
    """Filter every kept task of ``records``; returns the summary over all of them (resumed too)."""
    summary = FilterSummary(
        model,
        config.k,
        config.drop_always_solved,
        derived_budget=config.derive_budget,
        budget_rule=budget_rule(config),
    )
    work: list[tuple[Path, str, list[str], dict[str, int]]] = []
    for record in records:
        if record.get("status") != "kept":
            continue
        digest = record["content_hash"]
        todo = [
            t
            for t in record["tasks"]
            if recorder.filter_result(_key(digest, t, model, config)) is None
        ]
        if todo:
            work.append((recorder.final(record), digest, todo, gold_calls(record)))
    total = sum(len(r.get("tasks", [])) for r in records if r.get("status") == "kept")
    done = total - sum(len(t) for _, _, t, _ in work)
    if progress:
        progress(done, total)

    def commit(digest: str, result: TaskFilterResult) -> None:
        nonlocal done
        recorder.commit_filter(_key(digest, result.task_id, model, config), result.to_dict())
        done += 1
        if progress:
            progress(done, total)

    async def run_all() -> None:
        # One event loop for the whole run: a model backend may hold loop-bound state.
        policies: list[Policy] = []
        try:
            for root, digest, todo, calls in work:
                policy = await asyncio.to_thread(factory, root)
                if policy not in policies:
                    policies.append(policy)
                await filter_bundle(
                    load_bundle(root),
                    policy,
                    config,
                    task_ids=todo,
                    gold_calls=calls,
                    on_result=lambda r, d=digest: commit(d, r),
                )
        finally:
            for policy in policies:
                await policy.aclose()

    if work:
        asyncio.run(run_all())
    rates: dict[str, list[float]] = {}
    for record in records:
        if record.get("status") != "kept":
            continue
        for task in record["tasks"]:
            result = recorder.filter_result(_key(record["content_hash"], task, model, config))
            if result is None:
                continue
            summary.tasks += 1
            summary.kept += bool(result["kept"])
            summary.decisions[result["decision"]] += 1
            summary.tokens += int(result["tokens"])
            summary.full_tokens_estimate += int(result["full_tokens_estimate"])
            summary.longest_gold_calls = max(
                summary.longest_gold_calls, int(result.get("gold_calls", 0))
            )
            summary.max_turns = max(summary.max_turns, int(result.get("max_turns", 0)))
            summary.max_tokens = max(summary.max_tokens, int(result.get("max_tokens", 0)))
            rates.setdefault(str(result.get("declared_difficulty", 0)), []).append(
                float(result["pass_rate"])
            )
    summary.by_declared_difficulty = {
        level: {"tasks": len(r), "pass_rate": round(sum(r) / len(r), 4)}
        for level, r in sorted(rates.items())
    }
    return summary


def budget_rule(config: FilterConfig) -> str:
    if not config.derive_budget:
        return "fixed by --filter-max-turns / --filter-episode-tokens"
    return (
        f"derived per bundle from its longest gold solution: {config.headroom:g} × calls + {config.slack_turns} "
        f"turns, {config.headroom:g} × calls × {config.tokens_per_call} sampled tokens (at least "
        f"{config.budget.max_turns} turns, {config.budget.max_tokens} tokens)"
    )


def gold_calls(record: dict[str, Any]) -> dict[str, int]:
    """Task id → tool calls of its gold solution, as validation's envgym check counted them."""
    figures = (record.get("validation") or {}).get("tasks") or []
    return {str(f["task_id"]): int(f.get("tool_calls", 0)) for f in figures if "task_id" in f}


def _key(digest: str, task_id: str, model: str, config: FilterConfig) -> FilterKey:
    return FilterKey(digest, task_id, model, config.k, config.drop_always_solved)
