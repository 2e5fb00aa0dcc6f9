"""The scripted trip-planning episodes ``envgym bench rollout`` samples, for both of its parts.

Generation is the policy's; the tool results are scripted: after each sampled turn the env runs
the task's next gold-solution call.  Shared by ``rollout.py`` (local engine) and
``rollout_vllm.py`` (vLLM server), which import this module and not each other.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from typing import Any

from envgym.bundle_env import BundleEnv
from envgym.parsers import get_parser
from envgym.policy import Policy, SamplingParams, Turn


@dataclass
class Trace:
    """What one episode asked for and produced, turn by turn."""

    prompts: list[list[dict[str, Any]]] = field(default_factory=list)  # messages per turn
    turns: list[Turn] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)


def scripted_action(
    turn: Turn, call: tuple[str, dict[str, Any]], step: int, reasoning: bool
) -> dict[str, Any]:
    name, args = call
    tool_call = {
        "id": f"call_{step}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    if not reasoning:
        return {"role": "assistant", "content": turn.text, "tool_calls": [tool_call]}
    parsed = get_parser("hermes").parse(turn.text)
    message = {"role": "assistant", "content": parsed.content or "", "tool_calls": [tool_call]}
    if parsed.reasoning_content:
        message["reasoning_content"] = parsed.reasoning_content
    return message


async def episode(
    policy: Policy,
    env: BundleEnv,
    task: int,
    turns: int,
    params: SamplingParams,
    index: int,
    reasoning: bool = False,
) -> Trace:
    session = f"ep{index}"
    if params.seed is not None:  # distinct episodes, even when they share a task (a GRPO group)
        params = replace(params, seed=params.seed + index)
    obs, _ = env.reset(options={"task": task})
    calls = env.gold_calls()
    trace = Trace(tools=obs["tools"])
    for step in range(turns):
        trace.prompts.append(obs["messages"])
        turn = await policy.act(session, obs["messages"], obs["tools"], params)
        trace.turns.append(turn)
        obs, *_ = env.step(scripted_action(turn, calls[step % len(calls)], step, reasoning))
    await policy.end_session(session)
    return trace


def trip_envs(n: int, **kwargs: Any) -> list[BundleEnv]:
    from envgym.envs.trip_planning.build import default_bundle_dir

    return [
        BundleEnv(default_bundle_dir(), sandbox="inprocess", max_turns=10_000, **kwargs)
        for _ in range(n)
    ]


async def rollouts(
    policy: Policy, envs: list[BundleEnv], turns: int, params: SamplingParams, **kw: Any
) -> list[Trace]:
    return list(
        await asyncio.gather(
            *(
                episode(policy, env, i % len(env.bundle.tasks), turns, params, i, **kw)
                for i, env in enumerate(envs)
            )
        )
    )
