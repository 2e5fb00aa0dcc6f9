"""``envgym demo``, the README demo: build → check → play → evaluate the embedded model (pass@k
+ HTML report) on trip planning and the code interpreter → synthesize, validate and
pass@k-filter new bundles procedurally, then evaluate one → mine and check SWE instances
(demo_swe.py) → cold-start and GRPO-train the embedded model on code-interpreter math, with the
held-out pass rate before and after (demo_train.py).

It drives the synthesis, SWE and trainer rooms, so it lives in ``apps/`` (above the core) and
reaches the CLI through the ``envgym.commands`` entry point.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import mean

import typer
from rich.console import Console
from rich.table import Table

from envgym import registry
from envgym.agents import EpisodeSummary, RandomAgent, ScriptedAgent, run_episode
from envgym.bundle import load_bundle
from envgym.bundle_env import BundleEnv
from envgym.check import check_bundle

DEMO_ENV = "trip-planning-v0"


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)


def demo_command(
    episodes: int = typer.Option(20, help="random-agent episodes"),
    sandbox: str = typer.Option(
        "bwrap", "--sandbox", help="bwrap | docker | inprocess (trusted bundles only)"
    ),
    train: bool = typer.Option(
        True, "--train/--no-train", help="end with cold start + a few GRPO steps (~10 min)"
    ),
    quick: bool = typer.Option(
        False, "--quick", help="every step at its smallest size: the same paths in a few minutes"
    ),
    swe: bool = typer.Option(
        True,
        "--swe/--no-swe",
        help="mine, validate and check SWE instances from a small repository",
    ),
) -> None:
    """The README demo: build, check, play, evaluate, synthesize (bundles and SWE instances),
    then cold-start and train."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    raise typer.Exit(
        run_demo(
            console=console,
            random_episodes=episodes,
            sandbox=sandbox,
            training=train,
            quick=quick,
            swe=swe,
        )
    )


@dataclass(frozen=True)
class DemoEval:
    """Step 4: the embedded model on the first ``tasks`` tasks, ``k`` samples each.

    Small on purpose (2 cores, a few minutes): SmolLM2-135M rarely solves a trip plan, so the
    numbers show the pipeline — the report shows what it tried.
    """

    env: str = DEMO_ENV
    model: str = "smollm2"
    tasks: int = 3
    k: int = 2
    max_tokens: int = 96  # per turn
    max_turns: int = 4
    out_dir: Path | None = None  # default $ENVGYM_DEMO_DIR or ~/.cache/envgym/demo


def run_demo(
    *,
    console: Console,
    random_episodes: int = 20,
    sandbox: str = "bwrap",
    evaluations: tuple[DemoEval, ...] = (
        DemoEval(),
        # The code interpreter on real Jupyter kernels (math/logic/data tasks).
        DemoEval(env="code-interpreter-v0", tasks=2, max_tokens=128, max_turns=3),
    ),
    synthesis: bool = True,
    swe: bool = True,
    training: bool = True,
    quick: bool = False,
) -> int:
    """Returns a process exit code: 0 when the bundle checks out, the gold agent scores 1 and
    the evaluation ran (its pass@k is reported, not judged).

    ``quick``: every step at its smallest size (one task per evaluation, k = 1, one synthesized
    bundle, the smallest training step) — the same code paths in a few minutes; the test suite
    runs the demo this way.
    """
    t0 = time.perf_counter()
    if quick:
        evaluations = tuple(replace(e, tasks=1, k=1) for e in evaluations)
    console.rule("[bold]1. build the trip-planning bundle")
    bundle = load_bundle(registry.resolve_bundle(DEMO_ENV))
    console.print(
        f"{bundle.root}  ({len(bundle.tasks)} tasks, {bundle.manifest.content_hash[:19]}…)"
    )

    console.rule(f"[bold]2. envgym check {DEMO_ENV}  (sandbox: {sandbox})")
    from envgym.cli import print_check

    report = check_bundle(bundle, sandbox=sandbox)
    print_check(report)

    console.rule("[bold]3. agents play through envgym.make")
    env = registry.make(DEMO_ENV, sandbox=sandbox)
    assert isinstance(env, BundleEnv)
    scripted: list[EpisodeSummary] = []
    randoms: list[EpisodeSummary] = []
    try:
        for i, task in enumerate(bundle.tasks):
            env.reset(seed=i, options={"task": task.id})
            agent = ScriptedAgent(env.gold_calls())
            scripted.append(run_episode(env, agent, seed=i, task=task.id))
        rng = random.Random(0)
        for i in range(random_episodes):
            randoms.append(run_episode(env, RandomAgent(rng=random.Random(rng.random())), seed=i))
    finally:
        env.close()

    table = Table(title="demo summary")
    for col in (
        "agent",
        "episodes",
        "mean reward",
        "solved",
        "mean turns",
        "mean tool calls",
        "agent errors",
    ):
        table.add_column(col)
    for name, results in (("scripted (gold tool calls)", scripted), ("random", randoms)):
        errors = sum(sum(r.errors.values()) for r in results)
        table.add_row(
            name,
            str(len(results)),
            f"{mean(r.reward for r in results):.3f}",
            f"{sum(r.reward == 1.0 for r in results)}/{len(results)}",
            f"{mean(r.turns for r in results):.1f}",
            f"{mean(r.tool_calls for r in results):.1f}",
            str(errors),
        )
    console.print(table)
    ok = report.passed and all(r.reward == 1.0 for r in scripted)
    console.print(f"  ({time.perf_counter() - t0:.0f} s so far)")
    for step, evaluation in enumerate(evaluations, start=4):
        ok = (
            _timed(
                console, lambda s=step, e=evaluation: demo_evaluation(console, e, sandbox, step=s)
            )
            and ok
        )
    if synthesis:
        step, size = 4 + len(evaluations), 1 if quick else 2
        ok = _timed(console, lambda: demo_synthesis(console, sandbox, step=step, size=size)) and ok
    step = 6 + len(evaluations)
    if swe:
        from envgym.apps.demo_swe import demo_swe

        ok = (
            _timed(
                console, lambda s=step: demo_swe(console, _demo_dir(), sandbox, step=s, quick=quick)
            )
            and ok
        )
        step += 1
    if training:
        from envgym.apps.demo_train import DemoTraining, demo_training

        spec = DemoTraining.quick() if quick else DemoTraining()
        out = _demo_dir() / "train"
        ok = (
            _timed(console, lambda: demo_training(console, out, sandbox, step=step, spec=spec))
            and ok
        )
    console.print(
        f"[bold]{'demo OK' if ok else 'demo FAILED'}[/] in {time.perf_counter() - t0:.1f} s"
    )
    return 0 if ok else 1


def _timed(console: Console, step: Callable[[], bool]) -> bool:
    """Run one demo step and print its wall time (users see where the minutes go)."""
    t = time.perf_counter()
    ok = step()
    console.print(f"  (step took {time.perf_counter() - t:.0f} s)")
    return ok


def demo_evaluation(
    console: Console, spec: DemoEval, sandbox: str = "bwrap", *, step: int = 4
) -> bool:
    """Evaluate, print the summary, write the HTML report; False if it could not run."""
    from envgym.commands.eval_report import print_summary
    from envgym.evaluate import EvalConfig, EvalError, ModelSpecError, evaluate, model_ref
    from envgym.policy import SamplingParams
    from envgym.report import write_report
    from envgym.rollout import RolloutBudget
    from envgym.store import Store

    console.rule(
        f"[bold]{step}. envgym eval {spec.env} --model {spec.model} -k {spec.k} --limit {spec.tasks} --html …"
    )
    out = spec.out_dir or _demo_dir()
    config = EvalConfig(
        k=spec.k,
        limit=spec.tasks,
        concurrency=spec.tasks * spec.k,
        sandbox=sandbox,
        params=SamplingParams(temperature=0.7, max_tokens=spec.max_tokens),
        budget=RolloutBudget(max_turns=spec.max_turns, max_tokens=spec.max_turns * spec.max_tokens),
    )
    try:
        with Store(f"sqlite:///{out / 'demo.db'}") as store:
            run = evaluate(
                spec.env,
                model_ref(spec.model),
                config,
                store=store,
                progress=lambda done, total, _r: (
                    console.print(f"  episodes {done}/{total}") if done else None
                ),
            )
    except (EvalError, ModelSpecError, ModuleNotFoundError) as exc:
        console.print(f"[bold red]evaluation failed:[/] {exc}")
        return False
    print_summary(run, console)
    index = write_report(out / "report" / Path(spec.env).name, run.summary, run.episodes)
    console.print(f"HTML report: [bold]{index}[/]  (open it in a browser; no network needed)")
    return True


SYNTH_CATEGORY = "retail orders"


def demo_synthesis(
    console: Console, sandbox: str = "bwrap", *, step: int = 6, size: int = 2
) -> bool:
    """The synthesis step: synthesize ``size`` bundles procedurally, validate them, filter their
    tasks by pass@``size`` with the embedded model (tiny budgets), then evaluate ``size`` tasks
    of the first bundle."""
    from envgym.apps.synth import synth_command

    out = _demo_dir()
    synth_out = out / "synth"
    console.rule(
        f"[bold]{step}. envgym synth {SYNTH_CATEGORY!r} --n {size} --agent procedural --filter-k {size} --filter-model smollm2"
    )
    try:
        synth_command(
            category=SYNTH_CATEGORY,
            categories=None,  # one category, not a suite
            per_category=None,
            n=size,
            out=synth_out,
            agent="procedural",
            mode="spec",
            model="smollm2",
            seed=0,
            tasks_per_bundle=2,
            difficulties="1,2",
            workers=1,
            filter_k=size,
            filter_model="smollm2",
            drop_always_solved=False,
            filter_concurrency=4,
            filter_max_turns=3,
            filter_episode_tokens=288,
            filter_max_tokens=96,
            max_rounds=1,
            max_levels=0,
            max_tokens=256,
            temperature=0.7,
            sandbox=sandbox,
            db=f"sqlite:///{out / 'demo.db'}",
            as_json=False,
        )
    except typer.Exit as exc:
        if exc.exit_code:
            console.print(f"[bold red]synthesis failed[/] (exit {exc.exit_code})")
            return False
    made = sorted((synth_out / "bundles").glob("*/manifest.json"))
    if not made:
        console.print("[bold red]synthesis kept no bundle[/]")
        return False
    # Evaluate a validated bundle whatever the filter decided: SmolLM2-135M rarely solves
    # these, so the filter usually drops every task; the numbers show the pipeline.
    spec = DemoEval(env=str(made[0].parent), tasks=size, k=size, max_tokens=96, max_turns=3)
    return demo_evaluation(console, spec, sandbox, step=step + 1)


def _demo_dir() -> Path:
    return Path(os.environ.get("ENVGYM_DEMO_DIR", Path.home() / ".cache" / "envgym" / "demo"))
