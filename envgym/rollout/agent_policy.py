"""The non-model agents of ``envgym.agents`` behind the :class:`~envgym.policy.Policy` contract.

They are baselines for ``envgym eval --model gold`` / ``--model random`` (the gold agent's
pass@k is the ceiling a bundle allows, the random agent's its floor) and they drive the soak
benchmark.  They sample no tokens, so their episode records have no segments.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envgym.agents import Agent, RandomAgent, ScriptedAgent
from envgym.policy import SamplingParams, Turn

from .episode import parse_session


class AgentPolicy:
    """Drives one agent per session; ``make_agent(task_id, sample)`` may block (runs in a thread)."""

    version = 0

    def __init__(
        self,
        name: str,
        make_agent: Callable[[str, int], Agent],
        *,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self._make_agent = make_agent
        self._agents: dict[str, Agent] = {}
        self._on_close = on_close

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        agent = self._agents.get(session)
        if agent is None:
            task_id, sample = parse_session(session)
            agent = await asyncio.to_thread(self._make_agent, task_id, sample)
            self._agents[session] = agent
        action = agent.act({"messages": messages, "tools": tools})
        if isinstance(action, str):
            return Turn(text=action)
        return Turn(text=str(action.get("content") or ""), message=dict(action))

    async def end_session(self, session: str) -> None:
        self._agents.pop(session, None)

    async def aclose(self) -> None:
        self._agents.clear()
        if self._on_close is not None:
            await asyncio.to_thread(self._on_close)

    @classmethod
    def random(cls, *, seed: int = 0, submit_probability: float = 0.1) -> AgentPolicy:
        """The random agent, seeded per (task, sample) so reruns replay the same episodes."""

        def make(task_id: str, sample: int) -> Agent:
            digest = hashlib.sha256(f"{seed}/{task_id}/{sample}".encode()).digest()
            rng = random.Random(int.from_bytes(digest[:8], "big"))
            return RandomAgent(rng=rng, submit_probability=submit_probability)

        return cls(f"random-agent(seed={seed})", make)

    @classmethod
    def gold(
        cls,
        bundle_dir: Path | str,
        *,
        sandbox: str = "bwrap",
        env_factory: Callable[[], Any] | None = None,
    ) -> AgentPolicy:
        """Replays each task's gold solution one tool call per turn.

        The gold calls come from running the bundle's solution in a private env of the same
        sandbox backend (bundle code never runs on the host), once per task.  ``env_factory``
        builds that env as the evaluation builds its own (a family whose tools live outside the
        bundle — the MCP suite's servers — needs its own env class to replay its gold); without
        one, a plain ``BundleEnv`` of ``bundle_dir``.
        """
        from envgym.bundle_env import BundleEnv

        lock = threading.Lock()
        calls: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        env: list[BundleEnv] = []

        def make(task_id: str, sample: int) -> Agent:
            with lock:
                if task_id not in calls:
                    if not env:
                        made = (
                            env_factory()
                            if env_factory is not None
                            else BundleEnv(bundle_dir, sandbox=sandbox)
                        )
                        if not callable(getattr(made, "gold_calls", None)):
                            made.close()
                            raise TypeError(
                                f"{type(made).__name__} has no gold_calls(): --model gold "
                                "cannot replay this environment's tasks"
                            )
                        env.append(made)
                    env[0].reset(options={"task": task_id})
                    calls[task_id] = env[0].gold_calls()
                return ScriptedAgent(list(calls[task_id]))

        def close() -> None:
            with lock:
                while env:
                    env.pop().close()

        return cls("gold-agent", make, on_close=close)

    @classmethod
    def mixed(cls, bundle_dir: Path | str, *, sandbox: str = "bwrap", seed: int = 0) -> AgentPolicy:
        """Even samples replay the gold solution, odd samples act randomly (the soak's load)."""
        gold, rand = cls.gold(bundle_dir, sandbox=sandbox), cls.random(seed=seed)

        def make(task_id: str, sample: int) -> Agent:
            return (gold if sample % 2 == 0 else rand)._make_agent(task_id, sample)

        def close() -> None:
            if gold._on_close is not None:
                gold._on_close()

        return cls("gold+random-agents", make, on_close=close)
