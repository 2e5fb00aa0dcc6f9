"""One env episode driven one tool call at a time: what an MCP client sees of an envgym env.

An external agent does not send assistant turns; it calls tools.  :class:`EpisodeDriver` turns
each MCP ``tools/call`` into one assistant turn holding that single call, steps the env, and
answers with the env's own reply (the ``tool`` message and any ``envgym`` notes after it).
Two control tools sit beside the env's tools:

* ``reset(task=None, seed=None)`` starts an episode and answers with the task's prompt;
* ``submit(arguments=None, content=None)`` ends it: ``arguments`` are the task's submit-tool
  arguments (tasks with a submit tool), ``content`` the final answer text (tasks without one).
  Calling the env's submit tool directly works too.

Every reply says whether it is an error: an agent mistake the env counted in ``info["errors"]``
(bad arguments, unknown tool, a tool that raised), or a control error (no episode yet, the
episode is over).  Nothing an MCP client sends raises here.  Blocking: run it off the event loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envgym.core import Env

RESET, SUBMIT = "reset", "submit"

RESET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": ["string", "integer", "null"],
            "description": "task id or index (default: seeded pick)",
        },
        "seed": {
            "type": ["integer", "null"],
            "description": "seed of the episode (the same seed gives the same task); "
            "a string of decimal digits is read as that integer",
        },
    },
    "additionalProperties": False,
}
SUBMIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "arguments": {
            "type": ["object", "null"],
            "description": "the task's submit-tool arguments",
        },
        "content": {
            "type": ["string", "null"],
            "description": "the final answer (tasks without a submit tool)",
        },
    },
    "additionalProperties": False,
}


SEED_LIMIT = 2**64  # seeds are 0 <= seed < 2**64 (numpy takes any non-negative integer)
_DECIMAL = re.compile(r"[0-9]{1,20}")  # ASCII digits only: int() would also take "٣", "1_0", " 7"


def reset_seed(value: Any) -> int | None:
    """The episode seed an MCP client sent: an integer, null, or a decimal integer string.

    Some clients (MCP Inspector's CLI) send every argument as a string, even one typed
    ``["integer", "null"]``; a string of decimal digits is read as that integer.  Anything
    else raises ``ValueError`` naming what was wrong.
    """
    if value is None:
        return None
    if isinstance(value, bool):  # bool is an int subclass; true is not a seed
        raise ValueError("reset `seed` must be an integer, not a boolean")
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            shown = value if len(value) <= 40 else value[:40] + "..."
            raise ValueError(
                f"reset `seed` must be an integer or a string of decimal digits, not {shown!r}"
            )
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"reset `seed` must be an integer, not {type(value).__name__}")
    if not 0 <= value < SEED_LIMIT:
        raise ValueError(f"reset `seed` must be between 0 and 2**64 - 1, not {value}")
    return value


@dataclass(frozen=True)
class Reply:
    """The answer to one call: text blocks for the agent, structured data for programs."""

    texts: list[str]
    is_error: bool = False
    data: dict[str, Any] = field(default_factory=dict)


def control_tools() -> list[dict[str, Any]]:
    """The OpenAI function schemas of ``reset`` and ``submit``."""
    return [
        _function(
            RESET, "Start a new episode (a fresh state) and return the task's prompt.", RESET_SCHEMA
        ),
        _function(
            SUBMIT, "Submit the final answer; the episode is verified and ends.", SUBMIT_SCHEMA
        ),
    ]


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


class EpisodeDriver:
    """One env, one episode at a time.  Not thread-safe: one call at a time."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self._started = False
        self._done = False
        self._outcome: dict[str, Any] = {}
        self._calls = 0
        self._last_errors: dict[str, int] = {}

    @classmethod
    def build(cls, factory: Callable[[], Env]) -> EpisodeDriver:
        return cls(factory())

    def call(self, name: str, arguments: Any) -> Reply:
        """Answer one MCP tool call; never raises on what the client sent."""
        try:
            if name == RESET:
                return self._reset(arguments)
            if not self._started:
                return Reply(
                    [f"Error: no episode yet: call `{RESET}` first (it returns the task)."], True
                )
            if self._done:
                return Reply(
                    [
                        f"Error: the episode is over ({self._summary()}); call `{RESET}` to start a new one."
                    ],
                    True,
                    dict(self._outcome),
                )
            if name == SUBMIT:
                return self._submit(arguments)
            return self._step_call(name, arguments)
        except Exception as err:  # noqa: BLE001 - a server must answer, never crash
            return Reply([f"Error: {name} could not be run ({type(err).__name__}: {err})"], True)

    def close(self) -> None:
        self.env.close()

    # -- control tools ----------------------------------------------------------------------
    def _reset(self, arguments: Any) -> Reply:
        args = arguments if isinstance(arguments, dict) else {}
        unknown = set(args) - {"task", "seed"}
        task = args.get("task")
        if unknown or isinstance(task, bool) or not isinstance(task, (str, int, type(None))):
            return Reply(
                ["Error: reset takes optional `task` (id or index) and `seed` (integer)."], True
            )
        try:
            seed = reset_seed(args.get("seed"))
        except ValueError as err:
            return Reply([f"Error: {err}"], True)
        try:
            obs, info = self.env.reset(
                seed=seed, options={"task": task} if task is not None else None
            )
        except (KeyError, IndexError, ValueError) as err:  # an unknown task
            return Reply([f"Error: cannot reset: {err}"], True)
        self._started, self._done, self._outcome, self._last_errors = True, False, {}, {}
        messages = obs["messages"]
        prompt = next(
            (m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), ""
        )
        system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
        data = {
            "task_id": info.get("task_id"),
            "difficulty": info.get("difficulty"),
            "prompt": prompt,
            "system": system,
            "submit_tool": self._submit_tool(),
        }
        return Reply([prompt], False, data)

    def _submit(self, arguments: Any) -> Reply:
        args = arguments if isinstance(arguments, dict) else {}
        tool = self._submit_tool()
        if tool is not None:
            payload = args.get("arguments")
            if not isinstance(payload, dict):
                return Reply(
                    [
                        f"Error: this task is submitted with `{tool}`: pass its arguments as "
                        "`arguments` (an object)."
                    ],
                    True,
                )
            return self._step_call(tool, payload)
        content = args.get("content")
        if not isinstance(content, str):
            return Reply(
                ["Error: this task is answered in text: pass it as `content` (a string)."], True
            )
        return self._step({"role": "assistant", "content": content}, call_id=None)

    def _submit_tool(self) -> str | None:
        task = getattr(self.env, "task", None)
        return getattr(task, "submit_tool", None)

    # -- env tools ----------------------------------------------------------------------------
    def _step_call(self, name: str, arguments: Any) -> Reply:
        self._calls += 1
        call_id = f"mcp{self._calls}"
        text = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
        action = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
            ],
        }
        return self._step(action, call_id=call_id)

    def _step(self, action: dict[str, Any], *, call_id: str | None) -> Reply:
        before = sum(self._last_errors.values())
        obs, reward, terminated, truncated, info = self.env.step(action)
        errors = sum((info.get("errors") or {}).values())
        texts = [m.get("content") or "" for m in self._replies(obs, call_id)]
        data: dict[str, Any] = {}
        if terminated or truncated:
            self._done = True
            self._outcome = data = {
                "reward": reward,
                "terminated": terminated,
                "truncated": truncated,
                "report": info.get("report"),
                "truncated_by": info.get("truncated_by"),
            }
            texts.append(f"Episode over: {self._summary()}.")
        self._last_errors = info.get("errors") or {}
        return Reply(texts or [""], errors > before, data)

    def _replies(self, obs: dict[str, Any], call_id: str | None) -> list[dict[str, Any]]:
        """The messages after this call's assistant turn (full history when the env keeps one)."""
        messages = getattr(self.env, "history", None) or obs["messages"]
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            if m.get("role") != "assistant":
                continue
            ids = [c.get("id") for c in m.get("tool_calls") or ()]
            if call_id is None or call_id in ids:
                return [r for r in messages[i + 1 :] if r.get("role") in ("tool", "user")]
        return []

    def _summary(self) -> str:
        o = self._outcome
        how = "truncated: " + str(o.get("truncated_by")) if o.get("truncated") else "verified"
        return f"reward {o.get('reward')}, {how}"
