"""envgym's side of ``envgym bench train-trl``: one GRPO iteration, run in its own process.

The trainer's own pieces in the order ``Trainer.step`` uses them (envgym/trainer/loop.py): the model
loaded by ``weight_sync.load_model``, the local engine from ``weight_sync.build_engine`` (its
own frozen copy of the weights), ``loop.build_policies``, then per iteration

* rollout: the 8 prompts × 8 completions of :mod:`envgym.benchmarks.grpo_task` sampled together
  by the engine (``rollout.concurrency`` 64: one decode batch, as TRL generates its 64 at once), and the
  string-match reward;
* update: group advantages, :class:`envgym.trainer.update.Update` (the no-grad π_old recompute,
  then one optimizer step over length-balanced microbatches of ``micro_tokens``), and the weight sync
  into the engine.

There is no env here (the prompts are single-turn questions): the env machinery is measured by
``envgym bench rollout``; this child measures what TRL's ``GRPOTrainer`` also does.  It prints
one JSON line: times, peak RSS (``ru_maxrss``, so model load, engine copy, optimizer state and
the update together) and what it trained on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from typing import Any

from envgym.benchmarks import grpo_task


def _config(micro_tokens: int | str, gradient_checkpointing: bool = False) -> Any:
    from envgym.trainer.config import config_from_dict

    t = grpo_task
    return config_from_dict(
        {
            "envs": [{"id": "bench"}],  # never made: the prompts come from grpo_task
            "rollout": {
                "group_size": t.GROUP_SIZE,
                "prompts": len(t.TASKS),
                "temperature": t.TEMPERATURE,
                "max_tokens": t.MAX_NEW_TOKENS,
                "concurrency": t.GROUP_SIZE * len(t.TASKS),
            },
            "optimizer": {
                "lr": t.LR,
                "betas": list(t.BETAS),
                "eps": t.ADAM_EPS,
                "weight_decay": t.WEIGHT_DECAY,
                "max_grad_norm": t.MAX_GRAD_NORM,
            },
            "model": {"gradient_checkpointing": gradient_checkpointing},
            "loss": {"kl_beta": t.KL_BETA},
            "micro_tokens": micro_tokens,
            "minibatches": 1,
            "dynamic_sampling": {"enabled": False},
        }
    )


async def _rollout(engine: Any, config: Any) -> list[tuple[int, Any]]:
    from envgym.policy import SamplingParams

    r = config.rollout
    calls = []
    for g, (prompt, _answer) in enumerate(grpo_task.TASKS):
        for j in range(r.group_size):
            i = g * r.group_size + j
            params = SamplingParams(temperature=r.temperature, max_tokens=r.max_tokens, seed=i)
            messages = [{"role": "user", "content": prompt}]
            calls.append(engine.act(f"bench-{i}", messages, [], params))
    turns = await asyncio.gather(*calls)
    return [(i // r.group_size, turn) for i, turn in enumerate(turns)]


def child_run(micro_tokens: int | str, gradient_checkpointing: bool = False) -> dict[str, float]:
    """Load, run one iteration, report (the JSON line's fields)."""
    import torch

    from envgym.models.kept import KeptSets
    from envgym.trainer.advantages import group_advantages
    from envgym.trainer.batch import Sample
    from envgym.trainer.loop import build_policies
    from envgym.trainer.update import Update
    from envgym.trainer.weight_sync import build_engine, load_model, pad_id, sync_weights

    torch.manual_seed(0)
    config = _config(micro_tokens, gradient_checkpointing)
    model, tokenizer = load_model(config)
    policy, ref = build_policies(config, model)
    engine = build_engine(config, model, tokenizer)
    update = Update(config, policy, ref, pad_id=pad_id(tokenizer))
    n = config.rollout.group_size

    async def iteration() -> dict[str, float]:
        t0 = time.perf_counter()
        done = await _rollout(engine, config)
        rewards = torch.tensor(
            [grpo_task.reward(turn.text, grpo_task.TASKS[g][1]) for g, turn in done]
        ).view(len(grpo_task.TASKS), n)
        t1 = time.perf_counter()
        adv = group_advantages(rewards, normalize_std=config.normalize_std)
        samples = []
        for k, (g, turn) in enumerate(done):
            prompt, sampled = list(turn.prompt_ids or []), list(turn.token_ids)
            kept = turn.kept.entries if isinstance(turn.kept, KeptSets) else [None] * len(sampled)
            samples.append(
                Sample(
                    token_ids=prompt + sampled,
                    loss_mask=[0] * len(prompt) + [1] * len(sampled),
                    engine_logp=[0.0] * len(prompt) + list(turn.logprobs),
                    kept=[None] * len(prompt) + list(kept),
                    routes=None,
                    advantage=float(adv[g, k % n]),
                    reward=float(rewards[g, k % n]),
                    group=g,
                    task_id=f"bench{g}",
                    policy_version=0,
                    episode=k,
                )
            )
        metrics, skipped = update.run(samples, step=0)
        if skipped is not None:
            raise RuntimeError(f"the update was skipped: {skipped}")
        await sync_weights(engine, model, 1, config)
        t2 = time.perf_counter()
        await engine.aclose()
        return {
            "rollout_s": t1 - t0,
            "update_s": t2 - t1,
            "total_s": t2 - t0,
            "loss": float(metrics.get("loss", float("nan"))),
            "reward_mean": float(rewards.mean()),
            "completion_tokens": float(sum(len(t.token_ids) for _, t in done)),
            "prompt_tokens": float(sum(len(t.prompt_ids or []) for _, t in done)),
        }

    load_rss = _vm("VmRSS")
    out = asyncio.run(iteration())
    out["load_rss_gib"] = load_rss
    out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out["micro_tokens"] = float(getattr(update, "micro_tokens", micro_tokens))  # auto: resolved
    out["gradient_checkpointing"] = float(gradient_checkpointing)
    return out


def _vm(key: str) -> float:
    """A ``/proc/self/status`` size in GiB (0 where unreadable)."""
    try:
        with open(f"/proc/{os.getpid()}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-tokens", required=True, help="a number or auto")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    args = parser.parse_args(argv)
    mt = args.micro_tokens if args.micro_tokens == "auto" else int(args.micro_tokens)
    sys.stdout.write(json.dumps(child_run(mt, args.gradient_checkpointing)) + "\n")


if __name__ == "__main__":
    main()
