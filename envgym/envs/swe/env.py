"""``SweEnv`` (``swe-v0``): fix an issue in a real repository; the hidden tests decide.

An episode: a fresh checkout of the instance's ``base_commit`` (the test patch not applied: the
tests that decide stay hidden), the project's Python environment (``setup_agent.ensure_env``,
built once per env object and cached across processes), and the tools of agent_tools.py.  The
episode ends at ``submit`` (terminated) or when a budget runs out (truncated); either way the
final repository state is graded by grade.py (hidden tests on a fresh checkout, with the
defenses described there and in docs/SWE.md, "The agent environment").

Actions are assistant messages or raw text (the ``parser``); malformed calls, unknown tools and
bad arguments come back as tool messages, never as exceptions.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envgym.actions import NormalizedAction
from envgym.context import ContextManager
from envgym.context.view import ContextView
from envgym.core import Action, Env, Message, Observation
from envgym.envs.swe.agent_tools import SUBMIT, SweTools, ToolLimits
from envgym.envs.swe.file_tools import JAIL_ROOT, Workspace
from envgym.envs.swe.grade import Grade, grade
from envgym.envs.swe.instance import SweInstance, from_record, read_instances
from envgym.envs.swe.patch import changed_files
from envgym.envs.swe.repo import apply_patch, checkout
from envgym.envs.swe.safe_read import read_regular
from envgym.episode import EpisodeCounters, counting
from envgym.keywords import budgets_with
from envgym.messages import ToolCall, env_message
from envgym.parsers import ToolCallParser, get_parser
from envgym.step import CallByCall, EnvBudgets, Outcome, RenderedTools, run_step
from envgym.tokens import TokenCounter

SYSTEM_PROMPT = """You are a software engineer fixing an issue in a Python repository.

The repository is checked out at {root}; tools run there. Work like this:
1. Read the issue, then find the relevant code (search, view, bash with grep/find).
2. Reproduce the problem if you can (a small script run with bash, or run_tests).
3. Fix it with minimal, general changes to the source (str_replace or create).
4. Check your fix (run_tests, or your script), then call submit.

Your change is judged by tests you cannot see, so fix the cause described in the issue rather
than any one symptom. There is no network access. Changes to test files and to pytest
configuration (conftest.py, pytest.ini, tox.ini) are not kept for the evaluation."""

MAX_GOLD_FILE_BYTES = 64 * 1024**2  # a gold patch's file bigger than this is refused, not read

USER_PROMPT = """<issue>
{problem}
</issue>

Fix this issue in the repository at {root}, then call submit."""


def load_instance(
    instance: SweInstance | Mapping[str, Any] | str | Path, index: int = 0
) -> SweInstance:
    """An instance from itself, a SWE-bench record, or a JSONL file (``path`` + ``index``,
    or ``"path#index"``)."""
    if isinstance(instance, SweInstance):
        return instance
    if isinstance(instance, Mapping):
        return from_record(dict(instance))
    text = str(instance)
    if "#" in text and not Path(text).exists():
        text, _, number = text.rpartition("#")
        index = int(number)
    instances = read_instances(text)
    if not 0 <= index < len(instances):
        raise IndexError(f"{text} has {len(instances)} instances; index {index} is out of range")
    return instances[index]


class SweEnv(CallByCall, RenderedTools, Env):
    """Episodes on one SWE instance.

    Args:
        instance: a :class:`SweInstance`, a SWE-bench record, or a JSONL path (with ``index``).
        backend: where commands run: ``"bwrap"`` or ``"docker"``.
        python_env: a ready ``PythonEnv`` (skips ``ensure_env``; tests and pre-built caches).
        parser, context, native_tools, tokenizer, budgets, max_turns...: as :class:`BundleEnv`.
        tool_limits: bash / test timeouts and output caps.
        workdir: where workspaces are made (default: a fresh temp directory per env).
    """

    def __init__(self, instance: SweInstance | Mapping[str, Any] | str | Path, *, index: int = 0,
                 backend: str = "bwrap", python_env: Any = None, parser: str | ToolCallParser = "hermes",
                 context: str | ContextManager = "thinking-retention", native_tools: bool = True,
                 tokenizer: Any = None, budgets: EnvBudgets | None = None, tool_limits: ToolLimits | None = None,
                 workdir: Path | None = None, setup_model: Any = None, grade_timeout_s: float = 1800.0,
                 **budget_overrides: Any) -> None:  # fmt: skip
        budget_overrides.pop(
            "sandbox", None
        )  # what `envgym eval` passes every env; commands use `backend`
        budget_overrides.pop("limits", None)
        self.instance = load_instance(instance, index)
        self.backend = backend
        self.budgets = budgets_with(
            budgets or EnvBudgets(max_turns=100, max_tool_calls=200),
            budget_overrides,
            env_cls=type(self),
        )
        self.parser = get_parser(parser) if isinstance(parser, str) else parser
        counters = counting(context, tokenizer, window=self.budgets.context_window is not None)
        self.counter: TokenCounter | None = counters.counter
        self.context = counters.context
        self._budget_counter = counters.budget
        self.view = ContextView(self.context)
        self.native_tools = native_tools
        self.tool_limits = tool_limits or ToolLimits()
        self.grade_timeout_s = grade_timeout_s
        self.python_env = python_env
        self._setup_model = setup_model
        self._own_dir = workdir is None
        self._dir = (
            Path(tempfile.mkdtemp(prefix="envgym-swe-")) if workdir is None else Path(workdir)
        )
        self.tools: SweTools | None = None
        self.history: list[Message] = []
        self.episode = EpisodeCounters()
        self._done = True
        self._episodes = 0

    # -- the contract ------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        self._episodes += 1
        workspace = self._fresh_checkout(f"ws{self._episodes}")
        self.tools = SweTools(
            Workspace(workspace), self._ensure_env(workspace), limits=self.tool_limits
        )
        system = SYSTEM_PROMPT.format(root=JAIL_ROOT)
        if not self.native_tools:
            system += "\n\n" + self.parser.render_tools(self.tools.table.schemas())
        user = USER_PROMPT.format(problem=self.instance.problem_statement.strip(), root=JAIL_ROOT)
        self.history = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        self.view.start(self.history)
        self.episode = EpisodeCounters()
        self._done = False
        self.grade_result: Grade | None = None
        info = self._info({})
        info.update(task_id=self.instance.instance_id, repo=self.instance.repo)
        return self._observe(), info

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._done or self.tools is None:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        out = run_step(self, action)
        self._done = out[2] or out[3]
        return out

    def close(self) -> None:
        if self._own_dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- episode mechanics -------------------------------------------------------------
    def _fresh_checkout(self, name: str) -> Path:
        for old in self._dir.glob("ws*"):  # the last episode's workspace and grading tree
            shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(self._dir / "grade", ignore_errors=True)
        return checkout(self.instance, self.instance.base_commit, self._dir / name)

    def _ensure_env(self, workspace: Path) -> Any:
        """The project's Python environment, set up once per env object (cached on disk too)."""
        if self.python_env is None:
            from envgym.envs.swe.setup_agent import ensure_env

            repo_key = self.instance.repo_url or self.instance.repo
            setup = ensure_env(workspace, repo_key=repo_key, version=self.instance.version, backend=self.backend,
                               model=self._setup_model)  # fmt: skip
            if not setup.ok or setup.env is None:
                raise RuntimeError(
                    f"{self.instance.instance_id}: the project's environment could not be set up: {setup.reason}"
                )
            self.python_env = setup.env
        return self.python_env

    def _answer(self, call: ToolCall, submitted: bool) -> tuple[str, bool | None]:
        """The reply to one readable call; True as its result when it was a valid submit."""
        assert self.tools is not None
        if submitted:
            return "Skipped: the repository was already submitted.", None
        if self.episode.tool_calls >= self.budgets.max_tool_calls:
            self.episode.errors["tool_budget"] += 1
            return "Error: tool-call budget exhausted.", None
        self.episode.tool_calls += 1
        reply = self.tools.call(call.name, call.arguments)
        if reply.error:
            self.episode.errors[reply.error] += 1
            return reply.content, None
        return reply.content, (True if call.name == SUBMIT else None)

    def _grade(self) -> Grade:
        assert self.tools is not None
        try:
            self.grade_result = grade(self.instance, self.tools.workspace.root, self.tools.python_env,
                                      self._dir / "grade", timeout_s=self.grade_timeout_s)  # fmt: skip
        except Exception as err:  # noqa: BLE001 - an ungradable state scores 0 and says why
            self.episode.errors["grade_error"] += 1
            self.grade_result = Grade(0.0, {"f2p_passed": 0.0, "f2p_total": float(len(self.instance.fail_to_pass)),
                                            "p2p_failed": 0.0, "patch_applied": 0.0, "tests_ok": 0.0, "canary_ok": 0.0},
                                      {"tests_status": "grade_error", "detail": f"{type(err).__name__}: {err}"})  # fmt: skip
        return self.grade_result

    # -- the step's hooks (envgym/step.py; _read and _answer_turn: CallByCall) -------------
    def _nudge(self, parsed: NormalizedAction) -> bool | None:
        self.episode.errors["no_tool_call"] += 1
        self.history.append(env_message("No tool call was found in your last message. Use the tools to work on "
                                        f"the repository, then call `{SUBMIT}`."))  # fmt: skip
        return None

    def _budget_outcome(self) -> Outcome:
        return self.budgets.outcome(
            turns=self.episode.turns,
            tool_calls=self.episode.tool_calls,
            started=self.episode.started,
            prompt_tokens=lambda: self._budget_counter.count(self.view.rendered, self._schemas()),
        )

    def _finish(self, submitted: bool | None, outcome: Outcome) -> tuple[float, dict[str, Any]]:
        # Submitted or cut by a budget, the final repository state is graded.
        result = self._grade()
        info = self._info(dict(result.components))
        info["report"] = {
            **result.report,
            "instance_id": self.instance.instance_id,
            "reward": result.reward,
        }
        return result.reward, info

    # -- gold replay (envgym check, SFT data) ----------------------------------------------
    def gold_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """The gold patch as agent tool calls: ``create`` with each changed file's final
        content (``bash`` for deletions and non-text files), then ``submit``.

        Computed on a scratch checkout, so replaying it through :meth:`step` exercises the same
        tools and grading an agent gets.
        """
        scratch = self._dir / "gold"
        shutil.rmtree(scratch, ignore_errors=True)
        tree = checkout(self.instance, self.instance.base_commit, scratch)
        try:
            applied = apply_patch(tree, self.instance.patch)
            if not applied.ok:
                raise RuntimeError(
                    f"{self.instance.instance_id}: the gold patch does not apply: {applied.reason}"
                )
            calls: list[tuple[str, dict[str, Any]]] = []
            for path in changed_files(self.instance.patch):
                link = _link_target(tree, path)
                if link is not None:
                    # The patch makes a link: replay it as a link, never read what it points at
                    # (a link to /proc/self/environ would put the host's secrets into the calls).
                    calls.append(("bash", {"command": f"mkdir -p -- \"$(dirname -- {shlex.quote(path)})\" && "
                                                      f"ln -sfn -- {shlex.quote(link)} {shlex.quote(path)}"}))  # fmt: skip
                    continue
                try:
                    data = read_regular(tree, path, max_bytes=MAX_GOLD_FILE_BYTES)
                except FileNotFoundError:
                    calls.append(("bash", {"command": f"rm -f -- {shlex.quote(path)}"}))
                    continue
                except OSError as err:
                    raise RuntimeError(
                        f"{self.instance.instance_id}: the gold patch leaves {path!r} unreadable: {err}"
                    ) from None
                try:
                    calls.append(("create", {"path": path, "content": data.decode("utf-8")}))
                except UnicodeDecodeError:
                    encoded = base64.b64encode(data).decode()
                    calls.append(("bash", {"command": f"mkdir -p -- \"$(dirname -- {shlex.quote(path)})\" && "
                                                      f"echo {encoded} | base64 -d > {shlex.quote(path)}"}))  # fmt: skip
            calls.append((SUBMIT, {}))
            return calls
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _link_target(tree: Path, path: str) -> str | None:
    """The target text of ``tree/path`` when that path itself is a link (its parents are
    checked by :func:`read_regular`), else None."""
    try:
        return os.readlink(tree / path) if (tree / path).is_symlink() else None
    except OSError:
        return None
