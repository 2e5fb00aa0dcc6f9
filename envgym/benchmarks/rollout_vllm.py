"""Part (b) of ``envgym bench rollout``: envgym's vLLM rollouts vs vLLM's raw throughput.

32 trip-planning episodes run concurrently through :class:`envgym.models.vllm_policy.VLLMPolicy`
(chat rendered and tokenized by envgym, token-id prompts, real env steps with scripted gold
tool calls).  Then the server's prefix cache is reset and the same prompt ids are replayed
straight at ``/v1/completions`` by 32 concurrent streams, each request with the length envgym's
run sampled (``min_tokens = max_tokens``, ``ignore_eos``): vLLM's raw throughput on the same
prompts and lengths, with none of envgym's work in between.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from envgym.benchmarks.rollout_episodes import rollouts, trip_envs
from envgym.models.vllm_policy import VLLMPolicy
from envgym.models.vllm_server import DEFAULT_VENV, VLLMServer
from envgym.policy import SamplingParams

EPISODES = 32


def vllm_metrics(quick: bool) -> tuple[dict[str, float], dict[str, str]]:
    keys = ("vllm_envgym_tokens_per_s", "vllm_raw_tokens_per_s")
    if quick:
        return {}, {
            k: "absent: not run with --quick (the vLLM server takes ~80 s to start)" for k in keys
        }
    if not (DEFAULT_VENV / "bin" / "python").is_file():
        return {}, {k: "absent: no .venv-vllm (run scripts/vllm_setup.sh)" for k in keys}
    try:
        with VLLMServer() as server:
            envgym_tps, raw_tps = asyncio.run(_compare(server))
    except Exception as err:  # noqa: BLE001 - reported as absent, never as a number
        return {}, {
            k: f"absent: the vLLM run failed ({type(err).__name__}: {str(err)[:200]})" for k in keys
        }
    return (
        {keys[0]: envgym_tps, keys[1]: raw_tps, "vllm_envgym_vs_raw": envgym_tps / raw_tps},
        {
            keys[0]: f"{EPISODES} concurrent episodes through envgym",
            keys[1]: "same prompt ids and lengths replayed directly",
        },
    )


async def _compare(server: VLLMServer) -> tuple[float, float]:
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=32, seed=2)
    policy = VLLMPolicy(server.base_url, server.served_name)
    envs = trip_envs(EPISODES)
    try:
        await rollouts(policy, envs[:2], 1, params)  # warm the server's compiled paths
        await policy.reset_prefix_cache()
        started = time.perf_counter()
        traces = await rollouts(policy, envs, 3, params)
        envgym_s = time.perf_counter() - started
        await policy.reset_prefix_cache()
    finally:
        for env in envs:
            env.close()
        await policy.aclose()
    tokens = sum(len(t.token_ids) for tr in traces for t in tr.turns)

    async with httpx.AsyncClient(base_url=server.base_url, timeout=600) as client:

        async def replay(turns: list) -> None:
            for turn in turns:
                n = len(turn.token_ids)
                body = {
                    "model": server.served_name,
                    "prompt": turn.prompt_ids,
                    "max_tokens": n,
                    "min_tokens": n,
                    "ignore_eos": True,
                    "temperature": params.temperature,
                    "top_p": params.top_p,
                    "logprobs": 0,
                }
                (await client.post("/completions", json=body)).raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(replay(tr.turns) for tr in traces))
        raw_s = time.perf_counter() - started
    return tokens / envgym_s, tokens / raw_s
