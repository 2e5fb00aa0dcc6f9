"""The LLM synthesis agent (DeepSeek-V3.2 §3.2.3, "General Agent"), for any category.

Given a category, a sandbox with bash and file tools (:mod:`envgym.synth_agents.workbench`) and a
search tool (:mod:`envgym.synth_agents.search`), the agent, one stage after another:

(a) generates (or retrieves) data and stores it in the sandbox database ``db.sqlite``;
(b) writes task-specific tools as typed functions (``tools.py``);
(c) proposes a simple task with a solution function — which may only call tools — and a
    verification function, runs solution → verifier in the sandbox and revises either until
    they agree (:func:`envgym.synth_agents.llm_checks.check_agreement`);
(d) raises the difficulty step by step, updating solution and verifier and adding tools when
    the toolset cannot solve the harder task; the hardest level that still agrees is kept.

Every stage allows ``max_rounds`` replies; each failure goes back to the model in words.  A
model that cannot do a stage (prose instead of code, code that does not parse, a solution that
reads the database, a verifier that accepts anything, tools that hang) ends the job with a
recorded reason — the agent itself never raises for what the model does.  The finished bundle
then goes through the same validation as procedural bundles (envgym.synth_agents.validate).
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shutil
import tempfile
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from envgym.messages import tool_message
from envgym.parsers import get_parser
from envgym.policy import Policy, PolicyError, SamplingParams
from envgym.synth_agents import code_blocks as cb
from envgym.synth_agents import llm_prompts as prompts
from envgym.synth_agents.categories import normalize
from envgym.synth_agents.levels import Level, Levels
from envgym.synth_agents.llm_checks import (
    check_agreement,
    check_tools,
    inspect_data,
    with_submit_tool,
    write_draft,
)
from envgym.synth_agents.pipeline import Job, MakeOutcome
from envgym.synth_agents.search import SearchBackend, default_search
from envgym.synth_agents.workbench import Workbench

T = TypeVar("T")
_SQL_RUNNER = (
    "import sqlite3\ncon = sqlite3.connect('db.sqlite')\ncon.executescript(%s)\ncon.commit()\n"
)
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search reference notes (offline corpus) for facts about a domain.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "keywords"}},
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}


class StageFailed(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class LLMConfig:
    max_rounds: int = 3  # replies per stage (the first try plus revisions)
    max_levels: int = 2  # difficulty raises after the first task
    max_tool_turns: int = 4  # tool calls per reply before the agent asks for the answer
    sandbox: str = "bwrap"
    params: SamplingParams = field(
        default_factory=lambda: SamplingParams(temperature=0.7, max_tokens=1024)
    )
    transcript_chars: int = 1500  # kept per message in the job record
    require_witnesses: bool = True  # per-rule witnesses (docs/CHECK.md) or no task


def category_problem(category: str) -> str | None:
    """Why a category string cannot be synthesized at all (None: let the model try)."""
    text = category or ""
    if not text.strip():
        return "the category is empty"
    if len(text) > 120:
        return f"the category is {len(text)} characters long; name a domain in a few words"
    if any(not ch.isprintable() for ch in text):
        return "the category contains control characters"
    if not re.search(r"[^\W\d_]{3,}", text):
        return f"the category {text!r} has no word to build a domain around"
    return None


class LLMAgent:
    """Synthesizes one bundle per job with ``policy``; ``make`` is safe to call repeatedly."""

    def __init__(
        self,
        category: str,
        policy: Policy,
        *,
        model: str,
        config: LLMConfig = LLMConfig(),
        search: SearchBackend | None = None,
    ) -> None:
        self.category = category.strip()
        self.policy = policy
        self.model = model
        self.config = config
        self.search = search
        self.parser = get_parser("hermes")
        words = normalize(self.category).replace(" ", "-")
        self.slug = "llm-" + (re.sub(r"[^a-z0-9-]", "", words)[:40].strip("-") or "category")
        self.name = f"llm:{model}"
        self._loop = asyncio.new_event_loop()  # one loop for the policy's whole life
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="envgym-llm-agent"
        )
        self._thread.start()

    @classmethod
    def from_model(cls, category: str, model: str, config: LLMConfig = LLMConfig()) -> LLMAgent:
        from envgym.evaluate.models import load_policy, model_ref

        ref = model_ref(model)
        if ref.kind == "agent":
            raise ValueError(f"--model {model!r} is an agent baseline, not a language model")
        return cls(category, load_policy(ref), model=model, config=config)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the agent's loop and return (or raise) its outcome here.

        Every exception is carried back, KeyboardInterrupt included: left to the loop, it would
        stop the loop's thread and leave this caller waiting forever.
        """

        async def carried() -> tuple[bool, Any]:
            try:
                return True, await coro
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                return False, exc

        ok, value = asyncio.run_coroutine_threadsafe(carried(), self._loop).result()
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def close(self) -> None:
        self._run(self.policy.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    # -- one job -----------------------------------------------------------------------------
    def make(self, job: Job, staging: Path) -> MakeOutcome:
        problem = category_problem(self.category)
        if problem is not None:
            return MakeOutcome(False, "category_rejected", problem)
        run = _Run(self, job)
        scratch = Path(tempfile.mkdtemp(prefix="envgym-llm-"))
        try:
            with Workbench(scratch / "work", sandbox=self.config.sandbox) as bench:
                run.bench = bench
                result = run.stages(scratch, staging)
        except StageFailed as failed:
            return MakeOutcome(False, failed.reason, failed.detail, run.info())
        except PolicyError as exc:
            return MakeOutcome(False, "policy_error", str(exc)[:500], run.info())
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return result


class _Run:
    """The state of one job: conversations, drafts, counters."""

    def __init__(self, agent: LLMAgent, job: Job) -> None:
        self.agent = agent
        self.job = job
        self.config = agent.config
        self.bench: Workbench | None = None
        self.turns = self.tool_calls = 0
        self.stage_rounds: dict[str, int] = {}
        self.transcript: list[dict[str, str]] = []
        self.levels_passed = 0
        self.levels_kept: list[int] = []
        self.levels_dropped: list[int] = []  # agreed once, then broken by a later level's tools

    def info(self) -> dict[str, Any]:
        return {
            "model": self.agent.model,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "stage_rounds": self.stage_rounds,
            "levels_passed": self.levels_passed,
            "levels_kept": self.levels_kept,
            "levels_dropped": self.levels_dropped,
            "transcript": self.transcript,
        }

    def stages(self, scratch: Path, staging: Path) -> MakeOutcome:
        assert self.bench is not None
        messages = [
            {"role": "system", "content": prompts.SYSTEM.format(category=self.agent.category)}
        ]
        schema = self._data(messages)
        draft = scratch / "draft"
        db = self.bench.workspace / "db.sqlite"
        provenance = {"agent": self.agent.name, "model": self.agent.model, "seed": self.job.seed}
        meta = {"name": self.job.key, "category": self.agent.category, "provenance": provenance}
        tools = self._tools(messages, schema, draft, db, meta)
        spec_lines = self._tool_lines(draft)
        levels = Levels()
        first, tools = self._task(
            messages,
            prompts.TASK.format(tools=spec_lines, witnesses=self._witness_ask()),
            "task",
            draft,
            db,
            tools,
            meta,
            level=0,
        )
        levels.add(first)
        for level in range(1, self.config.max_levels + 1):
            try:
                harder, new_tools = self._task(
                    messages,
                    prompts.HARDER.format(level=level, witnesses=self._witness_ask()),
                    f"level{level}",
                    draft,
                    db,
                    tools,
                    meta,
                    level=level,
                )
            except StageFailed:
                break  # the levels that agreed so far are the environment's tasks
            if new_tools != tools:  # earlier levels must still agree with the replaced tools
                self.levels_dropped += [
                    x.level for x in levels.kept if self._disagrees(x, draft, db, new_tools, meta)
                ]
                levels.kept = [x for x in levels.kept if x.level not in self.levels_dropped]
                tools = new_tools
            levels.add(harder)
            self.levels_passed = level
        solution, verifier, tasks = levels.merged()
        write_draft(staging, db, tools, solution, verifier, tasks, **meta)
        self.levels_kept = [x.level for x in levels.kept]
        return MakeOutcome(True, info=self.info())

    def _witness_ask(self) -> str:
        return prompts.WITNESSES if self.config.require_witnesses else ""

    def _disagrees(
        self, level: Level, draft: Path, db: Path, tools: str, meta: dict[str, Any]
    ) -> bool:
        write_draft(draft, db, tools, level.solution, level.verifier, [level.task], **meta)
        witnesses = level.task.get("witnesses") if self.config.require_witnesses else None
        return bool(
            check_agreement(draft, level.task, sandbox=self.config.sandbox, witnesses=witnesses)
        )

    # -- stages -----------------------------------------------------------------------------
    def _data(self, messages: list[dict[str, Any]]) -> str:
        assert self.bench is not None
        ask = prompts.DATA.format(category=self.agent.category)
        for attempt in self._rounds("data", messages, ask):
            found = cb.blocks(attempt)
            script = cb.pick(found, "data", needle="sqlite") or next(
                (b for b in found if b.lang in ("python", "py", "sql", "")), None
            )
            problems: list[str] = []
            if script is not None:
                sql = cb.as_sql(script)
                problem = None if sql is not None else cb.parse_problem(script.code, "make_data.py")
                if problem:
                    problems.append(problem)
                else:
                    ran = self.bench.run_python(
                        _SQL_RUNNER % json.dumps(sql) if sql is not None else script.code
                    )
                    if not ran.ok or ran.value.get("exit_code") != 0:
                        why = ran.message or ran.value.get("stderr", "")
                        problems.append(
                            f"the data {'SQL' if sql is not None else 'script'} failed: {why[-500:]}"
                        )
            report = inspect_data(self.bench)
            if script is None and report.problems:
                problems.insert(0, "no ```python data``` block that writes db.sqlite")
            problems += [p for p in report.problems if p not in problems]
            if not problems:
                return report.schema
            self._feedback(messages, problems)
        raise StageFailed("no_data", self._last_problems(messages))

    def _tools(
        self,
        messages: list[dict[str, Any]],
        schema: str,
        draft: Path,
        db: Path,
        meta: dict[str, Any],
    ) -> str:
        for attempt in self._rounds("tools", messages, prompts.TOOLS.format(schema=schema)):
            block = cb.pick(cb.blocks(attempt), "tools", needle="def ")
            if block is None:
                self._feedback(messages, ["no ```python tools``` block with tool functions"])
                continue
            tools = with_submit_tool(block.code)
            write_draft(draft, db, tools, "", "", [_placeholder_task()], **meta)
            problems = check_tools(draft, sandbox=self.config.sandbox)
            if not problems:
                return tools
            self._feedback(messages, problems)
        raise StageFailed("no_tools", self._last_problems(messages))

    def _task(
        self,
        messages: list[dict[str, Any]],
        ask: str,
        stage: str,
        draft: Path,
        db: Path,
        tools: str,
        meta: dict[str, Any],
        *,
        level: int,
    ) -> tuple[Level, str]:
        problems: list[str] = []
        for attempt in self._rounds(stage, messages, ask):
            found = cb.blocks(attempt)
            problems = []
            new_tools = cb.pick(found, "tools", labelled_only=True) if level else None
            candidate_tools = with_submit_tool(new_tools.code) if new_tools else tools
            body, why = cb.task_json(found)
            roles = cb.pick_distinct(found, {"solution": "solve", "verifier": "verify"})
            solution, verifier = roles["solution"], roles["verifier"]
            if body is None:
                problems.append(why)
            witnesses, why_not = (
                cb.witnesses_json(found) if self.config.require_witnesses else (None, "")
            )
            if self.config.require_witnesses and witnesses is None:
                problems.append(why_not)
            for label, block, prefer in (
                ("solution", solution, "solve"),
                ("verifier", verifier, "verify"),
            ):
                if block is None:
                    problems.append(f"no ```python {label}``` block")
                elif (p := cb.parse_problem(block.code, f"{label}.py")) is not None:
                    problems.append(p)
                elif cb.two_argument_function(block.code, prefer) is None:
                    problems.append(f"the {label} block defines no function of two arguments")
            if not problems and new_tools is not None:
                write_draft(draft, db, candidate_tools, "", "", [_placeholder_task()], **meta)
                problems = check_tools(draft, sandbox=self.config.sandbox)
            if problems:
                self._feedback(messages, problems)
                continue
            assert body is not None and solution is not None and verifier is not None
            task = {
                "id": f"task-l{level}",
                "prompt": body["prompt"],
                "solution": cb.two_argument_function(solution.code, "solve"),
                "verifier": cb.two_argument_function(verifier.code, "verify"),
                "difficulty": min(5, level + 1),
                "submit_tool": "submit_result",
                "system_prompt": None,
                "metadata": body["metadata"],
            }
            write_draft(draft, db, candidate_tools, solution.code, verifier.code, [task], **meta)
            problems = check_agreement(
                draft, task, sandbox=self.config.sandbox, witnesses=witnesses
            )
            if not problems:
                line = {**task, "witnesses": witnesses} if witnesses is not None else task
                return Level(level, line, solution.code, verifier.code), candidate_tools
            self._feedback(messages, problems)
        # no_witnesses only when the task itself agreed and just its witnesses were missing or bad
        witness_only = bool(problems) and all("witness" in p for p in problems)
        reason = "no_witnesses" if witness_only else "no_agreement"
        raise StageFailed(reason, self._last_problems(messages))

    # -- conversation -------------------------------------------------------------------------
    def _rounds(self, stage: str, messages: list[dict[str, Any]], ask: str):  # type: ignore[no-untyped-def]
        """Yield the model's answer up to ``max_rounds`` times (feedback goes in between)."""
        messages.append({"role": "user", "content": ask})
        for i in range(self.config.max_rounds):
            self.stage_rounds[stage] = i + 1
            yield self._reply(messages, f"{self.job.key}/{stage}/{i}")

    def _reply(self, messages: list[dict[str, Any]], session: str) -> str:
        """One answer, letting the model call tools first (at most ``max_tool_turns`` times)."""
        tools = [s.openai() for s in self.bench.specs] + [SEARCH_TOOL]  # type: ignore[union-attr]
        try:
            for turn_no in range(self.config.max_tool_turns + 1):
                if turn_no == self.config.max_tool_turns:
                    messages.append({"role": "user", "content": prompts.ANSWER_NOW})
                turn = self.agent._run(
                    self.agent.policy.act(session, messages, tools, self._params())
                )
                self.turns += 1
                action = self.agent.parser.parse(turn.text) if turn.message is None else None
                message = dict(turn.message) if turn.message is not None else dict(action.message)  # type: ignore[union-attr]
                calls = message.get("tool_calls") or []
                messages.append(message)
                self._log(message)
                last = turn_no == self.config.max_tool_turns
                for call in calls:
                    # Past the limit a call is still answered (not run): OpenAI-style APIs reject a
                    # request whose assistant tool call has no tool message with its id.
                    messages.append(self._call(call) if not last else self._refuse(call))
                if not calls or last:
                    return str(message.get("content") or turn.text or "")
            return ""
        finally:
            self.agent._run(self.agent.policy.end_session(session))

    def _params(self) -> SamplingParams:
        """The configured sampling, seeded per job and per turn: jobs must not repeat each other."""
        base = self.config.params.seed or 0
        return replace(
            self.config.params, seed=(base * 1_000_003 + self.job.seed * 7_919 + self.turns) % 2**31
        )

    def _call(self, call: dict[str, Any]) -> dict[str, Any]:
        self.tool_calls += 1
        fn = call.get("function") or {}
        name = str(fn.get("name") or "")
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except (json.JSONDecodeError, TypeError):
            args = None
        if not isinstance(args, dict):
            content = "error: the arguments are not a JSON object"
        elif name == "search":
            hits = (self.agent.search or default_search()).search(str(args.get("query", "")), 4)
            content = json.dumps(
                [{"title": h.title, "text": h.text} for h in hits], ensure_ascii=False
            )
        elif name in {s.name for s in self.bench.specs}:  # type: ignore[union-attr]
            outcome = self.bench.call(name, args)  # type: ignore[union-attr]
            content = (
                json.dumps(outcome.value, ensure_ascii=False)[:6000]
                if outcome.ok
                else f"error: {outcome.message}"
            )
        else:
            content = f"error: no tool named {name!r}"
        message = tool_message(str(call.get("id") or f"call_{self.tool_calls}"), name, content)
        self._log(message)
        return dict(message)

    def _refuse(self, call: dict[str, Any]) -> dict[str, Any]:
        fn = call.get("function") or {}
        text = (
            f"not run: the limit of {self.config.max_tool_turns} tool turns per reply is reached; "
            "reply with the requested code blocks"
        )
        message = dict(
            tool_message(
                str(call.get("id") or f"call_{self.tool_calls}"), str(fn.get("name") or ""), text
            )
        )
        self._log(message)
        return message

    def _feedback(self, messages: list[dict[str, Any]], problems: list[str]) -> None:
        text = prompts.FEEDBACK.format(problems="\n".join(f"- {p}" for p in problems[:6]))
        messages.append({"role": "user", "content": text})
        self._log(messages[-1])

    def _last_problems(self, messages: list[dict[str, Any]]) -> str:
        for m in reversed(messages):
            if m["role"] == "user" and str(m.get("content", "")).startswith("That did not work"):
                return str(m["content"]).split("\n", 1)[1].rsplit("\nFix it", 1)[0][:1000]
        return "the model gave no usable answer"

    def _log(self, message: dict[str, Any]) -> None:
        keep = self.config.transcript_chars
        self.transcript.append(
            {
                "role": str(message.get("role")),
                "content": str(message.get("content") or "")[:keep],
                "tool_calls": json.dumps(message.get("tool_calls") or [])[:keep],
            }
        )

    def _tool_lines(self, draft: Path) -> str:
        lines = []
        for fn in cb.functions((draft / "tools.py").read_text()):
            if not fn.name.startswith("_"):
                args = ", ".join(a.arg for a in fn.args.args)
                doc = (ast.get_docstring(fn) or "").split("\n")[0]
                lines.append(f"- {fn.name}({args}): {doc}")
        return "\n".join(lines)


def _placeholder_task() -> dict[str, Any]:
    return {
        "id": "draft",
        "prompt": "draft",
        "solution": "solve",
        "verifier": "verify",
        "difficulty": 1,
        "submit_tool": "submit_result",
        "system_prompt": None,
        "metadata": {},
    }
