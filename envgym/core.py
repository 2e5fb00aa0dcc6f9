"""The environment contract: a multi-turn, tool-using ``gymnasium.Env``.

Observations are chat transcripts, actions are assistant turns::

    obs = {"messages": [...], "tools": [...]}   # OpenAI chat messages + function schemas
    action = {"role": "assistant", "content": "...", "reasoning_content": "...",
              "tool_calls": [{"id": "c1", "type": "function",
                              "function": {"name": "get_all_cities", "arguments": "{}"}}]}
    # ... or raw model text, which the env's tool-call parser turns into such a message.

Agent mistakes (bad JSON, unknown tools, wrong arguments, tools that raise) never raise: they
come back as ``tool`` (or ``user``) messages the agent can read, and the episode goes on.

Observations are read-only views: the message dicts are shared with the env's history (copying
the whole transcript on every step would cost more than a typical tool call), so copy a
message before changing it.
"""

from __future__ import annotations

import abc
from typing import Any, TypeAlias

import gymnasium as gym

Message: TypeAlias = dict[str, Any]
Observation: TypeAlias = dict[str, list[dict[str, Any]]]
Action: TypeAlias = dict[str, Any] | str
#: What ``Env.step`` returns (gymnasium's five-tuple).
StepResult: TypeAlias = tuple[Observation, float, bool, bool, dict[str, Any]]

#: Keys every ``info`` dict carries (DESIGN.md contract).
INFO_KEYS = ("reward_components", "tool_calls", "errors")


class ChatSpace(gym.Space[Observation]):
    """Observation space: ``{"messages": [chat message, ...], "tools": [function schema, ...]}``."""

    def __init__(self) -> None:
        super().__init__(shape=None, dtype=None)

    # Equal by kind: a vector env compares each worker's (unpickled) space with its own copy.
    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self).__qualname__)

    def __repr__(self) -> str:
        return "ChatSpace(messages=[chat message: system|user|assistant|tool], tools=[function schema])"

    def contains(self, x: Any) -> bool:
        if not isinstance(x, dict) or set(x) != {"messages", "tools"}:
            return False
        messages, tools = x["messages"], x["tools"]
        return (
            isinstance(messages, list)
            and all(isinstance(m, dict) and m.get("role") in _ROLES for m in messages)
            and isinstance(tools, list)
            and all(isinstance(t, dict) and t.get("type") == "function" for t in tools)
        )

    def sample(self, mask: Any = None, probability: Any = None) -> Observation:
        return {"messages": [{"role": "user", "content": ""}], "tools": []}


class AssistantSpace(gym.Space[Action]):
    """Action space: an assistant message dict or raw model text."""

    def __init__(self) -> None:
        super().__init__(shape=None, dtype=None)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self).__qualname__)

    def __repr__(self) -> str:
        return "AssistantSpace(assistant message dict | raw model text)"

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) or (
            isinstance(x, dict) and x.get("role", "assistant") == "assistant"
        )

    def sample(self, mask: Any = None, probability: Any = None) -> Action:
        return {"role": "assistant", "content": ""}


_ROLES = frozenset({"system", "user", "assistant", "tool"})


class Env(gym.Env[Observation, Action], abc.ABC):
    """A multi-turn tool-use environment.

    Subclasses implement :meth:`reset` and :meth:`step`.  ``info`` always carries
    ``reward_components`` (name → value), ``tool_calls`` (count this episode) and ``errors``
    (agent-mistake counts by kind); the final step adds the verifier's ``report``, whether the
    episode terminated or was truncated (an episode cut before any submission gets a failed
    report without checks, naming its ``truncated_by``).  The chat envs' ``step`` is one
    skeleton (envgym/step.py) they supply hooks to.
    """

    # No render modes: the observation *is* the transcript (gymnasium's checker builds one env
    # per advertised mode and renders it, so advertising a mode is a promise).
    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = ChatSpace()
    action_space = AssistantSpace()

    @abc.abstractmethod
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode: fresh state, the task's prompt.  ``options["task"]`` picks a task.

        Returns:
            observation: the initial messages (system, user) and the tool schemas.
            info: episode metadata (task id, difficulty, ...) plus the contract keys.

        Subclasses call ``super().reset(seed=seed)`` first and draw everything random from
        ``self.np_random``, so the same seed gives the same task and observation.  This body
        is what that call runs: gymnasium's seeding (``abc`` does not stop ``super()`` from
        reaching an abstract method, and without this body the call would skip
        ``gym.Env.reset``, leaving ``np_random`` unseeded).
        """
        return super().reset(seed=seed, options=options)

    @abc.abstractmethod
    def step(self, action: Action) -> StepResult:
        """Apply one assistant turn: record it, run its tool calls in order.

        Returns:
            observation: the transcript to show the agent next (after the context policy).
            reward: the verifier's reward when the episode ends, else 0.0.
            terminated: the agent submitted (or gave its final answer) and it was verified.
            truncated: a budget ran out (turns, tool calls, wall-clock, context).
            info: the contract keys, plus ``report`` when the episode ended (terminated or
                truncated) and ``truncated_by`` (the budgets used up) when truncated.
        """
