"""Asynchronous GRPO with bounded staleness (``async.enabled``; used by envgym/trainer/loop.py).

LongCat-Flash-Thinking §3.1.1 (DORA) streams rollouts: finished samples go straight to the next
stage instead of waiting for the batch's longest episode, and generation goes on while the trainer
trains; §3.2.2 bounds the *staleness* — how many policy versions a sample may lag — and
regenerates prompts past the bound.  Seed-Thinking §5.2's streaming rollout system makes the same
trade (a completion ratio of on-policy samples, the rest from versioned snapshots).

Here one producer task keeps rolling out batches of prompts and puts each finished GRPO group
(all ``group_size`` samples of a prompt) into a bounded queue (``prompts × (max_staleness + 1)``
groups: it can run ahead of the trainer by about ``max_staleness`` batches).  The trainer pulls
groups until it has ``prompts`` informative ones and trains in a worker thread while the producer
goes on.  A group is *stale* when ``trainer version − oldest turn version > max_staleness`` (every
turn records the version it was sampled with): it is dropped, and with ``stale: regenerate`` its
prompt goes back to the front of the producer's list.  π_old is the trainer's recompute at the
current weights before the update (``old_logprobs: recompute``) and the engine's log-probs drive
truncated IS / off-policy masking, which is what corrects for the lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from envgym.rollout import EpisodeResult, EpisodeSpec
from envgym.trainer.batch import Group, group_results
from envgym.trainer.collect import Collected, StepHost, StepReport, Tally, derive_seed
from envgym.trainer.config import overlong_scope
from envgym.trainer.tasks import TaskRef

ASYNC_SEED_BASE = 1 << 20  # async batches are numbered apart from synchronous steps' seeds


def oldest_version(group: Group) -> int:
    """The oldest policy version any turn of any sample in ``group`` was sampled with."""
    versions = [
        info.policy_version if info.policy_version is not None else r.record.policy_version
        for r in group.results
        for seg in r.record.segments
        for info in seg.turn_info
    ]
    return min(versions, default=min(r.record.policy_version for r in group.results))


@dataclass
class _Shared:
    """What the producer and the consumer of one async run share."""

    queue: asyncio.Queue[Group]
    retry: list[TaskRef] = field(default_factory=list)  # stale prompts to roll out again
    # The step being collected: the producer's finished episodes count there (those finished
    # while the trainer trains count nowhere, as the next step starts a new tally).
    tally: Tally = field(default_factory=Tally)


async def run_async(host: StepHost, reports: list[StepReport]) -> None:
    """Train until ``config.steps`` with one producer streaming groups (module docstring)."""
    c = host.config
    shared = _Shared(asyncio.Queue(maxsize=c.rollout.prompts * (c.async_.max_staleness + 1)))
    producer = asyncio.create_task(_produce(host, shared))
    try:
        while host.step < c.steps:
            collected = await _consume(host, shared, producer)
            reports.append(await host.finish_step(collected))
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)


async def _produce(host: StepHost, shared: _Shared) -> None:
    c = host.config
    batch = 0
    while True:
        refs = shared.retry[: c.rollout.prompts]
        del shared.retry[: len(refs)]
        refs += host.order.take(c.rollout.prompts - len(refs))
        seed = derive_seed(c.seed, ASYNC_SEED_BASE + batch)
        batch += 1
        by_env: dict[int, list[str]] = {}
        for env, task in refs:
            by_env.setdefault(env, []).append(task)
        await asyncio.gather(*(_stream_env(host, shared, e, ts, seed) for e, ts in by_env.items()))


async def _stream_env(
    host: StepHost, shared: _Shared, env: int, tasks: list[str], seed: int
) -> None:
    n = host.config.rollout.group_size
    pending: dict[str, list[EpisodeResult]] = {}
    specs = [EpisodeSpec(t, s, seed=seed) for t in tasks for s in range(n)]
    async with contextlib.aclosing(host.rollout_engines[env].run(specs)) as stream:
        async for result in stream:
            shared.tally.record(result)
            done = pending.setdefault(result.task_id, [])
            done.append(result)
            if len(done) < n:
                continue
            groups, left_out = group_results(pending.pop(result.task_id))
            shared.tally.errored += left_out  # counted in the step collecting now, as in sync mode
            for g in groups:  # one at most: all samples of one task
                g.task_id = f"{env}::{g.task_id}"
                await shared.queue.put(g)


async def _consume(host: StepHost, shared: _Shared, producer: asyncio.Task[None]) -> Collected:
    c = host.config
    tally = shared.tally = Tally()  # what the producer finishes while this step collects
    started = time.monotonic()
    host.on_phase(f"step {host.step + 1}: streaming rollouts (async)")
    refills = c.dynamic_sampling.max_refills if c.dynamic_sampling.enabled else 0
    limit = c.rollout.prompts * (1 + refills)
    kept: list[Group] = []
    pulled = 0
    while len(kept) < c.rollout.prompts and pulled < limit:
        getter = asyncio.ensure_future(shared.queue.get())
        await asyncio.wait({getter, producer}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():  # the producer died: surface its error
            getter.cancel()
            producer.result()
            raise RuntimeError("the rollout producer stopped")
        group = getter.result()
        staleness = host.version - oldest_version(group)
        if staleness > c.async_.max_staleness:
            tally.stale_dropped += 1
            if c.async_.stale == "regenerate":
                env, _, task = group.task_id.partition("::")
                shared.retry.append((int(env), task))
            continue
        pulled += 1
        tally.staleness_max = max(tally.staleness_max or 0, staleness)
        admitted = tally.admit([group], overlong_sample=overlong_scope(c) == "sample")
        kept.extend(tally.informative(admitted, dynamic_sampling=c.dynamic_sampling.enabled))
    tally.refills = max(0, pulled - c.rollout.prompts)
    skipped = None if kept else tally.skip_reason()
    return Collected(kept, skipped, tally, started)
