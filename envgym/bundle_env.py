"""``BundleEnv``: a bundle's tasks as multi-turn tool-use episodes (the env contract in core.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from envgym.actions import NormalizedAction
from envgym.bundle import Bundle, Task, load_bundle
from envgym.context import ContextManager
from envgym.context.view import ContextView
from envgym.core import Action, Env, Message, Observation
from envgym.dispatch import DEFAULT_OUTPUT_CAP, ToolResult, ToolTable, outcome_to_result, run_tool
from envgym.episode import EpisodeCounters, counting
from envgym.keywords import budgets_with
from envgym.messages import ToolCall, env_message
from envgym.parsers import ToolCallParser, get_parser
from envgym.sandbox import Limits, Sandbox, open_sandbox
from envgym.sandbox.inprocess import InProcessSandbox
from envgym.sandbox.pool import reap
from envgym.state import EpisodeDirs
from envgym.step import CallByCall, EnvBudgets, Outcome, not_verified, run_step
from envgym.tokens import TokenCounter
from envgym.verdict import Verdict

DEFAULT_SYSTEM_PROMPT = (
    "You are a capable assistant that solves the user's task by calling the provided tools. "
    "Look facts up with the tools instead of guessing."
)


class BundleEnv(CallByCall, Env):
    """Episodes over one bundle: each ``reset`` picks a task and gives a fresh state copy.

    Args:
        bundle: a loaded :class:`Bundle` or its directory.
        task: a task id or index to always use; by default ``reset`` samples one
            (seeded), or takes ``options={"task": ...}``.
        sandbox: ``"bwrap"`` (default), ``"docker"``, ``"inprocess"`` (trusted bundles only),
            or a ready :class:`Sandbox`.
        parser: tool-call parser for raw-text actions (``"hermes"``, ``"deepseek-v3"``, ``"json"``).
        context: a context policy name or a :class:`ContextManager`.
        native_tools: when False the tools are also described in the system prompt, in the
            parser's format, for models without native tool calling.
        tokenizer: an HF tokenizer, a local path/hub id, or ``"smollm2"`` (the embedded model's);
            enables token counts in ``info`` and counts the context budget in real tokens.
        reward: ``"binary"`` (1.0 iff every check passes, as pass@k needs) or ``"fraction"``.
        prestart: keep the next episode's worker started in the background (bwrap), so a
            reset hands it over instead of starting one (docs/SANDBOX.md, "Pre-started workers").
    """

    def __init__(
        self,
        bundle: Bundle | Path | str,
        *,
        task: str | int | None = None,
        sandbox: str | Sandbox = "bwrap",
        parser: str | ToolCallParser = "hermes",
        context: str | ContextManager = "thinking-retention",
        native_tools: bool = True,
        tokenizer: Any = None,
        reward: str = "binary",
        budgets: EnvBudgets | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        limits: Limits | None = None,
        prestart: bool = True,
        **budget_overrides: Any,
    ) -> None:
        if reward not in ("binary", "fraction"):
            raise ValueError(f"reward must be 'binary' or 'fraction', not {reward!r}")
        self.bundle = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
        self.budgets = budgets_with(budgets or EnvBudgets(), budget_overrides, env_cls=type(self))
        self.parser = get_parser(parser) if isinstance(parser, str) else parser
        counters = counting(context, tokenizer, window=self.budgets.context_window is not None)
        self.counter: TokenCounter | None = counters.counter
        self.context = counters.context
        self._budget_counter = counters.budget
        self.native_tools = native_tools
        self.reward_mode = reward
        self.output_cap = output_cap
        self._fixed_task = task
        self._dirs = EpisodeDirs(self.bundle.state_dir)
        self.sandbox = (
            sandbox
            if isinstance(sandbox, Sandbox)
            else open_sandbox(self.bundle.root, backend=sandbox, limits=limits)
        )
        self.tools = ToolTable(self.sandbox.describe_tools())
        self._state_path = self._dirs.current  # the current episode's state directory
        self._release: Callable[[], None] | None = None  # removes a pooled episode's directory
        self._releasing: list[Future[None]] = []
        self._pooled = prestart and self.sandbox.start_pool(self._dirs.lease)
        self.task: Task | None = None
        self.history: list[Message] = []  # everything that happened, for the trajectory
        self.view = ContextView(self.context)  # the base the policy renders (compacted on overflow)
        self.episode = EpisodeCounters()
        self._done = True

    # -- the contract ------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        key = (options or {}).get("task", self._fixed_task)
        if key is None:
            key = int(self.np_random.integers(len(self.bundle.tasks)))
        self.task = self.bundle.task(key)
        self._new_state()
        system = self.task.system_prompt or DEFAULT_SYSTEM_PROMPT
        if not self.native_tools:
            system = system + "\n\n" + self.parser.render_tools(self.tools.schemas())
        self.history = [
            {"role": "system", "content": system},
            {"role": "user", "content": self.task.prompt},
        ]
        self.view.start(self.history)
        self.episode = EpisodeCounters()
        self._done = False
        obs = self._observe()
        info = self._info(reward_components={})
        info.update(task_id=self.task.id, difficulty=self.task.difficulty)
        return obs, info

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._done or self.task is None:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        out = run_step(self, action)
        self._done = out[2] or out[3]
        return out

    def close(self) -> None:
        self.sandbox.close()
        self._release_pooled()
        self._dirs.cleanup()

    # -- episode mechanics ---------------------------------------------------------------
    def _new_state(self) -> None:
        # A pre-started worker on its own fresh state when one is ready; else the env's own
        # directory, refilled on a fresh tmpfs, and a worker started for it.
        taken = self.sandbox.take_pooled() if self._pooled else None
        previous, self._release = self._release, None
        if taken is None:
            # In-process, nothing of the last episode runs on after its step returned, so the
            # tmpfs is emptied in place: a fresh one costs an unmount, whose time depends on the
            # rest of the machine (measured: 0.1-0.3 ms typical, p99 7 ms, ~10 ms a reset in a
            # run beside a test suite starting bwrap sandboxes; likely the mount lock and RCU).
            fresh = not isinstance(self.sandbox, InProcessSandbox)
            self._state_path = self._dirs.refill(fresh_filesystem=fresh)
            self.sandbox.reset(self._state_path)
        else:
            self._state_path, self._release = taken
        if previous is not None:
            # Unmounting costs ~3 ms: on the reaper thread, after the last episode's worker
            # (queued there first) is dead.  close() waits for it.
            self._releasing = [f for f in self._releasing if not f.done()] + [reap(previous)]

    def _release_pooled(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()
        for done in self._releasing:
            done.result()
        self._releasing = []

    def _answer(self, call: ToolCall, submitted: bool) -> tuple[str, Verdict | None]:
        """The reply to one readable call, and the verdict when it was a valid submission."""
        assert self.task is not None
        if submitted:
            return "Skipped: the task was already submitted.", None
        if self.episode.tool_calls >= self.budgets.max_tool_calls:
            self.episode.errors["tool_budget"] += 1
            return "Error: tool-call budget exhausted.", None
        budget = self.budgets.time_budget_s  # _time_left(), written out: once per call
        left = None if budget is None else budget - (time.monotonic() - self.episode.started)
        if left is not None and left <= 0:  # checked between calls, not only after the step
            self.episode.errors["time_budget"] += 1
            return "Error: the episode's time budget is used up; the call was not run.", None
        self.episode.tool_calls += 1
        try:  # a validated call, its wall-clock limit cut to the time budget left
            result = run_tool(
                self.sandbox,
                self.tools,
                call.name,
                call.arguments,
                output_cap=self.output_cap,
                timeout_s=left,
            )
        except Exception as err:  # noqa: BLE001 - step never raises on agent input; counted
            result = ToolResult(
                content=f"Error: {call.name} could not be run ({type(err).__name__})",
                error="internal_error",
            )
        if result.error:
            self.episode.errors[result.error] += 1
            return result.content, None
        if call.name == self.task.submit_tool:
            return result.content, self._verify(dict(call.arguments))
        return result.content, None

    def _time_left(self) -> float | None:
        budget = self.budgets.time_budget_s
        return None if budget is None else budget - (time.monotonic() - self.episode.started)

    def _final_answer(self, message: Message) -> Verdict | None:
        assert self.task is not None
        if self.task.submit_tool is None:
            return self._verify({"content": message.get("content") or ""})
        self.episode.errors["no_tool_call"] += 1
        nudge = (
            "No tool call was found in your last message. Use the tools to gather what you need, "
            f"then call `{self.task.submit_tool}` with your final answer."
        )
        self.history.append(env_message(nudge))
        return None

    def _verify(self, submission: dict[str, Any]) -> Verdict:
        assert self.task is not None
        outcome = self.sandbox.verify(self.task.verifier, submission, self.task.to_dict())
        if not outcome.ok:
            self.episode.errors["verifier_error"] += 1
            return Verdict.failure(
                "verifier_error", outcome_to_result("verifier", outcome, output_cap=2000).content
            )
        return Verdict.from_report(outcome.value)

    # -- the step's hooks (envgym/step.py; _read and _answer_turn: CallByCall) -------------
    def _nudge(self, parsed: NormalizedAction) -> Verdict | None:
        return self._final_answer(parsed.message)

    def _budget_outcome(self) -> Outcome:
        episode = self.episode
        return self.budgets.outcome(
            turns=episode.turns,
            tool_calls=episode.tool_calls,
            started=episode.started,
            prompt_tokens=self._prompt_tokens,
        )

    def _finish(self, verdict: Verdict | None, outcome: Outcome) -> tuple[float, dict[str, Any]]:
        if verdict is None:  # cut by a budget before any submission: nothing was verified
            info = self._info(reward_components={})
            info["report"] = not_verified(outcome)
            return 0.0, info
        reward = float(verdict.passed) if self.reward_mode == "binary" else verdict.score
        info = self._info(reward_components=verdict.components())
        info["report"] = verdict.to_dict()
        return reward, info

    def _step_info(self, components: dict[str, float]) -> dict[str, Any]:
        return self._info(reward_components=components)

    def _observe(self) -> Observation:
        tools = self.tools.schemas()
        return {"messages": self.view.render(self.history, tools), "tools": tools}

    def _prompt_tokens(self) -> int:
        return self._budget_counter.count(self.view.rendered, self.tools.schemas())

    def _info(self, *, reward_components: dict[str, float]) -> dict[str, Any]:
        info = self.episode.info(self.view, reward_components)
        if self.counter is not None:
            info["tokens"] = {
                "prompt": self.counter.count(self.view.rendered, self.tools.schemas())
            }
        return info

    # -- helpers for scripted agents and checks -------------------------------------------
    def gold_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """The tool calls the current task's gold solution makes, run on a scratch state copy."""
        if self.task is None:
            raise RuntimeError("call reset() first")
        try:
            self.sandbox.reset(self._dirs.scratch("gold"))
            solved = self.sandbox.solve(
                self.task.solution, self.task.to_dict(), self.task.submit_tool
            )
        finally:
            self.sandbox.reset(self._state_path)
        if not solved.outcome.ok:
            raise RuntimeError(f"gold solution of {self.task.id} failed: {solved.outcome.message}")
        return list(solved.calls)
