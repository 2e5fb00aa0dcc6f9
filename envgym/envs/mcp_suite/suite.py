"""One suite category as an envgym env: a bundle built from the MCPMark-layout tasks, plus servers.

``build(service, category)`` writes (once, into the envgym cache, keyed by a digest of the tasks,
the snapshot and this package's code) a bundle whose ``state/`` is the category's initial state,
whose only own tool is ``finish``, whose verifier runs the task's ``verify.py`` on the final state
(``bundle_files/verifier.py``) and whose gold solution is the task's ``gold.json`` plan.

``make_env`` puts that bundle in a :class:`SuiteSandbox`: an :class:`~envgym.mcp.sandbox.McpSandbox`
with the service's MCP server (restarted on each episode's fresh state copy) that also runs gold
solutions on the host, where the MCP tools are (``env.gold_calls()`` works).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from envgym.bundle import write_manifest
from envgym.bundle_env import BundleEnv
from envgym.bundle_write import copy_code_files, write_tasks
from envgym.cache import built_once, cache_root, source_digest
from envgym.envs.mcp_suite import layout, snapshot
from envgym.envs.mcp_suite.servers import server_spec
from envgym.mcp.sandbox import McpSandbox
from envgym.mcp.toolset import McpToolset
from envgym.sandbox import Sandbox, open_sandbox
from envgym.sandbox.base import CallError, CallOutcome, SolveOutcome

SUBMIT_TOOL = "finish"
SYSTEM_PROMPT = (
    "You are an agent working through MCP tools on a {service} environment. Use the tools to "
    "carry out the task; the result is graded on the final state. Call finish when done."
)
_PACKAGE = Path(__file__).resolve().parent
_FILES = _PACKAGE / "bundle_files"


def _digest(service: str, category: str) -> str:
    roots = [layout.TASKS_DIR / service / category, layout.STATE_DIR / service / category]
    files = sorted(
        p for r in roots for p in r.rglob("*") if p.is_file() and layout.is_data(p.relative_to(r))
    )
    code = sorted(
        [
            *_FILES.glob("*.py"),
            _PACKAGE / "suite.py",
            _PACKAGE / "snapshot.py",
            _PACKAGE / "layout.py",
        ]
    )
    return source_digest(_PACKAGE, [*files, *code])[:12]


def task_line(task: layout.McpMarkTask) -> dict[str, Any]:
    """The tasks.jsonl line of one MCPMark task."""
    variable, sub = layout.STATE_ENV[task.service]
    return {
        "id": task.meta["task_id"],
        "prompt": task.description,
        "solution": "solve_gold",
        "verifier": "verify_task",
        "difficulty": task.difficulty,
        "submit_tool": SUBMIT_TOOL,
        "system_prompt": SYSTEM_PROMPT.format(service=task.service),
        "metadata": {
            "service": task.service,
            "category": task.category,
            "task_name": task.meta["task_name"],
            "tags": list(task.tags),
            "state_env": [variable, sub],
            "verify_py": task.verify_source,
            "meta_json": json.dumps(task.meta),
            "gold": list(task.gold or []),
        },
    }


def build_bundle(out: Path, service: str, category: str) -> None:
    tasks = layout.load_category(service, category)
    snapshot.materialize(service, category, out / "state")
    copy_code_files(_FILES, out)
    write_tasks(out, [task_line(t) for t in tasks])
    write_manifest(
        out,
        name=f"mcp-suite-{service}-{category}",
        category="mcp",
        provenance={"agent": "hand-written (envgym/envs/mcp_suite)", "seed": None},
        description=f"Offline MCP suite, {service} server, category {category} (MCPMark layout).",
    )


def build(service: str, category: str) -> Path:
    """The category's bundle folder (built once per content digest)."""
    key = _digest(service, category)
    return built_once(
        cache_root() / "bundles" / f"mcp-suite-{service}-{category}-{key}",
        lambda out: build_bundle(out, service, category),
    )


class _HostTools:
    """``tools`` for a gold solution on the host: each attribute calls that tool in the sandbox."""

    def __init__(self, box: SuiteSandbox, submit_tool: str | None) -> None:
        self._box, self._submit = box, submit_tool
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.submission: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        def call(**arguments: Any) -> Any:
            self.calls.append((name, arguments))
            outcome = self._box.call_tool(name, arguments)
            if not outcome.ok:
                raise RuntimeError(f"{name}: {outcome.message}")
            if name == self._submit:
                self.submission = arguments
            return outcome.value

        return call


class SuiteSandbox(McpSandbox):
    """An McpSandbox whose gold solutions run on the host, where they can call the MCP tools."""

    def solve(self, function: str, task: dict[str, Any], submit_tool: str | None) -> SolveOutcome:
        from envgym import runtime

        spec = importlib.util.spec_from_file_location(
            "_mcp_suite_solution", self.bundle_dir / "solution.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        tools = _HostTools(self, submit_tool)
        assert self.state_dir is not None, "reset() first"
        previous = runtime._state_dir.set(self.state_dir)  # noqa: SLF001 - the solution's state_dir()
        try:
            getattr(module, function)(tools, task)
            outcome = CallOutcome(ok=True)
        except Exception as exc:  # noqa: BLE001 - a failed gold plan is an outcome, reported by check
            outcome = CallOutcome(
                ok=False, error=CallError.EXCEPTION, message=f"{type(exc).__name__}: {exc}"
            )
        finally:
            runtime._state_dir.reset(previous)  # noqa: SLF001
        return SolveOutcome(outcome=outcome, calls=tools.calls, submission=tools.submission)


def make_sandbox(
    bundle_dir: Path, service: str, *, backend: str = "bwrap", call_timeout_s: float = 30.0
) -> SuiteSandbox:
    """The bundle's own sandbox (its ``finish`` tool and verifier) plus the service's MCP server.

    The agent runs no code in the bundle's sandbox (it acts only through the MCP server, which
    is confined to the episode's state copy); the sandbox holds the verifier, which runs
    ``verify.py`` in a subprocess (inside bubblewrap by default).  ``inprocess`` works too.
    """
    inner: Sandbox = open_sandbox(bundle_dir, backend=backend)
    return SuiteSandbox(inner, [McpToolset(server_spec(service), call_timeout_s=call_timeout_s)])


def make_env(
    service: str, category: str, *, sandbox: str | Sandbox = "bwrap", **kwargs: Any
) -> BundleEnv:
    folder = build(service, category)
    box = (
        sandbox if isinstance(sandbox, Sandbox) else make_sandbox(folder, service, backend=sandbox)
    )
    return BundleEnv(folder, sandbox=box, **kwargs)
