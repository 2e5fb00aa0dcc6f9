"""``envgym bench synth``: procedural synthesis + validation throughput, and the tokens the
early-stopping pass@k filter spends against k full rollouts per task for the same decisions.

1. ``bundles_per_min``: ``run_synthesis`` over the four procedural categories (3 tasks per
   bundle, difficulties cycling 1-5), two worker processes, every bundle fully validated
   (envgym check in bubblewrap, static and dynamic tools-only checks, tool probe, near-duplicate
   check) and recorded in a store; wall clock of the whole run, pool start-up included.
   Baseline in the same run: one worker (``bundles_per_min_1worker``).
   ``suite_bundles_per_min``: a suite (``envgym synth --categories``, docs/SUITES.md) over
   ``SUITE_CATEGORIES`` (hand-written specs and corpus domains, i.e. the spec compiler's path a
   1,000-environment suite mostly takes), two workers; admitted bundles per minute of the whole
   build (pipeline, suite-wide dedup, tool signatures, manifest).
2. ``early_stop_token_fraction``: on tasks of every category, :class:`SlipPolicy` (replays the
   gold tool calls and gives up with probability ``slip`` per turn — a cheap policy with
   realistic, length-dependent pass rates; tokens counted with SmolLM2's tokenizer: prompt +
   completion of every turn) is sampled (a) by the early-stopping filter (keep pass@k > 0) and
   (b) k times per task through the rollout engine.  Same (task, sample) seeds, so the episodes
   are identical; the fraction is tokens(a) / tokens(b), and the decisions must agree.  The
   same with ``drop_always_solved`` gives ``early_stop_token_fraction_drop_always``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import tempfile
import time
from pathlib import Path

from envgym.bench import BenchResult
from envgym.bundle import load_bundle
from envgym.bundle_env import BundleEnv
from envgym.rollout import RolloutBudget, RolloutEngine, specs_for
from envgym.store import Store
from envgym.synth_agents.categories import CATEGORIES
from envgym.synth_agents.passk import FilterConfig, filter_bundle
from envgym.synth_agents.pipeline import run_synthesis
from envgym.synth_agents.procedural import ProceduralAgent
from envgym.synth_agents.recorder import SynthRecorder
from envgym.synth_agents.slip_policy import SlipPolicy, smollm2_tokenizer
from envgym.synth_agents.suite import SuiteConfig, build_suite

SLIP = 0.03
# Two hand-written specs and three corpus domains: what most of a suite of all categories is.
SUITE_CATEGORIES = (
    "library loans",
    "insurance claims",
    "aircraft maintenance",
    "airline seats",
    "animal shelter",
)


def _suite_throughput(out: Path, per_category: int, workers: int) -> tuple[float, int, int]:
    """(admitted bundles per minute, admitted, jobs) of one suite build."""
    config = SuiteConfig(SUITE_CATEGORIES, per_category, workers=workers)
    store = Store(f"sqlite:///{out}.db")
    started = time.perf_counter()
    try:
        manifest = build_suite(config, out, store)
    finally:
        store.close()
    admitted = len(manifest["bundles"])
    return admitted / ((time.perf_counter() - started) / 60), admitted, manifest["report"]["jobs"]


def _throughput(out: Path, per_category: int, workers: int) -> tuple[float, int, int]:
    """(validated bundles per minute, validated, made) over every procedural category."""
    store = Store(f"sqlite:///{out}/store.db")
    validated = made = 0
    started = time.perf_counter()
    try:
        for i, category in enumerate(CATEGORIES):
            summary = run_synthesis(
                ProceduralAgent(category.name),
                n=per_category,
                seed=1000 * i,
                recorder=SynthRecorder(out / category.slug, store),
                workers=workers,
            )
            validated += summary.validated
            made += summary.made
    finally:
        store.close()
    return validated / ((time.perf_counter() - started) / 60), validated, made


async def _tokens(root: Path, k: int, tokenizer: object) -> dict[str, object]:
    bundle = load_bundle(root)
    policy = SlipPolicy(root, slip=SLIP, tokenizer=tokenizer)
    try:
        early = await filter_bundle(bundle, policy, FilterConfig(k=k))
        drop = await filter_bundle(bundle, policy, FilterConfig(k=k, drop_always_solved=True))
        factory = functools.partial(BundleEnv, bundle, sandbox="bwrap")
        full: dict[str, list[tuple[bool, int]]] = {t.id: [] for t in bundle.tasks}
        async with RolloutEngine.local(
            policy, factory, concurrency=4, budget=RolloutBudget()
        ) as engine:
            async with contextlib.aclosing(engine.run(specs_for(list(full), k, seed=0))) as stream:
                async for r in stream:
                    full[r.task_id].append((r.passed, r.prompt_tokens + r.sampled_tokens))
    finally:
        await policy.aclose()
    agree = all((r.decision == "keep") == any(p for p, _ in full[r.task_id]) for r in early)
    agree_drop = all(
        (r.decision == "keep") == (0 < sum(p for p, _ in full[r.task_id]) < k) for r in drop
    )
    return {
        "early": sum(r.tokens for r in early),
        "drop": sum(r.tokens for r in drop),
        "full": sum(t for runs in full.values() for _, t in runs),
        "agree": agree and agree_drop,
        "episodes_early": sum(r.n + r.errors for r in early),
        "episodes_full": sum(len(v) for v in full.values()),
        "kept": sum(r.kept for r in early),
        "tasks": len(early),
    }


def run(quick: bool = False) -> BenchResult:
    per_category, k = (3, 20) if quick else (15, 100)
    with tempfile.TemporaryDirectory(prefix="envgym-bench-synth-") as tmp:
        out = Path(tmp)
        rate, validated, made = _throughput(out / "two", per_category, workers=2)
        rate_1, _, _ = _throughput(out / "one", max(1, per_category // 3), workers=1)
        suite_rate, suite_bundles, suite_jobs = _suite_throughput(
            out / "suite", max(2, per_category // 3), workers=2
        )
        tokenizer = smollm2_tokenizer()
        totals: dict[str, float] = {}
        roots = [
            out / "two" / c.slug / "bundles" / f"{c.slug}-{1000 * i}"
            for i, c in enumerate(CATEGORIES)
        ]
        for root in roots:
            for key, value in asyncio.run(_tokens(root, k, tokenizer)).items():
                totals[key] = (
                    totals.get(key, 0) + float(value)
                    if key != "agree"
                    else float(totals.get(key, 1.0) and value)
                )
    metrics = {
        "bundles_per_min": rate,
        "bundles_per_min_1worker": rate_1,
        "worker_speedup": rate / rate_1 if rate_1 else 0.0,
        "validated_share": validated / made if made else 0.0,
        "early_stop_token_fraction": totals["early"] / totals["full"],
        "early_stop_token_fraction_drop_always": totals["drop"] / totals["full"],
        "filter_decisions_agree": totals["agree"],
        "filter_tasks": totals["tasks"],
        "filter_kept": totals["kept"],
        "episodes_early_stop": totals["episodes_early"],
        "episodes_full": totals["episodes_full"],
        "suite_bundles_per_min": suite_rate,
        "suite_bundles": suite_bundles,
        "suite_jobs": suite_jobs,
    }
    units = {
        "bundles_per_min": "bundles/min",
        "bundles_per_min_1worker": "bundles/min",
        "worker_speedup": "ratio",
        "validated_share": "ratio",
        "early_stop_token_fraction": "ratio",
        "early_stop_token_fraction_drop_always": "ratio",
        "filter_decisions_agree": "bool",
        "filter_tasks": "tasks",
        "filter_kept": "tasks",
        "episodes_early_stop": "episodes",
        "episodes_full": "episodes",
        "suite_bundles_per_min": "bundles/min",
        "suite_bundles": "bundles",
        "suite_jobs": "jobs",
    }
    notes = {
        "bundles_per_min": f"target ≥ 100 on 2 cores; {4 * per_category} bundles × 3 tasks, 2 workers",
        "early_stop_token_fraction": f"target ≤ 0.25; keep pass@{k} > 0, SlipPolicy(slip={SLIP}) vs {k} full rollouts",
        "early_stop_token_fraction_drop_always": "also dropping always-solved tasks (AM-Thinking, LongCat)",
        "filter_decisions_agree": "1 = early stopping decided every task as the full rollouts do",
        "suite_bundles_per_min": f"suite of {len(SUITE_CATEGORIES)} spec/corpus categories × "
        f"{max(2, per_category // 3)}, 3 tasks, 2 workers; bundles admitted after dedup",
    }
    return BenchResult(benchmark="synth", metrics=metrics, units=units, notes=notes)
