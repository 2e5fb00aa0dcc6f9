"""``envgym bench soak``: many concurrent trip-planning episodes for M minutes; does anything leak?

256 episodes stay in flight (each in its own env and bubblewrap sandbox), driven through the
rollout engine by the scripted gold agent (even samples) and the random agent (odd samples),
until M minutes have passed; then the run drains and everything is closed.  Open file
descriptors, child processes and RSS (this process + its children) are sampled before and
after; the baseline is taken after a short warm-up soak of the same shape, so imports, caches
and the allocator's working set are not counted as growth.  Targets: fds, processes and RSS back to baseline within 5 %; no episode lost
(started but never reported) or stuck (still running a drain period after the end).

Knobs (``run`` keyword arguments, else environment variables): ``minutes`` /
``ENVGYM_SOAK_MINUTES`` (default 2; quick 0.25), ``concurrency`` / ``ENVGYM_SOAK_CONCURRENCY``
(default 256), ``sandbox`` / ``ENVGYM_SOAK_SANDBOX`` (default ``bwrap``; ``inprocess`` runs tools
in this process — documented in docs/EVAL.md, not the default).  Loopback only: no network.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from envgym.bench import BenchResult
from envgym.bundle import load_bundle
from envgym.bundle_env import BundleEnv
from envgym.heap import release_freed
from envgym.rollout import AgentPolicy, EpisodeSpec, RolloutBudget, RolloutEngine

EPISODE_BUDGET = RolloutBudget(max_turns=48, max_seconds=120.0)
DRAIN_S = 180.0  # an episode still running this long after the end is stuck


@dataclass(frozen=True)
class Sample:
    fds: int
    children: int
    rss_mib: float


def _parents() -> dict[int, int]:
    """pid → parent pid of every process, from one pass over /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    out[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        kids.setdefault(parent, []).append(child)
    todo, seen = [pid], []
    while todo:
        found = kids.get(todo.pop(), [])
        seen.extend(found)
        todo.extend(found)
    return seen


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def sample() -> Sample:
    release_freed()  # so RSS measures what is still held, not glibc's cache of freed memory
    me = os.getpid()
    family = _descendants(me)
    return Sample(
        fds=len(os.listdir("/proc/self/fd")),
        children=len(family),
        rss_mib=_rss_mib(me) + sum(_rss_mib(p) for p in family),
    )


async def _soak(
    bundle_dir: str, concurrency: int, seconds: float, sandbox: str, *, episodes: int | None = None
) -> dict[str, float]:
    """Keep ``concurrency`` episodes in flight for ``seconds`` (or run exactly ``episodes``)."""
    policy = AgentPolicy.mixed(bundle_dir, sandbox=sandbox)
    tasks = [t.id for t in load_bundle(bundle_dir).tasks]
    started = finished = errored = turns = passed = 0
    peak = Sample(0, 0, 0.0)
    deadline = time.monotonic() + seconds

    def specs() -> Iterator[EpisodeSpec]:
        nonlocal started
        i = 0
        while (i < episodes) if episodes is not None else (time.monotonic() < deadline):
            started += 1
            yield EpisodeSpec(tasks[i % len(tasks)], sample=i, seed=0)
            i += 1

    async def sampler() -> None:
        nonlocal peak
        while True:
            await asyncio.sleep(5)
            now = await asyncio.to_thread(sample)
            peak = Sample(
                max(peak.fds, now.fds),
                max(peak.children, now.children),
                max(peak.rss_mib, now.rss_mib),
            )

    factory = functools.partial(BundleEnv, bundle_dir, sandbox=sandbox)
    engine = RolloutEngine.local(policy, factory, concurrency=concurrency, budget=EPISODE_BUDGET)
    watcher = asyncio.create_task(sampler())
    t0 = time.monotonic()
    try:
        async with engine, contextlib.aclosing(engine.run(specs())) as stream:

            async def consume() -> None:
                nonlocal finished, errored, turns, passed
                async for result in stream:
                    finished += 1
                    errored += result.error is not None
                    passed += result.passed
                    turns += result.turns

            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(consume(), seconds + DRAIN_S)
    finally:
        watcher.cancel()
        await policy.aclose()
    elapsed = time.monotonic() - t0
    stuck = started - finished  # only possible when the drain timed out
    return {
        "soak_episodes": float(finished),
        "stuck_episodes": float(stuck),
        "errored_episodes": float(errored),
        "passed_episodes": float(passed),
        "episodes_per_s": finished / elapsed,
        "steps_per_s": turns / elapsed,
        "peak_children": float(peak.children),
        "peak_rss_mib": peak.rss_mib,
    }


def run(
    quick: bool = False,
    *,
    minutes: float | None = None,
    concurrency: int | None = None,
    sandbox: str | None = None,
) -> BenchResult:
    from envgym.envs.trip_planning.build import default_bundle_dir

    minutes = (
        minutes
        if minutes is not None
        else float(os.environ.get("ENVGYM_SOAK_MINUTES", 0.25 if quick else 2.0))
    )
    concurrency = concurrency or int(os.environ.get("ENVGYM_SOAK_CONCURRENCY", 256))
    sandbox = sandbox or os.environ.get("ENVGYM_SOAK_SANDBOX", "bwrap")
    bundle_dir = str(default_bundle_dir())

    # Warm-up with the same shape: every one of the ``concurrency`` envs opened and reused once,
    # so imports, caches and the allocator's arenas reach their working size and what the long
    # run adds is growth.
    asyncio.run(_soak(bundle_dir, concurrency, 0.0, sandbox, episodes=2 * concurrency))
    before = sample()
    metrics = asyncio.run(_soak(bundle_dir, concurrency, minutes * 60, sandbox))
    after = sample()
    metrics.update(
        fd_growth=float(after.fds - before.fds),
        proc_growth=float(after.children - before.children),
        rss_growth_ratio=after.rss_mib / before.rss_mib,
        baseline_rss_mib=before.rss_mib,
        after_rss_mib=after.rss_mib,
        concurrency=float(concurrency),
        minutes=minutes,
    )
    units = {k: "count" for k in metrics}
    units.update(
        rss_growth_ratio="ratio",
        episodes_per_s="1/s",
        steps_per_s="1/s",
        peak_rss_mib="MiB",
        baseline_rss_mib="MiB",
        after_rss_mib="MiB",
        minutes="min",
    )
    notes = {
        "fd_growth": f"target ≤ 5% of {before.fds} baseline fds",
        "proc_growth": f"target 0 (baseline {before.children} descendants)",
        "rss_growth_ratio": "after / before (this process + descendants); target ≤ 1.05",
        "stuck_episodes": "started but unfinished after the drain; target 0",
        "soak_episodes": f"{concurrency} in flight, sandbox {sandbox}, scripted + random agents",
    }
    return BenchResult(benchmark="soak", metrics=metrics, units=units, notes=notes)
