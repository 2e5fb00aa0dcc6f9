"""``CodeInterpreterEnv``: code-interpreter bundles as episodes on a real Jupyter kernel.

A :class:`~envgym.bundle_env.BundleEnv` whose ``python`` tool is routed to a jailed kernel
from a pool (notebook.py), with the seed's system prompts (prompts.py) and two ways to answer:
``answer="submit"`` (the ``submit_answer`` tool; what ``envgym check`` validates) or
``answer="final"`` (the seed's Table 7/8 style: the final message, answer in ``\\boxed{}``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envgym.bundle import Bundle, load_bundle
from envgym.bundle_env import BundleEnv
from envgym.core import Observation
from envgym.envs.code_interpreter.notebook import NotebookSandbox, shared_pool
from envgym.envs.code_interpreter.prompts import system_prompt
from envgym.sandbox import Limits, Sandbox, open_sandbox
from envgym.state import PristineState
from envgym.tools.python_kernel import DEFAULT_TIMEOUT_S, SyncKernelPool

#: DeepSeek-V3.2 Appendix B, Table 8: "with a maximum of 20 code executions".
THINKING_MAX_EXECUTIONS = 20
_LOAD_LOCK = threading.Lock()


class CodeInterpreterEnv(BundleEnv):
    """Episodes over a code-interpreter bundle.

    Args:
        bundle: a bundle (or its directory); by default the cached bundle of ``family``.
        family: "all", "math", "logic" or "data" (used when ``bundle`` is not given).
        prompt: "plain" (Table 7) or "thinking" (Table 8: tool calls inside the reasoning).
        answer: "submit" (submit_answer tool) or "final" (answer in the final message).
        timeout_s: wall clock per code execution (interrupt, then restart if needed).
        max_executions: code executions per episode; default 20 with the thinking prompt
            (the seed's cap), unlimited with the plain prompt.
        difficulties: keep only tasks of these difficulties.
        pool: a :class:`SyncKernelPool` (default: a process-wide shared pool).
        sandbox: backend of the bundle sandbox (tools other than python, solution, verifier).
        **kwargs: passed to :class:`BundleEnv` (parser, context, budgets, tokenizer, ...).
    """

    def __init__(
        self,
        bundle: Bundle | Path | str | None = None,
        *,
        family: str = "all",
        prompt: str = "plain",
        answer: str = "submit",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_executions: int | None = -1,
        difficulties: Sequence[int] | None = None,
        pool: SyncKernelPool | None = None,
        sandbox: str | Sandbox = "bwrap",
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> None:
        if bundle is None:
            from envgym.envs.code_interpreter.build import default_bundle_dir

            bundle = default_bundle_dir(family)
        if isinstance(bundle, Bundle):
            loaded = bundle
        else:
            # CPython 3.11's ast is not thread-safe ("AST constructor recursion depth
            # mismatch"), and load_bundle parses the bundle's code: rollout engines build envs
            # in threads.
            with _LOAD_LOCK:
                loaded = load_bundle(bundle)
        if max_executions == -1:
            max_executions = THINKING_MAX_EXECUTIONS if prompt == "thinking" else None
        system = system_prompt(
            prompt, timeout_s=timeout_s, max_executions=max_executions, answer=answer
        )
        tasks = tuple(
            dataclasses.replace(
                t, system_prompt=system, submit_tool=None if answer == "final" else t.submit_tool
            )
            for t in loaded.tasks
            if difficulties is None or t.difficulty in difficulties
        )
        if not tasks:
            raise ValueError(
                f"no task of difficulty {sorted(difficulties or ())} in {loaded.manifest.name}"
            )
        loaded = dataclasses.replace(loaded, tasks=tasks)
        inner = (
            sandbox
            if isinstance(sandbox, Sandbox)
            else open_sandbox(loaded.root, backend=sandbox, limits=limits)
        )
        self.notebook = NotebookSandbox(
            inner,
            pool or shared_pool(),
            PristineState(loaded.state_dir),
            timeout_s=timeout_s,
            max_executions=max_executions,
            hidden_tools=("submit_answer",) if answer == "final" else (),
        )
        self.prompt_kind = prompt
        self.answer_mode = answer
        try:
            super().__init__(loaded, sandbox=self.notebook, **kwargs)
        except BaseException:
            self.notebook.close()
            raise

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self.notebook.new_episode()  # first: the info of this reset must describe the new kernel
        return super().reset(seed=seed, options=options)

    def _info(self, *, reward_components: dict[str, float]) -> dict[str, Any]:
        info = super()._info(reward_components=reward_components)
        info["python"] = dataclasses.asdict(self.notebook.stats)
        return info

    def step(self, action: Any) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        out = super().step(action)
        if out[2] or out[3]:  # the episode is over: give the kernel back now, not at the next reset
            self.notebook.end_episode()
        return out
