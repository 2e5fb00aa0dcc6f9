"""Run a trusted bundle's code in this process, on a private copy of its state.

For *trusted* bundles only (the ones the procedural families generate): the kit's build uses
it to run every draw's gold solution, corruptions, witnesses and baselines against the
bundle's own verifier, and the tests use it to run tools, gold solutions and verifiers without
a sandbox.  Each episode gets its own ``contextvars`` context, so activating its state never
leaks into the caller's ``envgym.runtime`` state.

Why not ``envgym.sandbox.inprocess.InProcessSandbox``: that backend serves an *agent* and
answers the way every sandbox does, which is what a generator must not have:

* a bundle exception there becomes a ``CallOutcome`` error; here it is raised, so a draw whose
  gold solution raises is named by its exception ("gold raised KeyError") and a test sees the
  traceback;
* ``verify`` there returns a ``CallOutcome`` whose report went through a JSON round trip and
  the reply-size limit; here it returns the verifier's report dict itself (a build runs
  thousands of verifier calls per bundle: every single-field corruption of every gold answer);
* tool arguments there are coerced to the tool's annotations and stdout is captured; here the
  solution calls the tool functions as they are, and ``call_tool`` returns live values;
* solve there returns the submission after a JSON round trip; here it is the submit tool's
  keyword arguments as the solution passed them.
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib.util
import inspect
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from envgym import runtime


@dataclass
class SolveResult:
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    submission: dict[str, Any] | None = None


class LocalBundle:
    """The modules of one bundle directory, imported under names private to that directory."""

    def __init__(self, bundle_dir: Path) -> None:
        self.root = Path(bundle_dir).resolve()
        tag = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        self.tools_module = _load(self.root / "tools.py", f"_envgym_local_{tag}_tools")
        self.solution_module = _load(self.root / "solution.py", f"_envgym_local_{tag}_solution")
        self.verifier_module = _load(self.root / "verifier.py", f"_envgym_local_{tag}_verifier")
        self.tool_functions: dict[str, Callable[..., Any]] = {
            name: fn
            for name, fn in vars(self.tools_module).items()
            if inspect.isfunction(fn)
            and not name.startswith("_")
            and fn.__module__ == self.tools_module.__name__
        }

    @contextmanager
    def episode(self) -> Iterator[Episode]:
        scratch = Path(tempfile.mkdtemp(prefix="envgym-local-"))
        state = scratch / "state"
        shutil.copytree(self.root / "state", state)
        ctx = contextvars.copy_context()
        ctx.run(runtime.activate, state)
        try:
            yield Episode(self, ctx, state)
        finally:
            runtime.close_connections(state)
            shutil.rmtree(scratch, ignore_errors=True)


class Episode:
    def __init__(self, bundle: LocalBundle, ctx: contextvars.Context, state: Path) -> None:
        self.bundle = bundle
        self.ctx = ctx
        self.state = state

    def call_tool(self, name: str, **arguments: Any) -> Any:
        return self.ctx.run(self.bundle.tool_functions[name], **arguments)

    def solve(self, task: dict[str, Any], submit_tool: str = "submit_result") -> SolveResult:
        result = SolveResult()

        def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def call(**arguments: Any) -> Any:  # keyword-only, as a sandbox proxy would be
                result.calls.append((name, dict(arguments)))
                value = fn(**arguments)
                if name == submit_tool:
                    result.submission = dict(arguments)
                return value

            return call

        tools = SimpleNamespace(**{n: wrap(n, f) for n, f in self.bundle.tool_functions.items()})
        solver = getattr(self.bundle.solution_module, task["solution"])
        self.ctx.run(solver, tools, task)
        return result

    def verify(self, submission: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
        verifier = getattr(self.bundle.verifier_module, task["verifier"])
        return self.ctx.run(verifier, submission, task)


def passed(report: dict[str, Any]) -> bool:
    return bool(report["checks"]) and all(c["passed"] for c in report["checks"])


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
