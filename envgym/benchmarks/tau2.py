"""``envgym bench tau2``: a τ² tool call in τ²'s process vs. the same call through ``Tau2Env``.

* ``tau2_inprocess_us`` — τ²'s own tool path, ``Environment.get_response`` (the call τ²'s
  orchestrator makes), timed inside the process that runs τ²;
* ``envgym_tau2_us`` — one ``Tau2Env.step`` carrying that tool call (action normalisation, call
  ids, the τ² link, the tool message), timed in envgym's process;
* ``tau2_link_roundtrip_us`` — an empty request over the same link: what the process boundary
  costs when τ² runs in its own venv (.venv-tau2, docs/TAU2.md);
* ``envgym_over_inprocess_ratio`` — target ≤ 2.  The link mode is in the notes;
* ``mcp_bare_us`` / ``mcp_envgym_us`` — ``add(2, 3)`` on ``envgym.benchmarks.mcp_tool_server`` (stdio) from a
  bare ``mcp`` client session (env_step's measurement) vs. through envgym's ``McpToolset``;
  ``mcp_envgym_over_bare_ratio`` — target ≤ 1.2.

Medians of ``REPS`` repetitions of a timed loop, baseline and envgym path in the same run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envgym.bench import BenchResult
from envgym.envs.tau2.env import Tau2Env
from envgym.envs.tau2.link import Tau2Link
from envgym.envs.tau2.oracle import ScriptedUser
from envgym.envs.tau2.tasks import domain_tasks

DOMAIN = "airline"
REPS = 5


def _read_call() -> tuple[str, dict[str, Any]]:
    """The first read-only gold call of the domain (a lookup, as most agent calls are)."""
    for task in domain_tasks(DOMAIN):
        for action in task["actions"]:
            if action["name"].startswith("get_"):
                return task["id"], {"name": action["name"], "arguments": action["arguments"]}
    raise RuntimeError(f"τ² {DOMAIN} has no read-only gold call to time")


def _step_us(env: Tau2Env, call: dict[str, Any], n: int) -> float:
    action = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "b", "type": "function", "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]}  # fmt: skip
    for _ in range(20):
        env.step(action)
    start = time.perf_counter()
    for _ in range(n):
        env.step(action)
    return (time.perf_counter() - start) / n * 1e6


def _roundtrip_us(link: Tau2Link, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        link.call({"op": "ping"})
    return (time.perf_counter() - start) / n * 1e6


def _mcp(n: int) -> tuple[float, float]:
    """Median µs of one MCP tool call: bare client session, then envgym's toolset."""
    from envgym.benchmarks.env_step import (  # local: the τ² part runs without mcp
        _add_bundle,
        _mcp_us,
    )
    from envgym.mcp.client import ServerSpec
    from envgym.mcp.toolset import McpToolset

    args = {"a": 2, "b": 3}
    with tempfile.TemporaryDirectory() as tmp:
        bundle = _add_bundle(Path(tmp) / "bundle")
        state = bundle / "state"
        bare = asyncio.run(_mcp_us(bundle, state, "add", args, n))
        server = "envgym.benchmarks.mcp_tool_server"
        toolset = McpToolset(ServerSpec(command=(sys.executable, "-m", server,
                                                 str(bundle), str(state), "add")))  # fmt: skip
        toolset.start()
        try:
            samples = []
            for i in range(n + 10):
                t0 = time.perf_counter_ns()
                outcome = toolset.call_tool("add", args)
                if i >= 10:
                    samples.append(time.perf_counter_ns() - t0)
            if not outcome.ok:
                raise RuntimeError(f"MCP call through envgym failed: {outcome}")
        finally:
            toolset.close()
    return bare, statistics.median(samples) / 1000.0


def tau2_keys(quick: bool, mode: str = "auto") -> tuple[dict[str, float], str, str]:
    """The τ² metrics (µs), the link mode they were taken in, and the timed tool."""
    n = 200 if quick else 2000
    task_id, call = _read_call()
    link = Tau2Link(mode)
    env = Tau2Env(DOMAIN, user=ScriptedUser(), link=link)
    inproc, through, trip = [], [], []
    try:
        for _ in range(REPS):
            inproc.append(
                float(
                    link.call(
                        {
                            "op": "inprocess_us",
                            "domain": DOMAIN,
                            "task": task_id,
                            "call": call,
                            "n": n,
                        }
                    )
                )
            )
            env.reset(options={"task": task_id})
            through.append(_step_us(env, call, n))
            trip.append(_roundtrip_us(link, n))
    finally:
        env.close()
    a, b, c = (statistics.median(x) for x in (inproc, through, trip))
    keys = {
        "tau2_inprocess_us": a,
        "envgym_tau2_us": b,
        "tau2_link_roundtrip_us": c,
        "envgym_over_inprocess_ratio": b / a,
    }
    return keys, link.mode, call["name"]


def run(quick: bool = False) -> BenchResult:
    keys, mode, tool = tau2_keys(quick)
    bare, via = (
        statistics.median(x) for x in zip(*(_mcp(50 if quick else 300) for _ in range(REPS)))
    )
    return BenchResult(
        benchmark="tau2",
        metrics={
            **keys,
            "mcp_bare_us": bare,
            "mcp_envgym_us": via,
            "mcp_envgym_over_bare_ratio": via / bare,
        },
        units={
            "tau2_inprocess_us": "µs",
            "envgym_tau2_us": "µs",
            "tau2_link_roundtrip_us": "µs",
            "envgym_over_inprocess_ratio": "×",
            "mcp_bare_us": "µs",
            "mcp_envgym_us": "µs",
            "mcp_envgym_over_bare_ratio": "×",
        },  # fmt: skip
        notes={
            "tau2_inprocess_us": f"{DOMAIN} {tool}: Environment.get_response in τ²'s process",
            "envgym_tau2_us": f"Tau2Env.step with that call, link mode {mode}",
            "tau2_link_roundtrip_us": "an empty request to τ² (the worker pipe in worker mode)",
            "envgym_over_inprocess_ratio": "target ≤ 2",
            "mcp_bare_us": "add(2, 3), bare mcp ClientSession over stdio",
            "mcp_envgym_us": "the same call through envgym.mcp.McpToolset",
            "mcp_envgym_over_bare_ratio": "target ≤ 1.2",
        },  # fmt: skip
    )


if __name__ == "__main__":  # in .venv-tau2 (PYTHONPATH=.): the τ² keys with τ² in envgym's process
    keys, mode, _ = tau2_keys("--quick" in sys.argv, mode="inprocess")
    print(json.dumps({**keys, "mode": mode}))
