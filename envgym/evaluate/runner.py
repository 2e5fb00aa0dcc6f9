"""Run an evaluation: N tasks × n samples, resumable, every episode stored as it finishes.

The evaluation key is the hash of (bundle content hash, model fingerprint, config hash); a served
model's fingerprint is what its server lists for it (``served.py``), not its URL.  The
config hash covers what changes results (sampling, budgets or the rule deriving them from each
task's gold length (``budgets.py``), context policy, the model's context
window and overflow strategy, parser, seed, and what builds the envs: a registered id or a bare
bundle directory) and not what only selects or
schedules episodes (k, n, --limit, concurrency, sandbox backend).  Envs are built exactly as
``envgym.make(target)`` builds them (``registry.env_factory``), so a family's own env class runs.
So a rerun — after a kill, or with a larger n — finds the episodes it already has and runs only
the missing ``(task, sample)`` pairs; each sample's seed depends only on (seed, task, sample).

Stored results are reused only when the model is known to be the same: a server whose identity
cannot be read reuses nothing without ``same_model``.  Errored episodes reused from the store
are counted (``EvalRun.reused_errored``) so the CLI can say ``--retry-errors`` reruns them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envgym import registry
from envgym.bundle import Bundle, BundleError, load_bundle
from envgym.context import ContextManager
from envgym.core import Env
from envgym.policy import Policy
from envgym.rollout import EpisodeResult, EpisodeSpec, RolloutBudget, RolloutEngine
from envgym.rollout.errored import ErroredShare, TooManyErrored, check_errored, tally
from envgym.step import EnvBudgets
from envgym.store import Store

from .budgets import GoldLengthError, PerTaskBudgetEngine, task_budgets
from .config import ERRORS_DOMINATE, EvalConfig, EvalError, sha
from .models import ModelRef, load_policy, model_ref, model_tokenizer, model_window
from .served import keyed_ref
from .summary import EvalSummary, noop_solvable, summarize
from .watch import TurnProgress, WatchedPolicy

EvalProgress = Callable[[int, int, EpisodeResult | None], None]  # (done, total, just finished)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalRun:
    key: str
    bundle: Bundle
    model: ModelRef
    summary: EvalSummary
    episodes: list[EpisodeResult]
    ran: int  # episodes run now (the rest came from the store)
    config: EvalConfig | None = None  # as run: with the model's context window filled in
    errored: ErroredShare = ErroredShare()  # over all the episodes, stored ones too
    reused_errored: int = 0  # errored episodes taken from the store (not rerun)
    identity: str = ""  # a served model: what identifies it, or why nothing does

    @property
    def errors_dominate(self) -> bool:
        return self.errored.share > ERRORS_DOMINATE


def evaluation_key(bundle_hash: str, model_fingerprint: str, config_hash: str) -> str:
    return sha(f"{bundle_hash}\n{model_fingerprint}\n{config_hash}")


def open_bundle(target: str | Path) -> Bundle:
    try:
        return load_bundle(registry.resolve_bundle(target))
    except (KeyError, ValueError) as exc:  # BundleError is a ValueError
        if isinstance(exc, BundleError):
            raise EvalError(f"bad bundle {target}: {exc}") from None
        raise EvalError(str(exc).strip('"')) from None


def env_factory(
    target: str | Path,
    config: EvalConfig,
    *,
    tokenizer: str | None = None,
    max_turns: int | None = None,
) -> Callable[[], Env]:
    """The evaluation's envs: ``envgym.make(target, ...)`` with the config's env options.

    With a context window the env renders through a :class:`ContextManager` that compacts with
    the config's overflow strategy past 80 % of the window, counts prompt tokens with
    ``tokenizer`` (the model's; None: the approximate counter), and truncates the episode
    (``truncated_by="context_window"``) when the prompt leaves no room for a sampled token.
    ``max_turns`` past the env's own turn limit raises it (and its tool-call limit with it), so a
    task whose derived budget is longer is not cut by the env first.
    """
    options: dict[str, object] = {"context": config.context}
    window = config.context_window
    if window is not None:
        options["context"] = ContextManager(
            policy=config.context, overflow=config.overflow, window=window
        )
        options["context_window"] = window - 1  # a prompt must leave one token to sample
        if tokenizer is not None:
            options["tokenizer"] = tokenizer
    default = EnvBudgets()
    if max_turns is not None and max_turns > default.max_turns:
        options["max_turns"] = max_turns
        options["max_tool_calls"] = max(default.max_tool_calls, 2 * max_turns)
    try:
        return registry.env_factory(
            target,
            sandbox=config.sandbox,
            parser=config.parser,
            native_tools=config.native_tools,
            time_budget_s=config.budget.max_seconds,
            **options,
        )
    except KeyError as exc:
        raise EvalError(str(exc).strip('"')) from None


async def run_evaluation(
    target: str | Path,
    model: str | ModelRef,
    config: EvalConfig,
    *,
    store: Store,
    policy: Policy | None = None,
    progress: EvalProgress | None = None,
    on_turn: TurnProgress | None = None,
) -> EvalRun:
    """Evaluate ``model`` on ``target`` (an env id or bundle dir).  ``policy`` overrides loading;
    ``on_turn`` hears every sampled turn (progress inside episodes)."""
    bundle = open_bundle(target)
    ref = model if isinstance(model, ModelRef) else model_ref(model)
    if config.context_window is None:
        # The model's own window, from what ``ref`` names whether or not a policy is passed in
        # (the key must not depend on that); a policy for a ref without one may state it.
        window = await asyncio.to_thread(model_window, ref)
        if window is None:
            window = getattr(policy, "context_window", None)
        config = replace(config, context_window=window)
    ref, identity, known = await asyncio.to_thread(keyed_ref, ref)
    factory = env_factory(target, config, tokenizer=model_tokenizer(ref))
    env = registry.env_identity(target)
    tasks = list(bundle.tasks[: config.limit])
    bundle_hash = store.add_bundle(bundle)
    key = evaluation_key(bundle_hash, ref.fingerprint, config.config_hash(env))
    store.open_evaluation(
        key,
        bundle_hash=bundle_hash,
        model=ref.spec,
        model_hash=ref.fingerprint,
        config_hash=config.config_hash(env),
        config=config.keyed_config(env),
    )
    if not known and not config.same_model and store.episode_keys(key):
        raise EvalError(
            f"cannot tell which model {ref.spec} serves ({identity.removeprefix('unknown: ')}), "
            "so the episodes stored for this URL may be another model's: not reusing them. "
            "Rerun with --same-model if the server still serves the model they came from, "
            "or use another --db for a fresh evaluation"
        )
    if config.retry_errors:
        store.delete_errored(key)
    done = store.episode_keys(key)
    wanted = [EpisodeSpec(t.id, s, config.seed) for t in tasks for s in range(config.n)]
    todo = [s for s in wanted if (s.task_id, s.sample) not in done]
    total = len(wanted)
    if progress is not None:
        progress(total - len(todo), total, None)
    if todo:
        try:
            budgets = await asyncio.to_thread(
                task_budgets, factory, config.budget, [s.task_id for s in todo]
            )
        except GoldLengthError as exc:
            raise EvalError(str(exc)) from None
        longest = max(b.max_turns for b in budgets.values())
        if longest > EnvBudgets().max_turns:
            factory = env_factory(target, config, tokenizer=model_tokenizer(ref), max_turns=longest)
        own = policy is None
        active = (
            policy
            if policy is not None
            else await asyncio.to_thread(
                load_policy,
                ref,
                bundle_dir=bundle.root,
                sandbox=config.sandbox,
                env_factory=factory,
            )
        )
        acting: Policy = active if on_turn is None else WatchedPolicy(active, on_turn)
        try:
            await _run(
                factory,
                acting,
                config,
                budgets,
                todo,
                store,
                key,
                total - len(todo),
                total,
                progress,
            )
        finally:
            if own:
                await active.aclose()
    episodes = store.episodes(key, task_ids=[t.id for t in tasks], samples=config.n)
    ran = {(s.task_id, s.sample) for s in todo}
    meta = {
        "key": key,
        "bundle": bundle.manifest.name,
        "bundle_hash": bundle_hash,
        "model": ref.spec,
        "model_hash": ref.fingerprint,
        "config": config.keyed_config(env),
        "samples": config.n,
    }
    if identity:
        meta["model_identity"] = identity
    noop = {} if config.include_noop_tasks else noop_solvable(tasks)
    summary = summarize(episodes, k=config.k, meta=meta, seed=config.seed, exclude=noop)
    store.set_summary(key, summary.to_dict())
    errored = tally(episodes)
    try:
        check_errored(errored, config.max_errored_share, where="eval", log=log)
    except TooManyErrored as exc:
        raise EvalError(str(exc)) from None
    return EvalRun(
        key=key,
        bundle=bundle,
        model=ref,
        summary=summary,
        episodes=episodes,
        ran=len(todo),
        config=config,
        errored=errored,
        reused_errored=sum(
            e.error is not None and (e.task_id, e.sample) not in ran for e in episodes
        ),
        identity=identity,
    )


def offered_tools(target: str | Path, run: EvalRun) -> list[dict[str, Any]]:
    """The tool schemas the model was given: one env of the run, reset on its first task."""
    config = run.config or EvalConfig()
    env = env_factory(target, config, tokenizer=None)()
    try:
        task = run.episodes[0].task_id if run.episodes else run.bundle.tasks[0].id
        obs, _ = env.reset(seed=config.seed, options={"task": task})
        return [dict(t) for t in obs["tools"]]
    finally:
        env.close()


async def _run(
    factory: Callable[[], Env],
    policy: Policy,
    config: EvalConfig,
    budgets: dict[str, RolloutBudget],
    todo: list[EpisodeSpec],
    store: Store,
    key: str,
    done: int,
    total: int,
    progress: EvalProgress | None,
) -> None:
    concurrency = min(config.concurrency, len(todo))
    first = budgets[todo[0].task_id]
    base: RolloutEngine
    if config.ray is not None:
        from envgym.rollout.ray_engine import ray_engine

        base = ray_engine(
            policy,
            factory,
            concurrency=concurrency,
            address=config.ray,
            params=config.params,
            budget=first,
        )
    else:
        base = RolloutEngine.local(
            policy, factory, concurrency=concurrency, params=config.params, budget=first
        )
    engine = PerTaskBudgetEngine(base, budgets) if len(set(budgets.values())) > 1 else base
    errored = ErroredShare()
    async with engine, contextlib.aclosing(engine.run(todo)) as stream:
        async for result in stream:
            errored = errored.add(result)
            # One transaction per episode, written before the next is reported: a kill loses at
            # most the episodes still running.
            await asyncio.to_thread(store.add_episode, key, result)
            done += 1
            if progress is not None:
                progress(done, total, result)
            limit = config.max_errored_share
            if limit is not None and errored.errored > limit * len(todo):
                # The run's share is past the limit whatever the rest does: stop now (what is
                # stored stays; a rerun with --retry-errors resumes).
                raise EvalError(
                    f"eval stopped: {errored.describe()}, over the limit of {limit:.0%}"
                )


def evaluate(
    target: str | Path,
    model: str | ModelRef,
    config: EvalConfig,
    *,
    store: Store | None = None,
    policy: Policy | None = None,
    progress: EvalProgress | None = None,
    on_turn: TurnProgress | None = None,
) -> EvalRun:
    """Synchronous :func:`run_evaluation` (opens the default store when none is given)."""
    own = store is None
    db = store if store is not None else Store()
    try:
        return asyncio.run(
            run_evaluation(
                target,
                model,
                config,
                store=db,
                policy=policy,
                progress=progress,
                on_turn=on_turn,
            )
        )
    finally:
        if own:
            db.close()
