"""``envgym bench rollout``: multi-turn generation throughput and prefill economy, in one run.

Episodes are trip-planning episodes (the real bundle, in-process sandbox).  Generation is real
SmolLM2 sampling; the tool results are scripted so every episode has the same number of tool
turns: after each sampled turn the env runs the task's next gold-solution call and the tool's
real answer is appended (the assistant message carries the sampled text).

(a) ``kv_reuse_tokens_per_s`` vs ``reprefill_tokens_per_s``: the local engine (cross-turn KV
    reuse, batched across episodes) vs, on the *same prompts and lengths*, re-rendering the
    whole history and calling ``model.generate`` (batched, left-padded) every turn.
(b) ``vllm_envgym_tokens_per_s`` vs ``vllm_raw_tokens_per_s``: 32 concurrent episodes through
    envgym's vLLM token-in backend (render, HTTP, env steps) vs replaying the same prompt ids and
    lengths straight at the server (32 concurrent streams, ``ignore_eos``), prefix cache reset in
    between.  Needs ``.venv-vllm`` (scripts/vllm_setup.sh); not run with ``--quick`` (the server
    alone takes ~80 s to start).
(c) ``retention_prefill_tokens`` vs ``discard_prefill_tokens``: prompt tokens recomputed per
    episode (``prompt_tokens - cached_prompt_tokens``, the engine's own accounting, with
    session reuse and cross-episode prefix sharing) under thinking retention (DeepSeek-V3.2
    §3.2.1) vs R1-style discard, thinking mode on (turns open with ``<think>``; the sampled
    reasoning is kept or dropped by the env's context policy).  docs/MODELS.md explains why
    the prefill saving is small when tool results are long.
"""

from __future__ import annotations

import asyncio
import time

import torch

from envgym.bench import BenchResult
from envgym.benchmarks.rollout_episodes import Trace, rollouts, trip_envs
from envgym.models.local import LocalPolicy
from envgym.policy import SamplingParams


# -- (a) KV reuse vs re-prefill ----------------------------------------------------------------
def _reprefill(
    policy: LocalPolicy, traces: list[Trace], params: SamplingParams
) -> tuple[int, float]:
    """Re-render every turn's whole history and ``model.generate`` it, batched across episodes,
    with each turn's longest sampled length; returns (tokens generated, seconds)."""
    fmt, model, tok = policy.format, policy.model, policy.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    total, started = 0, time.perf_counter()
    for step in range(len(traces[0].turns)):
        prompts = [fmt.prompt_ids(t.prompts[step], t.tools) for t in traces]
        new = max(len(t.turns[step].token_ids) for t in traces)
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=0,
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=pad,
            )
        total += (out.shape[1] - width) * len(traces)
    return total, time.perf_counter() - started


def kv_reuse(quick: bool) -> dict[str, float]:
    episodes, turns = (2, 4) if quick else (4, 6)
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=16 if quick else 40, seed=0)
    policy = LocalPolicy.from_pretrained("smollm2", max_batch=episodes)
    envs = trip_envs(episodes)
    try:
        started = time.perf_counter()
        traces = asyncio.run(rollouts(policy, envs, turns, params))
        reuse_s = time.perf_counter() - started
        reuse_tokens = sum(len(t.token_ids) for tr in traces for t in tr.turns)
        base_tokens, base_s = _reprefill(policy, traces, params)
    finally:
        for env in envs:
            env.close()
        asyncio.run(policy.aclose())
    return {
        "kv_reuse_tokens_per_s": reuse_tokens / reuse_s,
        "reprefill_tokens_per_s": base_tokens / base_s,
        "kv_reuse_speedup": (reuse_tokens / reuse_s) / (base_tokens / base_s),
        "episode_context_tokens": float(
            max(len(t.prompt_ids or []) for tr in traces for t in tr.turns)
        ),
    }


# -- (c) thinking retention vs R1 discard ------------------------------------------------------
def retention(quick: bool) -> dict[str, float]:
    episodes, turns = (2, 4) if quick else (4, 6)
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=24 if quick else 48, seed=1)
    out: dict[str, float] = {}
    for policy_name, key in (("thinking-retention", "retention"), ("discard-reasoning", "discard")):
        policy = LocalPolicy.from_pretrained("smollm2", thinking=True, max_batch=episodes)
        envs = trip_envs(episodes, context=policy_name)
        try:
            # Distinct tasks: with scripted tool turns, same-task episodes would collapse into one
            # prompt under discard (no reasoning left to differ) and share all of it.
            traces = asyncio.run(rollouts(policy, envs, turns, params, reasoning=True))
        finally:
            for env in envs:
                env.close()
            asyncio.run(policy.aclose())
        recomputed = [
            sum(t.usage.prompt_tokens - t.usage.cached_prompt_tokens for t in tr.turns)
            for tr in traces
        ]
        out[f"{key}_prefill_tokens"] = sum(recomputed) / len(recomputed)
        out[f"{key}_prompt_tokens"] = sum(
            t.usage.prompt_tokens for tr in traces for t in tr.turns
        ) / len(traces)
    out["retention_prefill_saving"] = (
        out["discard_prefill_tokens"] / out["retention_prefill_tokens"]
    )
    return out


def run(quick: bool = False) -> BenchResult:
    metrics: dict[str, float] = {}
    notes: dict[str, str] = {}
    metrics.update(kv_reuse(quick))
    notes["kv_reuse_tokens_per_s"] = "local engine, cross-turn KV reuse, batched episodes"
    notes["reprefill_tokens_per_s"] = (
        "model.generate over the whole history each turn, same prompts/lengths"
    )
    metrics.update(retention(quick))
    notes["retention_prefill_tokens"] = "prompt tokens recomputed per episode, thinking retention"
    notes["discard_prefill_tokens"] = "same, R1-style discard of reasoning"
    from envgym.benchmarks.rollout_vllm import vllm_metrics

    vllm, vllm_notes = vllm_metrics(quick)
    metrics.update(vllm)
    notes.update(vllm_notes)
    units = {k: "tokens/s" for k in metrics if k.endswith("per_s")}
    units.update({k: "tokens" for k in metrics if k.endswith("_tokens")})
    units.update({k: "ratio" for k in metrics if k not in units})
    return BenchResult("rollout", metrics, units, notes)
