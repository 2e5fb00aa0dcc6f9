"""τ²'s user simulator driven by any envgym model, and the replay of recorded user turns.

τ² builds the user's prompt (its simulation guidelines + the task's scenario, the conversation
with roles flipped: envgym/envs/tau2/session.py ``user_prompt``); here an envgym :class:`Policy` —
the embedded model, an OpenAI-compatible server (``http://…[#model]``) or a local HF directory,
exactly what ``--model`` accepts — writes the user's next turn.  Every call gets an explicit
seed derived from the episode seed and the turn index, and the env records every user turn, so
:class:`ReplayUser` can play an episode back exactly without the model.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import replace
from typing import Any, Protocol

from envgym.actions import normalize_action
from envgym.parsers import get_parser
from envgym.policy import Policy, SamplingParams

DEFAULT_USER_PARAMS = SamplingParams(temperature=0.0, max_tokens=128)  # τ²'s user turns are short


class UserTurnError(RuntimeError):
    """The user simulator could not produce a turn (model failure, replay exhausted/diverged)."""


class UserModel(Protocol):
    def reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int
    ) -> dict[str, Any]:
        """The user's next turn: ``{"content": str, "calls": [{"id", "name", "arguments"}]}``."""
        ...

    def end(self) -> None:
        """The episode is over (free per-episode state)."""
        ...


def user_seed(episode_seed: int, turn: int) -> int:
    """The seed of user turn ``turn``: distinct per turn, fixed by the episode's seed."""
    return (episode_seed * 1_000_003 + turn * 7919 + 17) % (2**31 - 1)


class _Loop:
    """One background event loop per process for the async Policy API (env steps are sync)."""

    _loop: asyncio.AbstractEventLoop | None = None
    _lock = threading.Lock()

    @classmethod
    def run(cls, coro: Any) -> Any:
        with cls._lock:
            if cls._loop is None:
                cls._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=cls._loop.run_forever, name="tau2-user", daemon=True
                ).start()
        return asyncio.run_coroutine_threadsafe(coro, cls._loop).result()


_policies: dict[str, Policy] = {}
_policies_lock = threading.Lock()


def load_user_policy(spec: str) -> Policy:
    """The policy for ``spec`` (``--model`` syntax), loaded once per process and shared."""
    with _policies_lock:
        if spec not in _policies:
            from envgym.evaluate.models import ModelSpecError, load_language_model

            try:
                _policies[spec] = load_language_model(spec, "play τ²'s user")
            except ModelSpecError as exc:
                raise UserTurnError(str(exc)) from None
        return _policies[spec]


class PolicyUser:
    """τ²'s user played by an envgym model; text replies are read with a tool-call parser."""

    def __init__(self, model: str | Policy = "smollm2", params: SamplingParams = DEFAULT_USER_PARAMS,
                 parser: str = "hermes") -> None:  # fmt: skip
        self.policy = load_user_policy(model) if isinstance(model, str) else model
        self.params = params
        self.parser = get_parser(parser)
        self.session = f"tau2-user-{uuid.uuid4().hex}"

    def reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int
    ) -> dict[str, Any]:
        params = replace(self.params, seed=seed)
        try:
            turn = _Loop.run(self.policy.act(self.session, messages, tools, params))
        except Exception as exc:  # noqa: BLE001 - any backend failure is the user's, named
            raise UserTurnError(f"the user model failed: {type(exc).__name__}: {exc}") from exc
        # native tool calls (arguments as JSON text) or raw text: read both the way the env reads
        # the agent's turns; calls whose arguments do not decode are dropped, as τ² cannot run them
        parsed = (
            normalize_action(turn.message)
            if turn.message is not None
            else self.parser.parse(turn.text)
        )
        content = parsed.content or ""
        calls = [
            {"id": c.id, "name": c.name, "arguments": c.arguments}
            for c in parsed.tool_calls
            if c.parsed
        ]
        return {"content": content, "calls": calls}

    def end(self) -> None:
        _Loop.run(self.policy.end_session(self.session))
        self.session = f"tau2-user-{uuid.uuid4().hex}"


class ReplayUser:
    """Plays back recorded user turns in order; asking for more than were recorded is an error."""

    def __init__(self, turns: list[dict[str, Any]]) -> None:
        self.turns = [dict(t) for t in turns]
        self.index = 0

    def reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int
    ) -> dict[str, Any]:
        if self.index >= len(self.turns):
            raise UserTurnError(f"replay diverged: the episode asks for user turn {self.index + 1}, "
                                f"but only {len(self.turns)} were recorded")  # fmt: skip
        turn = self.turns[self.index]
        if turn.get("seed") not in (None, seed):
            raise UserTurnError(
                f"replay diverged at user turn {self.index + 1}: seed {seed} != recorded {turn['seed']}"
            )
        self.index += 1
        return {"content": turn["content"], "calls": turn["calls"]}

    def end(self) -> None:
        pass
