"""The demo's story, the mission in miniature: synthesized environments → a policy that learns
on them → measured on categories it never saw.

1. ``envgym synth --categories``: a small suite of a few categories, offline, split by category
   into training and held-out categories (docs/SUITES.md);
2. ``envgym check``: the full adversarial check of a sampled bundle;
3. ``envgym sft``: the cold start (DeepSeek-V3.2 §3.2.2) on gold replays of the training
   categories' tasks;
4. the pass@k filter (§3.2.3) of those tasks with the *cold-started* policy, sampling at the RL
   temperature: a task is kept when the policy solves it at least once in k tries (the base
   model solves none, so it would keep nothing).  Cold-starting on one environment per category
   and filtering the others was measured first: 8 gold replays gave 0 of 9 unseen tasks kept,
   so at this size the filter runs over the tasks the cold start replayed;
5. ``envgym train``: a few GRPO steps on the kept tasks;
6. ``envgym eval`` on the held-out categories: greedy pass@1 of the cold-started and the GRPO
   policy, each with its 95% interval, and their paired difference (``envgym compare``), plus
   the HTML report and the training-curve PNG.

Sized for 2 cores: the story is the pipeline; ``configs/transfer_*.yaml`` is the experiment.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from envgym.heap import release_freed

# The categories whose environments have the fewest tools (about 6): each tool's schema is in
# the system prompt, so these give the shortest prompts (~1.2k tokens), which is what a 2-core
# CPU prefills fastest; their level-1/2 tasks often need just a list call and the submit.
DEMO_CATEGORIES = (
    "electricity billing",
    "coffee roasting",
    "newsroom",
    "court hearings",
    "farm produce",
    "aircraft maintenance",
    "crypto wallets",
    "car rentals",
)


@dataclass(frozen=True)
class DemoStory:
    """Sizes of each step (defaults: the full demo on 2 cores; :meth:`quick` for the tests)."""

    categories: tuple[str, ...] = DEMO_CATEGORIES
    per_category: int = 1
    tasks_per_bundle: int = 4
    difficulties: tuple[int, ...] = (1, 2)
    max_rows: int = 10  # small tables: tool results of ~0.1-1k tokens, not ~4k
    held_out_share: float = 0.25
    seed: int = 0
    sft_epochs: int = 1
    sft_lr: float = 1e-4
    filter_k: int = 4
    grpo_steps: int = 3
    group_size: int = 4
    prompts: int = 4
    grpo_lr: float = 2e-5
    # Tokens through the model per microbatch: room for a group's prompt (1.3-2.7k tokens of
    # tool schemas) once plus its samples' own turns, which the trainer then runs together.
    micro_tokens: int = 4096
    minibatches: int = 1  # one optimizer step on the whole batch: a group stays in one pass
    refills: int = 1  # dynamic sampling: rollout rounds to replace uniform groups
    max_tokens: int = 128  # per turn, in the filter, training and evaluation alike
    max_turns: int = 3

    @classmethod
    def quick(cls) -> DemoStory:
        """Every step at its smallest: 4 categories (one held out), one bundle each."""
        return cls(
            categories=DEMO_CATEGORIES[:4],
            per_category=1,
            tasks_per_bundle=3,
            sft_epochs=2,
            grpo_steps=1,
            group_size=2,
            prompts=2,
        )


def synthesize(console: Console, out: Path, spec: DemoStory, sandbox: str) -> Path:
    """Build (or resume) the suite; print its report."""
    from envgym.apps.synth_suite import print_report
    from envgym.synth_agents.suite import SuiteConfig, build_suite

    suite = out / "suite"
    config = SuiteConfig(
        categories=spec.categories,
        per_category=spec.per_category,
        seed=spec.seed,
        held_out_share=spec.held_out_share,
        tasks_per_bundle=spec.tasks_per_bundle,
        difficulties=spec.difficulties,
        sandbox=sandbox,
        workers=2,
        max_rows=spec.max_rows,
    )
    manifest = build_suite(config, suite, None)
    report = {"out": str(suite), "suite": str(suite / "suite.json"), **manifest["report"]}
    report["splits"] = {k: len(v) for k, v in manifest["splits"].items()}
    print_report(report, console)
    return suite


def check(console: Console, suite: Path, sandbox: str) -> bool:
    """The full adversarial check of one sampled bundle (``envgym check SUITE --sample 1``)."""
    from envgym.commands.check_suite import run_suite_check

    code = run_suite_check(
        str(suite),
        as_json=False,
        console=console,
        sample=1,
        seed=0,
        sandbox=sandbox,
        corruptions=20,
        reruns=3,
        mutation=False,
        max_mutants=0,
        baselines=(),
    )
    return code == 0


def cold_start(
    console: Console, suite: Path, bundles: list[Path], out: Path, spec: DemoStory, sandbox: str
) -> Path:
    """SFT on ``bundles``' gold replays that fit the turn budget; the held-out categories (and
    any task sharing a prompt with theirs) are never trained on."""
    from envgym.trainer.sft import SFTConfig
    from envgym.trainer.sft_run import EnvOptions, SFTRunConfig, run_sft

    sft_out = out / "sft"
    run = run_sft(
        SFTRunConfig(
            train=tuple(map(str, bundles)),
            out=str(sft_out),
            held_out_bundles=(str(suite),),
            max_turn_tokens=spec.max_tokens,
            max_turns=spec.max_turns,
            env=EnvOptions(sandbox=sandbox),
            sft=SFTConfig(epochs=spec.sft_epochs, lr=spec.sft_lr, batch_tokens=4096),
        )
    )
    data = run.report.to_dict()
    assert run.result is not None
    console.print(
        f"  {data['examples']} gold replays of {data['tasks']} training tasks "
        f"(dropped: {data['dropped'] or 'none'}); {len(run.result.steps)} steps, "
        f"loss {run.result.steps[0].loss:.3f} → {run.result.steps[-1].loss:.3f}"
    )
    return sft_out


def pass_filter(
    console: Console, suite: Path, policy_dir: Path, out: Path, spec: DemoStory, sandbox: str
) -> Path | None:
    """pass@k with the cold-started policy over the training split (``envgym filter``): the
    kept-tasks file, or None when it kept nothing."""
    from envgym.evaluate.models import model_ref
    from envgym.policy import SamplingParams
    from envgym.rollout import RolloutBudget
    from envgym.suite_manifest import split_dirs
    from envgym.synth_agents.filter_run import model_policy_factory
    from envgym.synth_agents.kept_run import filter_into, filter_settings, resume_or_start
    from envgym.synth_agents.passk import FilterConfig

    config = FilterConfig(
        k=spec.filter_k,
        concurrency=4,  # two bundles at a time: 8 episodes in flight in all
        params=SamplingParams(temperature=0.8, max_tokens=spec.max_tokens),
        budget=RolloutBudget(max_turns=spec.max_turns, max_tokens=spec.max_turns * spec.max_tokens),
        derive_budget=False,  # the policy's own budget: the one it trains with
        sandbox=sandbox,
        seed=spec.seed,
    )
    ref = model_ref(str(policy_dir))
    path = out / "kept.json"
    # a new cold start each run, so a new filter (the file of the last run had another policy)
    start = resume_or_start(path, filter_settings(ref.spec, ref.fingerprint, config), restart=True)
    dirs = split_dirs(suite, "train", "train") or []
    kept = asyncio.run(
        filter_into(
            dirs,
            model_policy_factory(str(policy_dir), sandbox),
            config,
            path,
            start,
            lanes=2,
            on_bundle=lambda d, b: console.print(
                f"  {d.name}: {len(b.kept)}/{b.tasks} kept", highlight=False
            ),
        )  # fmt: skip
    )
    console.print(
        f"  kept {kept.kept} of {kept.tasks} training tasks (pass@{spec.filter_k} > 0; mean pass "
        f"rate {kept.mean_pass_rate:.3f}, {len(dirs)} bundles) → {path}"
    )
    return path if kept.kept else None


def train(
    console: Console, suite: Path, kept: Path, start: Path, out: Path, spec: DemoStory,
    sandbox: str,
) -> Path:  # fmt: skip
    """GRPO on the training split's kept tasks; returns the exported policy folder."""
    from envgym.trainer.config import config_from_dict
    from envgym.trainer.loop import Trainer

    grpo = out / "grpo"
    config = config_from_dict(
        {
            "model": {"path": str(start)},
            "envs": [{"id": str(suite), "split": "train", "kept": str(kept), "sandbox": sandbox}],
            "rollout": {
                "group_size": spec.group_size,
                "prompts": spec.prompts,
                "temperature": 0.8,
                "max_tokens": spec.max_tokens,
                "episode_tokens": spec.max_turns * spec.max_tokens,
                "max_turns": spec.max_turns,
                "concurrency": 16,
            },
            "optimizer": {"lr": spec.grpo_lr},
            "steps": spec.grpo_steps,
            "minibatches": spec.minibatches,
            "micro_tokens": spec.micro_tokens,
            "old_logprobs": "engine",
            "dynamic_sampling": {"max_refills": spec.refills},
            "checkpoint": {
                "dir": str(grpo / "checkpoints"),
                "resume": False,
                "export": str(grpo / "policy"),
            },
            "metrics": {"dir": str(grpo / "metrics"), "tensorboard": False},
        }
    )
    for r in Trainer(config, on_phase=lambda p: console.print(f"  {p}")).run():
        m = r.metrics
        console.print(
            f"  GRPO step {r.step}: reward {m.get('reward_mean', float('nan')):.3f}"
            f"  groups kept {m.get('groups_kept', 0):.0f}  {r.skipped or ''}"
        )
    return grpo / "policy"


def held_out(
    console: Console, suite: Path, models: list[tuple[str, Path]], out: Path, spec: DemoStory,
    sandbox: str,
) -> bool:  # fmt: skip
    """Greedy pass@1 of each model on every held-out category's tasks, the paired difference
    of the last against the first, and the HTML report of the last."""
    from envgym.commands.eval_report import write_html
    from envgym.evaluate import EvalConfig, evaluate, model_ref
    from envgym.evaluate.paired import paired_difference
    from envgym.evaluate.summary import Pooled, pool
    from envgym.policy import SamplingParams
    from envgym.rollout import RolloutBudget
    from envgym.store import Store
    from envgym.suite_manifest import load_suite

    dirs = [suite / b.path for b in load_suite(suite).select("held_out")]
    config = EvalConfig(
        k=1,
        concurrency=16,
        sandbox=sandbox,
        params=SamplingParams(temperature=0.0, max_tokens=spec.max_tokens),
        budget=RolloutBudget(max_turns=spec.max_turns, max_tokens=spec.max_turns * spec.max_tokens),
    )
    pooled: list[Pooled] = []
    table = Table(title=f"held-out categories: greedy pass@1 on {len(dirs)} bundles")
    for col in ("model", "tasks", "pass@1", "95% CI", "wall s"):
        table.add_column(col)
    with Store(f"sqlite:///{out / 'demo.db'}") as store:
        for name, folder in models:
            t = time.perf_counter()
            runs = [evaluate(str(d), model_ref(str(folder)), config, store=store) for d in dirs]
            p = pool(((d.name, r.summary) for d, r in zip(dirs, runs)), 1)
            pooled.append(p)
            iv = p.pass_at_k
            table.add_row(
                name,
                str(p.tasks),
                "n/a" if iv is None else f"{iv.value:.3f}",
                "n/a" if iv is None else f"[{iv.low:.3f}, {iv.high:.3f}]",
                f"{time.perf_counter() - t:.0f}",
            )
    console.print(table)
    a, b = pooled[0], pooled[-1]
    diff = paired_difference(a.rewards, b.rewards, a_samples=a.samples, b_samples=b.samples)
    console.print(
        f"  {models[-1][0]} − {models[0][0]}: {diff.difference:+.3f} "
        f"95% CI [{diff.low:+.3f}, {diff.high:+.3f}] (paired over {diff.tasks} tasks; "
        f"better on {diff.gained}, worse on {diff.lost})"
    )
    for d, run in zip(dirs, runs):  # the last model's runs
        write_html(out / "report" / d.name, str(d), run, console)
    return True


def demo_story(
    console: Console, out: Path, sandbox: str = "bwrap", *, step: int = 1,
    spec: DemoStory | None = None,
) -> bool:  # fmt: skip
    """Every step of the story into ``out``, each timed; False when one could not run."""
    from envgym.suite_manifest import load_suite

    spec = spec or DemoStory()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def stage(title: str, work: Any) -> Any:
        nonlocal step
        console.rule(f"[bold]{step}. {title}")
        step += 1
        t = time.perf_counter()
        result = work()
        release_freed()  # the next step (or a process beside the demo) gets the step's memory
        console.print(f"  (step took {time.perf_counter() - t:.0f} s)")
        return result

    names = ", ".join(spec.categories)
    suite = stage(
        f"envgym synth --categories ({len(spec.categories)}: {names}) "
        f"--per-category {spec.per_category} --difficulties {','.join(map(str, spec.difficulties))}",
        lambda: synthesize(console, out, spec, sandbox),
    )
    ok = stage(f"envgym check {suite} --sample 1", lambda: check(console, suite, sandbox))
    train_dirs = [suite / b.path for b in load_suite(suite).select("train")]
    try:
        sft = stage(
            f"cold start: envgym sft --env {suite} --max-turns {spec.max_turns}",
            lambda: cold_start(console, suite, train_dirs, out, spec, sandbox),
        )
        kept = stage(
            f"pass@{spec.filter_k} filter of the training tasks with the cold-started policy",
            lambda: pass_filter(console, suite, sft, out, spec, sandbox),
        )
        if not kept:
            console.print("[bold red]the filter kept no task: nothing to train on[/]")
            return False
        policy = stage(
            f"{spec.grpo_steps} GRPO steps (envgym train) on the kept tasks",
            lambda: train(console, suite, kept, sft, out, spec, sandbox),
        )
        ok = (
            stage(
                f"envgym eval {suite} --split held_out: categories never trained on",
                lambda: held_out(
                    console, suite, [("cold start", sft), ("GRPO", policy)], out, spec, sandbox
                ),
            )
            and ok
        )
    except (ValueError, OSError, RuntimeError) as exc:
        console.print(f"[bold red]the story stopped:[/] {exc}")
        return False
    curves = out / "grpo" / "metrics" / "curves.png"
    console.print(f"training curves: [bold]{curves}[/]  ({time.perf_counter() - t0:.0f} s in all)")
    return ok and curves.is_file()
