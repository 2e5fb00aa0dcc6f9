"""Non-model agents: a scripted agent that replays the gold solution, and a random agent.

They drive the demo, the soak benchmark and the tests; both only produce actions through the
public env contract.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from envgym.core import Action, Env, Observation


class Agent(Protocol):
    def act(self, obs: Observation) -> Action: ...


def _call(i: int, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


@dataclass
class ScriptedAgent:
    """Replays a fixed list of tool calls, one per turn (so an episode is genuinely multi-turn)."""

    calls: list[tuple[str, dict[str, Any]]]
    _next: int = 0

    def act(self, obs: Observation) -> Action:
        if self._next >= len(self.calls):
            return {"role": "assistant", "content": "I have nothing more to do."}
        name, args = self.calls[self._next]
        self._next += 1
        return {"role": "assistant", "content": "", "tool_calls": [_call(self._next, name, args)]}


@dataclass
class RandomAgent:
    """Random tool use with plausible and malformed actions; submits junk eventually.

    Strings seen in earlier observations are reused as arguments, so some calls succeed.
    """

    rng: random.Random = field(default_factory=random.Random)
    submit_probability: float = 0.1
    _n: int = 0

    def act(self, obs: Observation) -> Action:
        self._n += 1
        tools = [t["function"] for t in obs["tools"]]
        seen = _strings(obs["messages"][-3:]) or ["Hangzhou"]
        roll = self.rng.random()
        if roll < 0.05:
            return "<tool_call>{not json"  # raw text, malformed
        if roll < 0.10:
            return {"role": "assistant", "content": "Let me think about it."}
        if roll < 0.15:
            return {"role": "assistant", "tool_calls": [_call(self._n, "no_such_tool", {})]}
        if roll < 0.20:
            return {
                "role": "assistant",
                "tool_calls": [_call(self._n, tools[0]["name"], "{bad json")],
            }
        tool = self.rng.choice(tools)
        if roll > 1 - self.submit_probability:
            submit = [t for t in tools if t["name"].startswith("submit")]
            tool = submit[0] if submit else tool
        args = {
            name: self._value(prop, seen)
            for name, prop in tool["parameters"].get("properties", {}).items()
            if self.rng.random() < 0.9  # sometimes leave one out
        }
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call(self._n, tool["name"], args)],
        }

    def _value(self, prop: dict[str, Any], seen: list[str]) -> Any:
        kind = prop.get("type")
        if kind == "integer":
            return self.rng.randint(-2, 10)
        if kind == "number":
            return self.rng.uniform(0, 1000)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "array":
            return self.rng.sample(seen, k=min(len(seen), 2))
        return self.rng.choice(seen)


def _strings(messages: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str):
            continue
        try:
            data = json.loads(content)
        except json.JSONDecodeError:
            continue
        items = (
            data
            if isinstance(data, list)
            else list(data.values())
            if isinstance(data, dict)
            else []
        )
        out.extend(x for x in items if isinstance(x, str))
    return out[:50]


@dataclass(frozen=True)
class EpisodeSummary:
    task_id: str
    reward: float
    terminated: bool
    truncated: bool
    turns: int
    tool_calls: int
    errors: dict[str, int]


def run_episode(
    env: Env, agent: Agent, *, seed: int | None = None, task: str | int | None = None
) -> EpisodeSummary:
    """Play one episode to its end (the env's budgets bound it)."""
    options = {"task": task} if task is not None else None
    obs, info = env.reset(seed=seed, options=options)
    task_id = info.get("task_id", "")
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        if terminated or truncated:
            return EpisodeSummary(
                task_id=task_id,
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                turns=info["turns"],
                tool_calls=info["tool_calls"],
                errors=dict(Counter(info["errors"])),
            )
