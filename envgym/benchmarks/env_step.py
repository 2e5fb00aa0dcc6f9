"""``envgym bench env-step``: what one tool call costs, from a direct call to a sandboxed step.

All measured in one process, one run, each figure as the median of three (or more) independent
repetitions with the lowest and highest repetition beside it (``_min`` / ``_max``):

* ``add_*``: a trivial ``add(a, b)`` tool, the one peers are usually measured with, called
  directly, through ``env.step`` in-process (``inprocess_call_us``: the whole step), through
  the bubblewrap worker (raw call and full step) and through an MCP stdio server (mcp SDK);
* unprefixed: a trip-planning lookup (``get_all_hotels_by_city``), the same paths (the names
  this benchmark always had);
* ``long_episode_*``: step 1 vs step 200 of one episode with the embedded tokenizer counting
  every prompt against a context window (in-process, add tool);
* ``reset_ms`` (warm worker, copy-on-reset) and ``cold_start_ms`` / ``cold_reset_ms`` (a new
  env: worker start and tool schemas, then its first reset).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from envgym import runtime
from envgym.bench import BenchResult
from envgym.benchmarks.timing import Spread, median_us, repeated
from envgym.bundle import Bundle, load_bundle, write_manifest
from envgym.bundle_env import BundleEnv

REPS = 3
TRIP_TOOL, TRIP_ARGS = "get_all_hotels_by_city", {"city": "Hangzhou"}
ADD_TOOL, ADD_ARGS = "add", {"a": 2, "b": 3}

_ADD_TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b
'''
_ADD_SOLUTION = """
def solve(tools, task):
    tools.add(a=2, b=3)
"""
_ADD_VERIFIER = """
def verify(submission, task):
    return {"checks": [{"name": "sum", "passed": submission.get("content") == "5", "detail": ""}]}
"""


def _add_bundle(root: Path) -> Path:
    """A one-tool bundle for the peers' ``add(a, b)`` comparison."""
    (root / "state").mkdir(parents=True)
    (root / "state" / "README").write_text("no state\n")
    (root / "tools.py").write_text(_ADD_TOOLS)
    (root / "solution.py").write_text(_ADD_SOLUTION)
    (root / "verifier.py").write_text(_ADD_VERIFIER)
    task = {
        "id": "add",
        "prompt": "What is 2 + 3?",
        "solution": "solve",
        "verifier": "verify",
        "difficulty": 1,
        "submit_tool": None,
        "metadata": {},
    }
    (root / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    write_manifest(
        root, name="bench-add", category="bench", provenance={"agent": "bench", "seed": 0}
    )
    return root


def _action(i: int | str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    call = {
        "id": f"c{i}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(args)},
    }
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def _env_step_us(env: BundleEnv, repeat: int, tool: str, args: dict[str, Any]) -> float:
    """Median of env.step with a fresh episode every 16 steps (histories stay short)."""
    actions = [_action(i, tool, args) for i in range(16)]  # built outside the timed region
    samples = []
    while len(samples) < repeat + 5:
        env.reset(options={"task": 0})
        for action in actions:
            t0 = time.perf_counter_ns()
            env.step(action)
            samples.append(time.perf_counter_ns() - t0)
    return median(samples[5:]) / 1000.0


def _direct(bundle: Bundle, state: Path, tool: str) -> Callable[..., Any]:
    spec = importlib.util.spec_from_file_location(f"bench_direct_{tool}", bundle.root / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    runtime.activate(state)
    return getattr(module, tool)


async def _mcp_us(bundle: Path, state: Path, tool: str, args: dict[str, Any], repeat: int) -> float:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "envgym.benchmarks.mcp_tool_server", str(bundle), str(state), tool],
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        samples = []
        for i in range(repeat + 10):
            t0 = time.perf_counter_ns()
            result = await session.call_tool(tool, args)
            if i >= 10:
                samples.append(time.perf_counter_ns() - t0)
        if getattr(result, "is_error", False) or getattr(result, "isError", False):
            raise RuntimeError(f"MCP call failed: {result}")
    return median(samples) / 1000.0


def _paths(
    prefix: str, bundle: Bundle, state: Path, tool: str, args: dict[str, Any], repeat: int
) -> dict[str, float]:
    """Direct call, in-process step, sandboxed call and step, MCP call of one tool."""
    fn = _direct(bundle, state, tool)
    direct, inproc, overhead = [], [], []
    env = BundleEnv(bundle, sandbox="inprocess", max_turns=10_000, max_tool_calls=10_000)
    try:
        for _ in range(REPS):
            d = median_us(lambda: fn(**args), repeat=repeat)
            s = _env_step_us(env, repeat, tool, args)
            direct.append(d)
            inproc.append(s)
            overhead.append(s - d)
    finally:
        env.close()
        runtime.activate(None)
    env = BundleEnv(bundle, sandbox="bwrap", max_turns=10_000, max_tool_calls=10_000)
    try:
        env.reset(options={"task": 0})
        sandboxed = repeated(
            lambda: median_us(lambda: env.sandbox.call_tool(tool, args), repeat=repeat), reps=REPS
        )
        sandboxed_step = repeated(lambda: _env_step_us(env, repeat, tool, args), reps=REPS)
    finally:
        env.close()
    mcp = repeated(
        lambda: asyncio.run(_mcp_us(bundle.root, state, tool, args, max(50, repeat // 4))),
        reps=REPS,
    )
    out: dict[str, float] = {}
    for name, spread in (
        ("direct_call_us", Spread.of(direct)),
        ("inprocess_call_us", Spread.of(inproc)),  # a whole env.step, named as before
        ("inprocess_overhead_us", Spread.of(overhead)),
        ("sandboxed_call_us", sandboxed),
        ("sandboxed_step_us", sandboxed_step),
        ("mcp_stdio_call_us", mcp),
    ):
        out.update(spread.metrics(f"{prefix}{name}"))
    out[f"{prefix}mcp_over_sandboxed_ratio"] = mcp.median / sandboxed.median
    return out


def _long_episode(bundle: Bundle, steps: int) -> dict[str, float]:
    """Step cost early vs late in one long episode, with real token counting and a window."""
    env = BundleEnv(
        bundle,
        sandbox="inprocess",
        tokenizer="smollm2",
        context_window=10**7,
        max_turns=10**6,
        max_tool_calls=10**6,
    )
    early, late = [], []
    try:
        for rep in range(REPS):
            env.reset(options={"task": 0})
            times = []
            for i in range(steps + 5):
                # Ids unique over repetitions: the counter must not find earlier reps' messages.
                action = _action(f"{rep}_{i}", ADD_TOOL, ADD_ARGS)
                t0 = time.perf_counter_ns()
                env.step(action)
                times.append((time.perf_counter_ns() - t0) / 1e6)
            early.append(median(times[1:11]))
            late.append(median(times[steps - 5 : steps + 5]))
    finally:
        env.close()
    return {
        **Spread.of(early).metrics("long_episode_step1_ms"),
        **Spread.of(late).metrics(f"long_episode_step{steps}_ms"),
    }


def _resets(bundle: Bundle, quick: bool) -> dict[str, float]:
    warm, cold_start, cold_reset = [], [], []
    for _ in range(REPS):
        t0 = time.perf_counter_ns()
        env = BundleEnv(bundle, sandbox="bwrap")
        t1 = time.perf_counter_ns()
        try:
            env.reset(options={"task": 0})
            t2 = time.perf_counter_ns()
            cold_start.append((t1 - t0) / 1e6)
            cold_reset.append((t2 - t1) / 1e6)
            samples = []
            for _ in range(30 if quick else 200):
                t = time.perf_counter_ns()
                env.reset(options={"task": 0})
                samples.append(time.perf_counter_ns() - t)
            warm.append(median(samples) / 1e6)
        finally:
            env.close()
    return {
        **Spread.of(warm).metrics("reset_ms"),
        **Spread.of(cold_start).metrics("cold_start_ms"),
        **Spread.of(cold_reset).metrics("cold_reset_ms"),
    }


def run(quick: bool = False) -> BenchResult:
    from envgym.envs.trip_planning.build import default_bundle_dir

    repeat = 200 if quick else 2000
    trip = load_bundle(default_bundle_dir())
    scratch = Path(tempfile.mkdtemp(prefix="envgym-bench-"))
    try:
        add = load_bundle(_add_bundle(scratch / "add"))
        add_state = shutil.copytree(add.state_dir, scratch / "add-state")
        trip_state = shutil.copytree(trip.state_dir, scratch / "trip-state")
        metrics = _paths("add_", add, add_state, ADD_TOOL, ADD_ARGS, repeat)
        metrics.update(_paths("", trip, trip_state, TRIP_TOOL, TRIP_ARGS, repeat))
        metrics.update(_long_episode(add, 60 if quick else 200))
        metrics.update(_resets(trip, quick))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    units = {k: "ms" if "_ms" in k else "us" for k in metrics}
    units.update({k: "ratio" for k in metrics if k.endswith("_ratio")})
    notes = {
        "add_inprocess_overhead_us": "target ≤ 10 µs over the direct call",
        "add_sandboxed_call_us": "target ≤ 100 µs (bubblewrap worker round trip)",
        "inprocess_overhead_us": "target ≤ 20 µs over the direct call",
        "sandboxed_call_us": "target ≤ 100 µs (bubblewrap worker round trip)",
        "reset_ms": "target ≤ 5 ms (bubblewrap, warm worker)",
        "add_mcp_over_sandboxed_ratio": "how many sandboxed calls fit in one MCP stdio call",
        "long_episode_step1_ms": "with the SmolLM2 tokenizer counting the prompt",
    }
    notes["add_direct_call_us"] = (
        "median of per-repetition medians; _min/_max: lowest/highest repetition"
    )
    return BenchResult(benchmark="env-step", metrics=metrics, units=units, notes=notes)
