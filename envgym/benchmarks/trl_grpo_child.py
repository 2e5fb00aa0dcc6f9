"""TRL's side of ``envgym bench train-trl``: one ``GRPOTrainer`` iteration, run by ``.venv-trl``.

Run as ``.venv-trl/bin/python -I envgym/benchmarks/trl_grpo_child.py --model HF_DIR --task grpo_task.py``
(scripts/trl_venv.sh builds the venv; envgym is not installed there, so the shared prompts,
reward and settings are loaded from :mod:`envgym.benchmarks.grpo_task` by path).

One iteration in TRL's terms: ``max_steps=1`` with ``per_device_train_batch_size=8`` (TRL's
default) and ``gradient_accumulation_steps=8``, so ``generation_batch_size`` = 8 × 8 = 64: one
generation of the 8 prompts × 8 completions, then one optimizer step accumulated over 8
micro-steps of 8 completions, which consumes exactly those 64 (``steps_per_generation`` defaults
to the accumulation steps and ``num_iterations`` to 1, so nothing is generated twice or reused).
Settings taken from ``grpo_task``: fp32 (``bf16=False``; TRL defaults to bf16), CPU, lr, betas,
eps, weight decay, grad-norm clip, β (no reference model), temperature, top-p 1, top-k off,
64 new tokens.  ``scale_rewards="none"``: advantages R − mean, as envgym's default.  TRL's own
defaults are kept otherwise, gradient checkpointing (on) included: it is reported in the result.

Timing: ``_generate_and_score_completions`` (generation, reward, advantages) is the rollout;
the rest of ``train()`` — the forward/backward passes, the optimizer step and the trainer's
bookkeeping — is the update.  Prints one JSON line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sys
import tempfile
import time
from typing import Any


def _load_task(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("grpo_task", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the task file {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the converted HF folder of the model")
    parser.add_argument("--task", required=True, help="envgym/benchmarks/grpo_task.py")
    parser.add_argument(
        "--gradient-checkpointing", choices=("default", "on", "off"), default="default"
    )
    args = parser.parse_args(argv)
    task = _load_task(args.task)

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    answers = {prompt: answer for prompt, answer in task.TASKS}

    def reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [task.reward(t, a) for t, a in zip(texts, answer)]

    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": p}], "answer": answers[p]} for p, _ in task.TASKS]
    )
    timer = {"rollout_s": 0.0}
    seen = {"completion_tokens": 0.0, "prompt_tokens": 0.0, "reward_sum": 0.0, "n": 0.0}

    class TimedGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            timer["rollout_s"] += time.perf_counter() - t0
            seen["completion_tokens"] += float(out["completion_mask"].sum())
            seen["prompt_tokens"] += float(out["prompt_mask"].sum())
            return out

    extra: dict[str, Any] = {}
    if args.gradient_checkpointing != "default":
        extra["gradient_checkpointing"] = args.gradient_checkpointing == "on"
    with tempfile.TemporaryDirectory(prefix="trl-bench-") as out_dir:
        config = GRPOConfig(
            output_dir=out_dir,
            max_steps=1,
            per_device_train_batch_size=8,
            gradient_accumulation_steps=8,
            num_generations=task.GROUP_SIZE,
            max_completion_length=task.MAX_NEW_TOKENS,
            temperature=task.TEMPERATURE,
            top_p=1.0,
            top_k=0,
            learning_rate=task.LR,
            adam_beta1=task.BETAS[0],
            adam_beta2=task.BETAS[1],
            adam_epsilon=task.ADAM_EPS,
            weight_decay=task.WEIGHT_DECAY,
            max_grad_norm=task.MAX_GRAD_NORM,
            lr_scheduler_type="constant",
            beta=task.KL_BETA,
            scale_rewards="none",
            bf16=False,
            fp16=False,
            use_cpu=True,
            model_init_kwargs={"dtype": torch.float32},
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            seed=0,
            **extra,
        )
        trainer = TimedGRPOTrainer(
            model=args.model, reward_funcs=[reward], args=config, train_dataset=data
        )
        load_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        t0 = time.perf_counter()
        result = trainer.train()
        total = time.perf_counter() - t0
    rewards = [v for entry in trainer.state.log_history for k, v in entry.items() if k == "reward"]
    out = {
        "rollout_s": timer["rollout_s"],
        "update_s": total - timer["rollout_s"],
        "total_s": total,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "load_rss_gib": load_rss,
        "loss": float(result.training_loss),
        "reward_mean": float(rewards[-1]) if rewards else float("nan"),
        "completion_tokens": seen["completion_tokens"],
        "prompt_tokens": seen["prompt_tokens"],
        "gradient_checkpointing": float(bool(config.gradient_checkpointing)),
        "global_steps": float(trainer.state.global_step),
    }
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
