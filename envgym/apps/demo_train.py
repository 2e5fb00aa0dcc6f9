"""The demo's training step (the short version of the README's learning run).

Code-interpreter math at difficulty 1: a training bundle and a held-out bundle built from two
seeds; the embedded SmolLM2 is cold-started (``envgym sft``: gold replays in its own format),
then trained with a few GRPO steps (``envgym train``).  The held-out pass@1 (greedy) of the base,
cold-started and GRPO models is printed, with the training-curve PNG's path.

Small on purpose: about ten minutes on 2 cores.  A few GRPO steps on 2-core budgets move the
pass rate little — the README's learning table (``configs/grpo_smollm2_math12.yaml``) is the run
that shows learning; this shows the whole pipeline end to end on a fresh machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class DemoTraining:
    """Sizes of the demo's training step (defaults: ~10 minutes on 2 cores)."""

    train_per_generator: int = 2  # 11 math generators × difficulty 1 → 22 training tasks
    heldout_per_generator: int = 1  # → 11 held-out tasks (another build seed)
    train_seed: int = 101
    heldout_seed: int = 102
    sft_epochs: int = 3
    sft_lr: float = 3e-4
    grpo_steps: int = 2
    group_size: int = 4
    prompts: int = 4
    grpo_lr: float = 3e-5
    max_tokens: int = 192  # per turn, in training and evaluation alike
    max_turns: int = 3

    @classmethod
    def quick(cls) -> DemoTraining:
        """The smallest step that still runs every stage (``envgym demo --quick``, the tests):
        11 training tasks, 2 SFT epochs, one GRPO step on 2 groups of 2."""
        return cls(
            train_per_generator=1,
            sft_epochs=2,
            grpo_steps=1,
            group_size=2,
            prompts=2,
            max_tokens=128,
            max_turns=2,
        )


def build_bundles(out: Path, spec: DemoTraining) -> tuple[Path, Path]:
    """The training and held-out bundles (built once; reused when already there)."""
    from envgym.envs.code_interpreter.build import build_bundle

    made = []
    for name, seed, per in (
        ("train", spec.train_seed, spec.train_per_generator),
        ("heldout", spec.heldout_seed, spec.heldout_per_generator),
    ):
        root = out / "bundles" / f"math1-{name}"
        if not (root / "manifest.json").is_file():
            build_bundle(root, families=("math",), seed=seed, per_generator=per, difficulties=(1,))
        made.append(root)
    return made[0], made[1]


def heldout_pass(
    heldout: Path, model: str, spec: DemoTraining, sandbox: str, out: Path, console: Console
) -> tuple[float, float, float]:
    """Greedy pass@1 on every held-out task: ``(value, 95% low, 95% high)``."""
    from envgym.evaluate import EvalConfig, evaluate, model_ref
    from envgym.policy import SamplingParams
    from envgym.rollout import RolloutBudget
    from envgym.store import Store

    config = EvalConfig(
        k=1,
        concurrency=16,
        sandbox=sandbox,
        params=SamplingParams(temperature=0.0, max_tokens=spec.max_tokens),
        budget=RolloutBudget(max_turns=spec.max_turns, max_tokens=spec.max_turns * spec.max_tokens),
    )
    with Store(f"sqlite:///{out / 'train.db'}") as store:
        run = evaluate(str(heldout), model_ref(model), config, store=store)
    p = run.summary.pass_at_k[1]
    console.print(
        f"  held-out pass@1 of {Path(model).name}: {p.value:.3f} "
        f"[{p.low:.3f}, {p.high:.3f}] ({run.summary.tasks} tasks)"
    )
    return p.value, p.low, p.high


def demo_training(
    console: Console,
    out: Path,
    sandbox: str = "bwrap",
    *,
    step: int = 8,
    spec: DemoTraining | None = None,
) -> bool:
    """Cold start + a few GRPO steps into ``out``; False when a stage could not run."""
    from envgym.trainer.config import config_from_dict
    from envgym.trainer.loop import Trainer
    from envgym.trainer.sft import SFTConfig
    from envgym.trainer.sft_run import EnvOptions, SFTRunConfig, run_sft

    spec = spec or DemoTraining()
    out.mkdir(parents=True, exist_ok=True)
    console.rule(
        f"[bold]{step}. cold start (envgym sft) and {spec.grpo_steps} GRPO steps "
        "(envgym train) on code-interpreter math"
    )
    t0 = time.perf_counter()
    train, heldout = build_bundles(out, spec)
    console.print(f"  bundles: {train} (training), {heldout} (held out)")
    rows: list[tuple[str, tuple[float, float, float], float]] = []
    try:
        t = time.perf_counter()
        rows.append(
            (
                "SmolLM2-135M-Instruct (base)",
                heldout_pass(heldout, "smollm2", spec, sandbox, out, console),
                time.perf_counter() - t,
            )
        )
        t = time.perf_counter()
        sft_out = out / "sft"
        run_sft(
            SFTRunConfig(
                train=(str(train),),
                out=str(sft_out),
                held_out_bundles=(str(heldout),),
                max_turn_tokens=spec.max_tokens,
                env=EnvOptions(sandbox=sandbox),
                sft=SFTConfig(epochs=spec.sft_epochs, lr=spec.sft_lr, batch_tokens=2048),
            )
        )
        rows.append(
            (
                "after cold start (SFT)",
                heldout_pass(heldout, str(sft_out), spec, sandbox, out, console),
                time.perf_counter() - t,
            )
        )
        t = time.perf_counter()
        grpo = out / "grpo"
        config = config_from_dict(
            {
                "model": {"path": str(sft_out)},
                "envs": [{"id": str(train), "sandbox": sandbox}],
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
                "minibatches": 2,
                "old_logprobs": "engine",
                "dynamic_sampling": {"max_refills": 1},
                "checkpoint": {
                    "dir": str(grpo / "checkpoints"),
                    "resume": False,
                    "export": str(grpo / "policy"),
                },
                "metrics": {"dir": str(grpo / "metrics"), "tensorboard": False},
            }
        )
        reports = Trainer(config, on_phase=lambda p: console.print(f"  {p}")).run()
        for r in reports:
            m = r.metrics
            console.print(
                f"  GRPO step {r.step}: reward {m.get('reward_mean', float('nan')):.3f}"
                f"  groups kept {m.get('groups_kept', 0):.0f}"
                f"  {r.skipped or ''}"
            )
        rows.append(
            (
                f"after {spec.grpo_steps} GRPO steps",
                heldout_pass(heldout, str(grpo / "policy"), spec, sandbox, out, console),
                time.perf_counter() - t,
            )
        )
    except (ValueError, OSError, RuntimeError) as exc:
        console.print(f"[bold red]training step failed:[/] {exc}")
        return False
    table = Table(title=f"held-out pass@1, greedy ({heldout.name})")
    for col in ("model", "pass@1", "95% CI", "stage wall s"):
        table.add_column(col)
    for name, (value, low, high), secs in rows:
        table.add_row(name, f"{value:.3f}", f"[{low:.3f}, {high:.3f}]", f"{secs:.0f}")
    console.print(table)
    console.print(
        f"training curves: [bold]{grpo / 'metrics' / 'curves.png'}[/]  "
        f"({time.perf_counter() - t0:.0f} s in all)"
    )
    return (grpo / "metrics" / "curves.png").is_file()
