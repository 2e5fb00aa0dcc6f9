"""``envgym bench scale``: N concurrent trip-planning episodes, bwrap and in-process, in one run.

For each N (1, 8, 32, 128, 512; ``--quick``: 1 and 8) and each backend, N envs are made, each
in its own thread as the rollout engine runs them, and go through ``rounds`` episodes of a
scripted policy in lock-step: all N reset at once (a barrier), then each makes three tool-call
steps (two lookups and a wrong plan, which the verifier fails).  Lock-step is the hard case for
a pool of pre-started workers: every env wants its next worker at the same moment.

Measured per (backend, N): reset p50/p99 and resets/s (N over the wall time of one reset burst),
step p50/p99 and steps/s, memory and fds per env once every env has had one episode (idle
sandboxes: PSS of this process's descendants, which counts shared pages once, the PSS of the
worker interpreters alone, and RSS per sandbox process), errored episodes (an exception, or a tool call that failed for the
infrastructure: crash, timeout, protocol, internal error) and processes left after close().

Knobs: ``ENVGYM_SCALE_LEVELS`` (e.g. ``1,8,32``), ``ENVGYM_SCALE_BACKENDS`` (``bwrap,inprocess``;
a bwrap backend + ``-source``: workers compile the bundle's code themselves, the baseline of the
host-compiled bytecode),
``ENVGYM_SCALE_ROUNDS`` (episodes per env, default 3; quick 2).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from envgym.bench import BenchResult
from envgym.bundle import Bundle, load_bundle
from envgym.bundle_env import BundleEnv

LEVELS = (1, 8, 32, 128, 512)
QUICK_LEVELS = (1, 8)
# bwrap-cold: bwrap without pre-started workers (every reset starts its worker), the baseline.
# bwrap-fork(-cold): the same with workers forked by the fork server (ENVGYM_SANDBOX_FORK=1).
BACKENDS = ("bwrap", "bwrap-cold", "bwrap-fork", "bwrap-fork-cold", "inprocess")
# Not run by default: a bwrap backend + "-source", whose workers compile the bundle's code from
# source (as before envgym/sandbox/bytecode.py): the baseline of that change, in the same run.
SOURCE = "-source"
KNOWN = BACKENDS + tuple(b + SOURCE for b in BACKENDS if b.startswith("bwrap"))
FORK_SWITCH = "ENVGYM_SANDBOX_FORK"
INFRA_ERRORS = frozenset({"timeout", "crash", "protocol", "internal_error", "memory"})
BARRIER_TIMEOUT_S = 600.0
WRONG_PLAN = [{
    "time": "2025-10-05", "city": "Beijing", "hotel": "h", "afternoon_restaurant": "r",
    "afternoon_attraction": "a", "evening_restaurant": "e",
}]  # fmt: skip


def _call(i: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"id": f"c{i}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
    return {"role": "assistant", "content": "", "tool_calls": [call]}


SCRIPT = (
    _call(1, "get_all_cities", {}),
    _call(2, "get_all_cities", {}),
    _call(3, "submit_result", {"answer_text": json.dumps(WRONG_PLAN)}),
)


@dataclass
class _Level:
    """What the threads of one (backend, N) run record (lists appended under the GIL)."""

    resets: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    reset_walls: list[tuple[float, float]] = field(default_factory=list)
    step_walls: list[tuple[float, float]] = field(default_factory=list)
    errored: int = 0
    episodes: int = 0
    first_error: str = ""


def _pss_kib(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in KiB, 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            values = dict(line.split(":", 1) for line in fh if ":" in line)
        return int(values["Pss"].split()[0]), int(values["Rss"].split()[0])
    except (OSError, KeyError, ValueError):
        return 0, 0


def _leftover() -> int:
    """Descendants that are not the fork server (which lives as long as this process)."""
    from envgym.sandbox.fork import server_processes

    server = server_processes()
    return sum(pid not in server for pid in _descendants())


def _descendants() -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(parent, []).append(int(entry))
    todo, seen = [os.getpid()], []
    while todo:
        kids = parents.get(todo.pop(), [])
        seen.extend(kids)
        todo.extend(kids)
    return seen


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _sandboxes(pids: list[int]) -> list[int]:
    """Sandbox workers among ``pids`` (each sandbox is bwrap, its init and one interpreter)."""
    workers = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        # bwrap and its init carry the same argv as the worker they start: match the interpreter.
        if b"python" in argv[0] and any(
            a.endswith((b"/sandbox/worker.py", b"/sandbox/worker.pyc")) for a in argv
        ):
            workers.append(pid)
        elif _comm(pid) == "envgym-worker":  # forked: the fork server's argv, its own name
            workers.append(pid)
    return workers


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _episode(env: BundleEnv, task: int, level: _Level, barrier: threading.Barrier) -> None:
    problem = ""
    barrier.wait(BARRIER_TIMEOUT_S)
    t0 = time.perf_counter()
    try:
        env.reset(options={"task": task})
    except Exception as exc:  # noqa: BLE001 - counted as an errored episode, the run goes on
        problem = f"reset: {type(exc).__name__}: {exc}"
    t1 = time.perf_counter()
    level.resets.append(t1 - t0)
    level.reset_walls.append((t0, t1))
    barrier.wait(BARRIER_TIMEOUT_S)
    s0 = time.perf_counter()
    for action in SCRIPT if not problem else ():
        t = time.perf_counter()
        try:
            _, _, terminated, truncated, info = env.step(action)
        except Exception as exc:  # noqa: BLE001
            problem = f"step: {type(exc).__name__}: {exc}"
            break
        level.steps.append(time.perf_counter() - t)
        infra = INFRA_ERRORS & set(info.get("errors") or {})
        if infra:
            problem = (
                f"tool call failed: {sorted(infra)}: {str(env.history[-1].get('content'))[:200]}"
            )
            break
        if terminated or truncated:
            break
    level.step_walls.append((s0, time.perf_counter()))
    level.episodes += 1
    if problem:
        level.errored += 1
        level.first_error = level.first_error or problem


def run_level(bundle: Bundle, backend: str, n: int, rounds: int) -> dict[str, float | str]:
    """One (backend, N): make N envs, ``rounds`` lock-step episodes each, close them."""
    from envgym.sandbox.bwrap import BwrapSandbox

    fds0, procs0 = _fds(), _leftover()
    source, sandbox = backend.endswith(SOURCE), backend.removesuffix(SOURCE)
    sandbox, prestart = sandbox.removesuffix("-cold"), not sandbox.endswith("-cold")
    fork, sandbox = sandbox.endswith("-fork"), sandbox.removesuffix("-fork")

    def make(_: int) -> BundleEnv:
        return BundleEnv(bundle, sandbox=sandbox, prestart=prestart)

    before = os.environ.get(FORK_SWITCH)
    os.environ[FORK_SWITCH] = "1" if fork else "0"  # read when a sandbox is made
    BwrapSandbox.loads_bytecode = not source  # read when a sandbox stages the code
    try:
        with ThreadPoolExecutor(min(n, 16)) as pool:
            envs = list(pool.map(make, range(n)))
    finally:
        BwrapSandbox.loads_bytecode = True
        if before is None:
            del os.environ[FORK_SWITCH]
        else:
            os.environ[FORK_SWITCH] = before
    level = _Level()
    tasks = len(bundle.tasks)
    try:
        for r in range(rounds):
            barrier = threading.Barrier(n)
            threads = [
                threading.Thread(target=_episode, args=(env, (i + r) % tasks, level, barrier))
                for i, env in enumerate(envs)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if r == 0:  # every env has had an episode: idle sandboxes (+ spares being made)
                time.sleep(0.5)
                family = _descendants()
                pss, rss = zip(*(_pss_kib(p) for p in family)) if family else ((0,), (0,))
                workers = _sandboxes(family)
                idle = {"fds": _fds() - fds0, "pss": sum(pss), "rss": sum(rss),
                        "procs": len(family) - procs0, "boxes": len(workers),
                        "worker_pss": sum(_pss_kib(p)[0] for p in workers)}  # fmt: skip
    finally:
        with ThreadPoolExecutor(min(n, 16)) as pool:
            list(pool.map(lambda env: env.close(), envs))
    time.sleep(0.2)
    return {
        "reset_p50_ms": 1000 * _quantile(level.resets, 0.5),
        "reset_p99_ms": 1000 * _quantile(level.resets, 0.99),
        "resets_per_s": _rate(level.resets, level.reset_walls, n),
        "step_p50_ms": 1000 * _quantile(level.steps, 0.5),
        "step_p99_ms": 1000 * _quantile(level.steps, 0.99),
        "steps_per_s": _rate(level.steps, level.step_walls, n),
        "pss_mib_per_env": idle["pss"] / 1024 / n,
        "pss_mib_per_sandbox": idle["pss"] / 1024 / max(1, idle["boxes"]),
        # The interpreter alone (bwrap and its init add ~0.3 MiB of PSS per sandbox).
        "worker_pss_mib": idle["worker_pss"] / 1024 / max(1, idle["boxes"]),
        "rss_mib_per_process": idle["rss"] / 1024 / max(1, idle["procs"]),
        "sandboxes_per_env": idle["boxes"] / n,
        "processes_per_env": idle["procs"] / n,
        "fds_per_env": idle["fds"] / n,
        "errored_episodes": float(level.errored),
        "episodes": float(level.episodes),
        "leaked_processes": float(_leftover() - procs0),
        "first_error": level.first_error,
    }


def _rate(events: list[float], walls: list[tuple[float, float]], n: int) -> float:
    """Events per second of wall time, counting only the rounds' bursts (not the barriers)."""
    span = sum(end - start for start, end in _bursts(walls, n))
    return len(events) / span if span > 0 else float("nan")


def _bursts(walls: list[tuple[float, float]], n: int) -> list[tuple[float, float]]:
    """The wall span of each round's burst of ``n`` intervals."""
    ordered = sorted(walls)
    return [
        (min(s for s, _ in ordered[r : r + n]), max(e for _, e in ordered[r : r + n]))
        for r in range(0, len(ordered) - n + 1, n)
    ]


def _ints(name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        values = tuple(int(v) for v in raw.split(","))
    except ValueError:
        raise ValueError(f"${name} must be comma-separated whole numbers, got {raw!r}") from None
    if not values or any(not 1 <= v <= 4096 for v in values):
        raise ValueError(f"${name} values must be between 1 and 4096, got {raw!r}")
    return values


def run(quick: bool = False) -> BenchResult:
    from envgym.envs.trip_planning.build import default_bundle_dir

    levels = _ints("ENVGYM_SCALE_LEVELS", QUICK_LEVELS if quick else LEVELS)
    (rounds,) = _ints("ENVGYM_SCALE_ROUNDS", (2,) if quick else (3,))
    backends = tuple(os.environ.get("ENVGYM_SCALE_BACKENDS", ",".join(BACKENDS)).split(","))
    unknown = set(backends) - set(KNOWN)
    if unknown:
        raise ValueError(
            f"$ENVGYM_SCALE_BACKENDS: unknown backend(s) {sorted(unknown)}; known: {KNOWN}"
        )
    bundle = load_bundle(default_bundle_dir())
    metrics: dict[str, float] = {}
    units: dict[str, str] = {}
    notes: dict[str, str] = {}
    for backend in backends:
        for n in levels:
            row = run_level(bundle, backend, n, rounds)
            # One line per level on stderr: a long run shows where it is (stdout stays one JSON).
            print(json.dumps({"backend": backend, "n": n, **row}), file=sys.stderr, flush=True)
            for key, value in row.items():
                name = f"{backend}_{n}_{key}"
                if isinstance(value, str):
                    if value:
                        notes[f"{backend}_{n}_errored_episodes"] = f"first: {value[:300]}"
                    continue
                metrics[name] = value
                units[name] = _unit(key)
    notes["scale"] = (
        f"levels {list(levels)}, {rounds} lock-step episodes per env, trip-planning, "
        f"{os.cpu_count()} cpus; targets (bwrap): reset p50 ≤ 5 ms at 1 and ≤ 20 ms at 128, "
        "≥ 200 resets/s at 128, 0 errored at 512, ≤ 10 MiB per idle sandbox"
    )
    return BenchResult(benchmark="scale", metrics=metrics, units=units, notes=notes)


def _unit(key: str) -> str:
    if key.endswith("_ms"):
        return "ms"
    if key.endswith("_per_s"):
        return "1/s"
    if "mib" in key:
        return "MiB"
    return "count"
