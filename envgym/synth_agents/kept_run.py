"""The pass@k filter over bundle directories into a kept-tasks file (``envgym filter``, and the
demo's filter step): which tasks a given policy solves at least once in k tries.

``envgym synth --filter-k`` filters while it synthesizes, with whatever model it is given; this
filters bundles that already exist with the policy that will train on them (DeepSeek-V3.2
§3.2.3, after the §3.2.2 cold start: the base model solves nothing, so only the cold-started
policy's filter keeps anything).

Bundles are filtered ``lanes`` at a time (each with ``FilterConfig.concurrency`` episodes), and
each is written to the file as soon as all its tasks are decided (write-then-rename), so a killed
run loses only the bundles in flight and a rerun with the same settings skips what the file
holds.  A file written with other settings is refused by name rather than mixed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from envgym.bundle import load_bundle
from envgym.kept_tasks import KeptBundle, KeptError, KeptTasks, Scalar, load_kept, write_kept
from envgym.policy import Policy
from envgym.synth_agents.filter_run import PolicyFactory
from envgym.synth_agents.passk import FilterConfig, TaskFilterResult, filter_bundle

OnBundle = Callable[[Path, KeptBundle], None]


def filter_settings(model: str, fingerprint: str, config: FilterConfig) -> dict[str, Scalar]:
    """What decides a kept-tasks file: a rerun resumes it only when these are equal."""
    return {
        "model": model,
        "fingerprint": fingerprint,
        "k": config.k,
        "drop_always_solved": config.drop_always_solved,
        "temperature": config.params.temperature,
        "top_p": config.params.top_p,
        "top_k": config.params.top_k,
        "max_tokens": config.params.max_tokens,
        "max_turns": config.budget.max_turns,
        "episode_tokens": config.budget.max_tokens,
        "derive_budget": config.derive_budget,
        "sandbox": config.sandbox,
        "context": config.context,
        "parser": config.parser,
        "seed": config.seed,
    }


def resume_or_start(out: Path, settings: dict[str, Scalar], *, restart: bool) -> KeptTasks:
    """The file at ``out`` to continue (same settings), or an empty one (none, or ``restart``)."""
    if restart or not out.exists():
        return KeptTasks(dict(settings), {})
    try:
        old = load_kept(out)
    except KeptError as err:
        raise KeptError(f"{err}; pass --restart to replace it") from None
    changed = sorted(
        k for k in {*old.settings, *settings} if old.settings.get(k) != settings.get(k)
    )
    if changed:
        was = ", ".join(f"{k}: {old.settings.get(k)!r} → {settings.get(k)!r}" for k in changed)
        raise KeptError(
            f"{out} was written with other settings ({was}); name another file or pass --restart"
        )
    return old


def kept_bundle(root: Path, content_hash: str, results: Sequence[TaskFilterResult]) -> KeptBundle:
    return KeptBundle(
        str(root),
        content_hash,
        len(results),
        tuple(r.task_id for r in results if r.kept),
        {r.task_id: r.pass_rate for r in results},
    )


async def filter_into(
    dirs: Sequence[Path],
    factory: PolicyFactory,
    config: FilterConfig,
    out: Path,
    start: KeptTasks,
    *,
    lanes: int = 2,
    sample: int | None = None,
    on_bundle: OnBundle | None = None,
) -> KeptTasks:
    """Filter every bundle of ``dirs`` (or a seeded ``sample`` of them: ``config.seed``) that
    ``start`` has not filtered; returns the whole file.  Bundles left out of the sample are
    recorded as not filtered (nothing kept).

    ``factory(bundle_dir)`` gives the policy (one shared model; a gold replay per bundle): it is
    called only for bundles left to do, so a finished file never loads the model again."""
    if lanes < 1:
        raise ValueError(f"lanes must be ≥ 1, not {lanes}")
    if sample is not None and sample < 1:
        raise ValueError(f"sample must be ≥ 1, not {sample}")
    bundles = [load_bundle(d) for d in dirs]
    chosen = set(range(len(bundles)))
    if sample is not None and sample < len(bundles):
        chosen = set(random.Random(config.seed).sample(range(len(bundles)), sample))
    kept = start
    for i, b in enumerate(bundles):
        if i not in chosen and b.manifest.content_hash not in kept.bundles:
            entry = KeptBundle(str(b.root), b.manifest.content_hash, len(b.tasks), (), {}, False)
            kept = kept.with_bundle(entry)
    if kept != start:
        write_kept(out, kept)
    filtered = {h for h, e in kept.bundles.items() if e.filtered}
    todo = [
        b for i, b in enumerate(bundles) if i in chosen and b.manifest.content_hash not in filtered
    ]
    if not todo:
        return kept
    gate = asyncio.Semaphore(lanes)
    policies: list[Policy] = []

    async def one(i: int) -> tuple[int, list[TaskFilterResult]]:
        async with gate:
            policy = await asyncio.to_thread(factory, todo[i].root)
            if policy not in policies:
                policies.append(policy)
            return i, await filter_bundle(todo[i], policy, config)

    jobs = [asyncio.ensure_future(one(i)) for i in range(len(todo))]
    try:
        for job in asyncio.as_completed(jobs):
            i, results = await job
            entry = kept_bundle(todo[i].root, todo[i].manifest.content_hash, results)
            kept = kept.with_bundle(entry)
            write_kept(out, kept)
            if on_bundle is not None:
                on_bundle(todo[i].root, entry)
    finally:  # a failed bundle stops the others before their policy is closed under them
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        for policy in policies:
            await policy.aclose()
    return kept
