"""One search agent's turn loop: a policy calls ``search``/``open``/``find`` until it answers.

Shared by the three model roles of the search-QA pipeline (question construction, answering,
verification — DeepSeek-V3.2 §3.2.3 "Search Agent").  Any :class:`envgym.policy.Policy` works:
an OpenAI-compatible server (native tool calls come back in ``turn.message``) or a local model
whose text is parsed with the hermes parser.  Nothing a model writes raises: malformed calls,
unknown tools and :class:`SearchError`s become tool messages it reads, and the loop ends after
``max_tool_turns`` rounds of calls with a last request to answer.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from envgym.actions import normalize_action
from envgym.messages import tool_message
from envgym.parsers import get_parser
from envgym.policy import Policy, SamplingParams
from envgym.tools.search import SearchError, SearchTools

TOOL_SPECS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "search", "description": "Search every Debian package; ranked results with ids (package names).",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
                       "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "open", "description": "Read page `page` (from 1) of the document with this id.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}, "page": {"type": "integer"}},
                       "required": ["id"]}}},
    {"type": "function", "function": {
        "name": "find", "description": "Lines of document `id` matching a regex (case-insensitive).",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}, "pattern": {"type": "string"}},
                       "required": ["id", "pattern"]}}},
]  # fmt: skip
ANSWER_NOW = (
    "You have used all your tool calls. Reply now with your final answer, without calling a tool."
)
_MAX_RESULT_CHARS = (
    4000  # a tool result longer than this is cut (the model's context is the budget)
)


@dataclass
class AgentRun:
    """What one agent did: its final text, the documents it opened, and what the model cost."""

    text: str = ""
    turns: int = 0
    tool_calls: int = 0
    opened: list[str] = field(default_factory=list)  # document ids open/find succeeded on, in order
    model_s: float = 0.0  # wall time inside policy.act
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def cost(self) -> dict[str, Any]:
        return {"turns": self.turns, "tool_calls": self.tool_calls, "model_s": round(self.model_s, 4),
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}  # fmt: skip


def call_tool(tools: SearchTools, name: str, arguments: Any) -> tuple[bool, Any]:
    """Run one call; ``(ok, result or error text)``.  Never raises on the agent's input."""
    if name not in ("search", "open", "find"):
        return False, f"unknown tool {name!r}; the tools are search, open and find"
    if not isinstance(arguments, dict):
        return False, f"{name}: the arguments are not a JSON object"
    try:
        return True, getattr(tools, name)(**arguments)
    except SearchError as err:
        return False, str(err)
    except TypeError as err:  # unexpected or missing argument names
        return False, f"{name}: bad arguments ({err})"


async def run_agent(
    policy: Policy,
    tools: SearchTools,
    messages: list[dict[str, Any]],
    *,
    session: str,
    params: SamplingParams,
    max_tool_turns: int,
    use_tools: bool = True,
) -> AgentRun:
    """Let ``policy`` work on ``messages`` (mutated: the transcript) and return its run."""
    parser = get_parser("hermes")
    run = AgentRun()
    specs = TOOL_SPECS if use_tools else []
    try:
        for round_no in range(max_tool_turns + 1):
            last = round_no == max_tool_turns
            if last and use_tools and round_no:
                messages.append({"role": "user", "content": ANSWER_NOW})
            started = time.perf_counter()
            turn = await policy.act(session, messages, specs, params)
            run.model_s += time.perf_counter() - started
            run.turns += 1
            run.prompt_tokens += turn.usage.prompt_tokens
            run.completion_tokens += turn.usage.completion_tokens or len(turn.token_ids)
            action = (
                normalize_action(turn.message)
                if turn.message is not None
                else parser.parse(turn.text)
            )
            message = dict(action.message)
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                run.text = str(message.get("content") or turn.text or "")
                return run
            runnable = {c.id: c for c in action.tool_calls}
            problems = {p.call_id: p.message for p in action.problems if p.call_id}
            for call in calls:
                call_id = call.get("id", "")
                name = (call.get("function") or {}).get("name", "")
                if last or not use_tools:
                    result: Any = "not run: answer now without tools"
                elif call_id in runnable:
                    run.tool_calls += 1
                    arguments = runnable[call_id].arguments
                    ok, result = call_tool(tools, runnable[call_id].name, arguments)
                    doc = arguments.get("id") if isinstance(arguments, dict) else None
                    if (
                        ok
                        and name in ("open", "find")
                        and isinstance(doc, str)
                        and doc not in run.opened
                    ):
                        run.opened.append(doc)
                else:
                    result = problems.get(call_id, "the call could not be read")
                text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
                messages.append(tool_message(call_id, name, text[:_MAX_RESULT_CHARS]))
            run.text = str(message.get("content") or "")
        return run
    finally:
        await policy.end_session(session)
