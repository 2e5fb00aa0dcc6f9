"""A synthesis run: N jobs of one agent → validated bundles in ``OUT/``, resumable.

Job ``i`` of a run has seed ``seed + i`` and key ``<agent slug>-<seed + i>``; a rerun with the
same arguments (after a crash, or with a larger ``--n``) skips every journaled job and finishes
any half-recorded one (:class:`~envgym.synth_agents.recorder.SynthRecorder`).  Making and validating
a bundle happens in worker processes (procedural agents) or in this process (an LLM agent holds
its model); near-duplicate checks, placement and recording happen here, one job at a time.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import multiprocessing
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from envgym.bundle import load_bundle, write_manifest
from envgym.synth_agents.dedup import NearDuplicateIndex
from envgym.synth_agents.recorder import KEPT, REJECTED, SynthRecorder
from envgym.synth_agents.validate import REASONS, Problem, ValidationResult, validate_bundle


@dataclass(frozen=True)
class Job:
    index: int
    seed: int
    key: str  # unique within the output directory; also the bundle's directory name


@dataclass(frozen=True)
class MakeOutcome:
    """What an agent did for one job: a bundle in the staging directory, or why not."""

    made: bool
    reason: str = ""  # a REASONS key when not made
    detail: str = ""
    info: dict[str, Any] = field(
        default_factory=dict
    )  # agent-specific facts (LLM turns, stages...)


class SynthAgent(Protocol):
    slug: str  # used in job keys: "<slug>-<seed>"
    name: str  # provenance, e.g. "procedural:retail_orders" or "llm:smollm2"
    category: str

    def make(self, job: Job, staging: Path) -> MakeOutcome: ...


@dataclass(frozen=True)
class ValidationSettings:
    sandbox: str = "bwrap"
    corruptions_per_task: int = 20
    reruns: int = 3
    mutation: bool | None = None  # validate_bundle's: on for a machine-written verifier


@dataclass(frozen=True)
class JobResult:
    job: Job
    made: MakeOutcome
    validation: ValidationResult | None
    seconds: float


@dataclass
class RunSummary:
    category: str
    agent: str
    requested: int
    resumed: int = 0  # jobs already journaled before this run
    made: int = 0
    validated: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    kept_tasks: int = 0
    dropped_duplicates: int = 0
    seconds: float = 0.0
    kept_bundles: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rejected": dict(self.rejected)}


Progress = Callable[[int, int, dict[str, Any] | None], None]  # (done, total, journal record)


def jobs_for(agent: SynthAgent, n: int, seed: int) -> list[Job]:
    return [Job(i, seed + i, f"{agent.slug}-{seed + i}") for i in range(n)]


def run_synthesis(
    agent: SynthAgent,
    *,
    n: int,
    seed: int,
    recorder: SynthRecorder,
    settings: ValidationSettings = ValidationSettings(),
    workers: int = 1,
    progress: Progress | None = None,
) -> RunSummary:
    """Run (or resume) ``n`` jobs; returns the summary of all ``n``, resumed ones included."""
    if n < 1:
        raise ValueError(f"--n must be at least 1, not {n}")
    started = time.perf_counter()
    recorder.recover()
    jobs = jobs_for(agent, n, seed)
    todo = [j for j in jobs if recorder.job(j.key) is None]
    index = _dedup_index(recorder)
    done = len(jobs) - len(todo)
    if progress:
        progress(done, len(jobs), None)
    for result in _results(agent, todo, recorder, settings, workers):
        record = _commit(agent, result, recorder, index)
        done += 1
        if progress:
            progress(done, len(jobs), record)
    summary = summarize(agent, [recorder.job(j.key) or {} for j in jobs])
    summary.resumed = len(jobs) - len(todo)
    summary.seconds = time.perf_counter() - started
    return summary


def summarize(agent: SynthAgent, records: list[dict[str, Any]]) -> RunSummary:
    s = RunSummary(category=agent.category, agent=agent.name, requested=len(records))
    for r in records:
        s.made += bool(r.get("made"))
        if r.get("status") == "kept":
            s.validated += 1
            s.kept_tasks += len(r.get("tasks", []))
            s.kept_bundles.append(r["bundle"])
        else:
            s.rejected.update(r.get("reasons") or ["unknown"])
        s.dropped_duplicates += len(r.get("duplicates", []))
    return s


def _results(
    agent: SynthAgent,
    jobs: list[Job],
    recorder: SynthRecorder,
    settings: ValidationSettings,
    workers: int,
) -> Iterator[JobResult]:
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield make_and_validate(agent, job, recorder.staging(job.key), settings)
        return
    pool = _pool(workers)
    pending: dict[Future[JobResult], Job] = {}
    queue = iter(jobs)
    try:
        for job in queue:
            pending[
                pool.submit(make_and_validate, agent, job, recorder.staging(job.key), settings)
            ] = job
            if len(pending) >= 2 * workers:
                break
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                pending.pop(future)
                next_job = next(queue, None)
                if next_job is not None:
                    pending[
                        pool.submit(
                            make_and_validate,
                            agent,
                            next_job,
                            recorder.staging(next_job.key),
                            settings,
                        )
                    ] = next_job
                yield future.result()
    except BrokenProcessPool as exc:
        _POOLS.pop(workers, None)
        raise RuntimeError(f"a synthesis worker process died ({exc}); rerun to resume") from None
    finally:
        # Stopped early (an error, an interrupt): let running jobs finish before anyone reuses
        # their staging directories; queued ones never start.
        for future in pending:
            future.cancel()
        wait(pending)


_POOLS: dict[int, ProcessPoolExecutor] = {}


def _pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes, started once per process and size (spawning costs seconds of imports)."""
    pool = _POOLS.get(workers)
    if pool is None:
        context = multiprocessing.get_context("spawn")
        pool = _POOLS[workers] = ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_die_with_parent
        )
        if len(_POOLS) == 1:
            atexit.register(_shutdown_pools)
    return pool


def _shutdown_pools() -> None:
    for pool in _POOLS.values():
        pool.shutdown(wait=True, cancel_futures=True)
    _POOLS.clear()


def _die_with_parent() -> None:
    """Workers die with the run (PR_SET_PDEATHSIG): a killed run leaves no worker writing."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


def make_and_validate(
    agent: SynthAgent, job: Job, staging: Path, settings: ValidationSettings
) -> JobResult:
    """Make the job's bundle in ``staging`` (emptied first) and validate it."""
    import shutil

    started = time.perf_counter()
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    try:
        made = agent.make(job, staging)
    except Exception as exc:  # noqa: BLE001 - an agent bug rejects this job, never the run
        made = MakeOutcome(False, "build_failed", f"{type(exc).__name__}: {exc}")
    validation = None
    if made.made:
        validation = validate_bundle(
            staging,
            sandbox=settings.sandbox,
            reruns=settings.reruns,
            corruptions_per_task=settings.corruptions_per_task,
            seed=job.seed,
            mutation=settings.mutation,
        )
    return JobResult(job, made, validation, time.perf_counter() - started)


def _dedup_index(recorder: SynthRecorder) -> NearDuplicateIndex:
    index = NearDuplicateIndex()
    for record in recorder.jobs():
        if record.get("status") == "kept":
            root = recorder.final(record)
            for line in (root / "tasks.jsonl").read_text().splitlines() if root.is_dir() else []:
                task = json.loads(line)
                index.add(
                    record["category"],
                    f"{record['key']}/{task['id']}",
                    task["prompt"],
                    record["state_hash"],
                    task.get("metadata", {}),
                )
    return index


def _drop_duplicates(
    agent: SynthAgent, root: Path, state_hash: str, index: NearDuplicateIndex, key: str
) -> list[dict[str, Any]]:
    """Remove near-duplicate tasks from the bundle in ``root`` (re-hashing it); what was dropped."""
    lines = [json.loads(x) for x in (root / "tasks.jsonl").read_text().splitlines() if x.strip()]
    keep, dropped = [], []
    local = NearDuplicateIndex(threshold=index.threshold)
    for task in lines:
        meta = task.get("metadata", {})
        hit = index.find(agent.category, task["prompt"], state_hash, meta) or local.find(
            "", task["prompt"], state_hash, meta
        )
        if hit is None:
            keep.append(task)
            local.add("", f"{key}/{task['id']}", task["prompt"], state_hash, meta)
        else:
            dropped.append(
                {"task_id": task["id"], "duplicate_of": hit[0], "similarity": round(hit[1], 3)}
            )
    if dropped and keep:
        manifest = json.loads((root / "manifest.json").read_text())
        (root / "tasks.jsonl").write_text(
            "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in keep)
        )
        write_manifest(
            root,
            name=manifest["name"],
            category=manifest["category"],
            description=manifest.get("description", ""),
            provenance=manifest["provenance"],
        )
    return dropped


def _commit(
    agent: SynthAgent, result: JobResult, recorder: SynthRecorder, index: NearDuplicateIndex
) -> dict[str, Any]:
    job, made, validation = result.job, result.made, result.validation
    staging = recorder.staging(job.key)
    problems: list[Problem] = (
        [] if made.made else [Problem(made.reason or "build_failed", made.detail)]
    )
    duplicates: list[dict[str, Any]] = []
    tasks: list[str] = []
    content_hash = state = ""
    if validation is not None:
        problems += list(validation.problems)
        content_hash, state = validation.content_hash, validation.state_hash
        if validation.passed:
            duplicates = _drop_duplicates(agent, staging, state, index, job.key)
            all_tasks = [
                json.loads(x)["id"]
                for x in (staging / "tasks.jsonl").read_text().splitlines()
                if x.strip()
            ]
            if len(duplicates) == len(all_tasks):
                problems.append(
                    Problem(
                        "duplicate",
                        "; ".join(f"{d['task_id']} ~ {d['duplicate_of']}" for d in duplicates),
                    )
                )
            else:
                tasks = [t for t in all_tasks if t not in {d["task_id"] for d in duplicates}]
                content_hash = load_bundle(staging).manifest.content_hash
    status = "kept" if made.made and not problems else "rejected"
    has_bundle = made.made and staging.is_dir()
    record = {
        "index": job.index,
        "seed": job.seed,
        "agent": agent.name,
        "category": agent.category,
        "status": status,
        "made": made.made,
        "bundle": f"{KEPT if status == 'kept' else REJECTED}/{job.key}" if has_bundle else None,
        "content_hash": content_hash,
        "state_hash": state,
        "tasks": tasks,
        "duplicates": duplicates,
        "reasons": list(dict.fromkeys(p.reason for p in problems)),
        "problems": [asdict(p) for p in problems],
        "validation": validation.to_dict() if validation is not None else None,
        "agent_info": made.info,
        "seconds": round(result.seconds, 3),
    }
    recorder.commit_job(job.key, record)
    if status == "kept":
        for line in (recorder.final(record) / "tasks.jsonl").read_text().splitlines():
            task = json.loads(line)
            index.add(
                agent.category,
                f"{job.key}/{task['id']}",
                task["prompt"],
                state,
                task.get("metadata", {}),
            )
    return record


__all__ = [
    "REASONS",
    "Job",
    "JobResult",
    "MakeOutcome",
    "RunSummary",
    "SynthAgent",
    "ValidationSettings",
    "jobs_for",
    "make_and_validate",
    "run_synthesis",
    "summarize",
]
