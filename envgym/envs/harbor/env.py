"""``HarborEnv``: Harbor task directories as multi-turn envgym episodes (``harbor:PATH``).

``PATH`` is one task directory or a dataset directory of them (``load_tasks``).  An episode:
a fresh copy of the task's built directories (``runtime.TaskRuntime``), the instruction as the
user message, the tools of agent_tools.py (bash, read_file, write_file, submit), each call a
fresh jail.  It ends at ``submit`` (terminated) or when a budget runs out (truncated; the agent
timeout of task.toml is the wall-clock budget, or ``time_budget_s`` when shorter); either way
the verifier runs: a fresh copy of ``tests/`` at ``/tests`` over the final directories, a fresh
``/logs``, and the reward is the strictly parsed ``/logs/verifier/reward.txt``.

``reset(options={"task": ID})`` picks a task of a dataset (as ``envgym eval`` does); without it
the seed picks (``seed % len(tasks)``), else the first task.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from envgym.actions import NormalizedAction
from envgym.context import ContextManager
from envgym.context.view import ContextView
from envgym.core import Action, Env, Message, Observation
from envgym.envs.harbor.agent_tools import SUBMIT, HarborTools
from envgym.envs.harbor.runtime import Episode, GradeResult, TaskRuntime
from envgym.envs.harbor.task import HarborTask, load_tasks
from envgym.episode import EpisodeCounters, counting
from envgym.keywords import budgets_with
from envgym.messages import ToolCall, env_message
from envgym.parsers import ToolCallParser, get_parser
from envgym.step import CallByCall, EnvBudgets, Outcome, RenderedTools, run_step

__all__ = ["HarborEnv", "SYSTEM_PROMPT"]

SYSTEM_PROMPT = """You are working in a Linux terminal environment to complete a task.

Your working directory is {workdir}. Use the tools to inspect and change the environment:
bash runs a command (a fresh shell each time; files persist, `cd` does not), read_file and
write_file read and write files. There is no network access. When the task is done, call
submit: the task's hidden tests then check the environment as you left it."""


class HarborEnv(CallByCall, RenderedTools, Env):
    """Episodes over one Harbor task or a dataset of them.

    Args:
        path: a task directory or a dataset directory (or pre-loaded ``tasks``).
        parser, context, native_tools, tokenizer, budgets, max_turns...: as :class:`BundleEnv`.
        command_timeout_s: the wall clock of one bash call.
        sandbox: ``"docker"`` builds each task's Dockerfile on the local engine and runs the
            episode in a container (docs/HARBOR.md, "Docker backend"); otherwise the bwrap jail.
        workdir: where task trees are built (default: a fresh temp directory per env).
    """

    def __init__(self, path: str | Path | None = None, *, tasks: list[HarborTask] | None = None,
                 parser: str | ToolCallParser = "hermes", context: str | ContextManager = "thinking-retention",
                 native_tools: bool = True, tokenizer: Any = None, budgets: EnvBudgets | None = None,
                 command_timeout_s: float = 120.0, workdir: Path | None = None, sandbox: str | None = None,
                 **budget_overrides: Any) -> None:  # fmt: skip
        # "docker": the task's image and a container per episode (docker_runtime.py); anything
        # else (what `envgym eval` passes every env: bwrap, inprocess) is the bwrap jail.
        self.sandbox = "docker" if sandbox == "docker" else "bwrap"
        budget_overrides.pop("limits", None)
        if tasks is None:
            if path is None:
                raise TypeError("HarborEnv needs a task or dataset path (or tasks=)")
            tasks = load_tasks(path)
        self.tasks = list(tasks)
        self._by_id = {t.id: t for t in self.tasks}
        self.budgets = budgets_with(budgets or EnvBudgets(max_turns=100, max_tool_calls=200), budget_overrides,
                                    env_cls=type(self))  # fmt: skip
        self.parser = get_parser(parser) if isinstance(parser, str) else parser
        counters = counting(context, tokenizer, window=self.budgets.context_window is not None)
        self.context = counters.context
        self._budget_counter = counters.budget
        self.view = ContextView(self.context)
        self.native_tools = native_tools
        self.command_timeout_s = command_timeout_s
        self._own_dir = workdir is None
        self._dir = (
            Path(tempfile.mkdtemp(prefix="envgym-harbor-")) if workdir is None else Path(workdir)
        )
        self._runtimes: dict[str, Any] = {}  # TaskRuntime or DockerTaskRuntime: the same methods
        self.task: HarborTask = self.tasks[0]
        self.tools: HarborTools | None = None
        self.history: list[Message] = []
        self.episode = EpisodeCounters()
        self.grade_result: GradeResult | None = None
        self._done = True

    # -- the contract ------------------------------------------------------------------
    def runtime(self, task: HarborTask) -> Any:
        """The task's runtime, a TaskRuntime or a DockerTaskRuntime (built once per env object)."""
        if task.id not in self._runtimes:
            kind: Any = TaskRuntime
            if self.sandbox == "docker":
                from envgym.envs.harbor.docker_runtime import DockerTaskRuntime

                kind = DockerTaskRuntime
            self._runtimes[task.id] = kind(
                task, self._dir / task.id, command_timeout_s=self.command_timeout_s
            )
        return self._runtimes[task.id]

    def pick(self, seed: int | None, options: dict[str, Any] | None) -> HarborTask:
        wanted = (options or {}).get("task")
        if wanted is not None:
            if wanted not in self._by_id:
                raise KeyError(
                    f"no Harbor task {wanted!r} here; tasks: {', '.join(sorted(self._by_id)[:20])}"
                )
            return self._by_id[wanted]
        return self.tasks[(seed or 0) % len(self.tasks)]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        self.task = self.pick(seed, options)
        runtime = self.runtime(self.task)
        started = time.monotonic()
        episode = runtime.new_episode()
        self.tools = HarborTools(runtime, episode, timeout_s=self.command_timeout_s)
        system = SYSTEM_PROMPT.format(workdir=runtime.plan.workdir)
        if not self.native_tools:
            system += "\n\n" + self.parser.render_tools(self.tools.table.schemas())
        self.history = [
            {"role": "system", "content": system},
            {"role": "user", "content": self.task.instruction.strip()},
        ]
        self.view.start(self.history)
        self.episode = EpisodeCounters()
        self._done = False
        self.grade_result = None
        info = self._info({})
        info.update(task_id=self.task.id, reset_s=time.monotonic() - started)
        return self._observe(), info

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._done or self.tools is None:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        out = run_step(self, action)
        self._done = out[2] or out[3]
        return out

    def close(self) -> None:
        for runtime in self._runtimes.values():
            runtime.close()
        if self._own_dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def current_episode(self) -> Episode | Any:
        assert self.tools is not None
        return self.tools.episode

    # -- the step's hooks (envgym/step.py; _read and _answer_turn: CallByCall) -------------
    def _time_budget(self) -> float | None:
        """The episode's wall clock: task.toml's agent timeout, or the caller's budget when that
        is shorter (``envgym eval --max-seconds``); the task's limit is never lifted."""
        limits = [
            t
            for t in (self.budgets.time_budget_s, self.task.limits.agent_timeout_s)
            if t is not None
        ]
        return min(limits) if limits else None

    def _answer(self, call: ToolCall, submitted: bool) -> tuple[str, bool | None]:
        assert self.tools is not None
        if submitted:
            return "Skipped: the task was already submitted.", None
        if self.episode.tool_calls >= self.budgets.max_tool_calls:
            self.episode.errors["tool_budget"] += 1
            return "Error: tool-call budget exhausted.", None
        self.episode.tool_calls += 1
        budget = self._time_budget()
        left = None if budget is None else budget - (time.monotonic() - self.episode.started)
        reply = self.tools.call(call.name, call.arguments, time_left_s=left)
        if reply.error:
            self.episode.errors[reply.error] += 1
            return reply.content, None
        return reply.content, (True if call.name == SUBMIT else None)

    def _nudge(self, parsed: NormalizedAction) -> bool | None:
        self.episode.errors["no_tool_call"] += 1
        self.history.append(
            dict(
                env_message(
                    f"No tool call was found in your last message. Use the tools, then call `{SUBMIT}`."
                )
            )
        )
        return None

    def _budget_outcome(self) -> Outcome:
        budgets = replace(self.budgets, time_budget_s=self._time_budget())
        return budgets.outcome(turns=self.episode.turns, tool_calls=self.episode.tool_calls, started=self.episode.started,
                               prompt_tokens=lambda: self._budget_counter.count(self.view.rendered, self._schemas()))  # fmt: skip

    def _finish(self, submitted: bool | None, outcome: Outcome) -> tuple[float, dict[str, Any]]:
        assert self.tools is not None
        started = time.monotonic()
        try:
            result = self.tools.runtime.grade(self.tools.episode)
        except Exception as err:  # noqa: BLE001 - an ungradable state scores 0 and says why
            self.episode.errors["grade_error"] += 1
            result = GradeResult(0.0, f"grading failed: {type(err).__name__}: {err}", None, "")
        self.grade_result = result
        info = self._info({"reward": result.reward})
        info["report"] = {"passed": result.reward >= 1.0, "score": result.reward, "reward": result.reward,
                          "reason": result.reason, "test_exit_code": result.exit_code,
                          "test_output": result.output[-2000:], "task_id": self.task.id,
                          "submitted": bool(submitted), "grade_s": time.monotonic() - started,
                          "checks": [{"name": "reward.txt", "passed": result.reward >= 1.0, "detail": result.reason}]}  # fmt: skip
        return result.reward, info
