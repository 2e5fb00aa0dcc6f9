"""``envgym bench tau2``: a τ² tool call in τ²'s process vs. the same call through ``Tau2Env``.

* ``tau2_inprocess_us`` — τ²'s own tool path, ``Environment.get_response`` (the call τ²'s
  orchestrator makes), timed inside the process that runs τ²;
* ``envgym_tau2_us`` — one ``Tau2Env.step`` carrying that tool call (action normalisation, call
  ids, the τ² link, the tool message), timed in envgym's process;
* ``tau2_link_roundtrip_us`` — an empty request over the same link: what the process boundary
  costs when τ² runs in its own venv (.venv-tau2, docs/TAU2.md);
* ``envgym_over_inprocess_ratio`` — target ≤ 2 (issue 14).  The link mode is in the notes.

Medians of ``REPS`` repetitions of a timed loop, baseline and envgym path in the same run.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from envgym.bench import BenchResult
from envs.tau2.env import Tau2Env
from envs.tau2.link import Tau2Link
from envs.tau2.oracle import ScriptedUser
from envs.tau2.tasks import domain_tasks

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


def run(quick: bool = False) -> BenchResult:
    n = 200 if quick else 2000
    task_id, call = _read_call()
    link = Tau2Link()
    env = Tau2Env(DOMAIN, user=ScriptedUser(), link=link)
    inproc, through, trip = [], [], []
    try:
        for _ in range(REPS):
            inproc.append(float(link.call({"op": "inprocess_us", "domain": DOMAIN, "task": task_id, "call": call, "n": n})))
            env.reset(options={"task": task_id})
            through.append(_step_us(env, call, n))
            trip.append(_roundtrip_us(link, n))
    finally:
        env.close()
    a, b, c = (statistics.median(x) for x in (inproc, through, trip))
    return BenchResult(
        benchmark="tau2",
        metrics={"tau2_inprocess_us": a, "envgym_tau2_us": b, "tau2_link_roundtrip_us": c,
                 "envgym_over_inprocess_ratio": b / a},  # fmt: skip
        units={"tau2_inprocess_us": "µs", "envgym_tau2_us": "µs", "tau2_link_roundtrip_us": "µs",
               "envgym_over_inprocess_ratio": "×"},  # fmt: skip
        notes={"tau2_inprocess_us": f"{DOMAIN} {call['name']}: Environment.get_response in τ²'s process",
               "envgym_tau2_us": f"Tau2Env.step with that call, link mode {link.mode}",
               "tau2_link_roundtrip_us": "an empty request to τ² (the worker pipe in worker mode)",
               "envgym_over_inprocess_ratio": "target ≤ 2"},  # fmt: skip
    )
