"""The GRPO loop: rollouts → rewards → group advantages → minibatch updates → weight sync.

    trainer = Trainer(load_config("configs/grpo_smollm2.yaml"))
    trainer.run()                      # or: envgym train configs/grpo_smollm2.yaml

One step (synchronous mode):

1. take ``rollout.prompts`` training tasks from the seeded data order (:class:`TaskOrder`) and
   roll out ``rollout.group_size`` episodes of each through envgym's rollout engine with the
   engine policy (the in-process local engine, or a vLLM server);
2. group them; with dynamic sampling (Seed-Thinking §4.2, LongCat §3.2.2) drop the groups whose
   rewards are all equal and roll out more prompts to refill, at most ``max_refills`` rounds;
   before that, whole episodes are masked (LongCat §3.2.2 incomplete-signal masking): those
   with a NaN/inf reward (counted in ``nonfinite_rewards``, logged) and, with
   ``overlong_scope: sample``, those with a turn cut by the token limit (``overlong_masked``);
   an empty batch skips the step (reported);
3. advantages Â = R − mean(R) per group (DeepSeek-V3.2 §3.1 eq. 5; envgym.trainer.advantages);
4. π_old: the trainer's log-probs at the rollout weights (``old_logprobs: recompute``, one no-grad
   pass before any update) or the engine's (``engine``); the engine's own log-probs always feed
   truncated IS and off-policy sequence masking (eq. 8–9; LongCat §3.2.1);
5. ``minibatches`` optimizer steps, each over length-balanced microbatches with gradient
   accumulation, weighted so the minibatch loss equals one pass over all its tokens
   (envgym.trainer.losses.grpo_loss); NaN/inf log-probs or losses skip (reported);
6. the new weights go to the engine (:mod:`envgym.trainer.weight_sync`) and the policy version is
   bumped; metrics, checkpoint.

Asynchronous mode (``async.enabled``; LongCat §3.1.1 DORA, Seed-Thinking §5.2 streaming rollouts)
overlaps rollouts with training: a producer keeps rolling out and streams each finished group into
a bounded queue while the trainer trains; a group whose oldest turn was sampled more than
``async.max_staleness`` versions ago is dropped or regenerated (LongCat §3.2.2 staleness control).
In this in-process engine one set of weights serves every episode, so an episode in flight during a
sync continues under the new weights (each turn records its version; staleness counts the oldest).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from envgym.heap import release_freed
from envgym.policy import SamplingParams
from envgym.rollout import EpisodeResult, EpisodeSpec, RolloutBudget, RolloutEngine
from envgym.rollout.errored import check_errored
from envgym.trainer.batch import Group, group_results, samples_from_groups
from envgym.trainer.checkpoint import (
    TaskOrder,
    config_changes,
    export_policy,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from envgym.trainer.collect import Collected, StepReport, Tally, derive_seed
from envgym.trainer.config import (
    TrainConfig,
    overlong_scope,
    refuse_moe_without_routes,
    resolve_device,
)
from envgym.trainer.lora import apply_lora
from envgym.trainer.metrics import MetricsLog, RunRecord, write_run
from envgym.trainer.policy import TrainablePolicy
from envgym.trainer.ranks import Ranks, rank_device
from envgym.trainer.stream import run_async
from envgym.trainer.tasks import TaskRef, task_split
from envgym.trainer.update import Update
from envgym.trainer.weight_sync import build_engine, load_model, managed_vllm, pad_id, sync_weights

if TYPE_CHECKING:  # transformers is imported where a model is loaded, not at import time
    from transformers import PreTrainedModel

# Defined in envgym.trainer.collect and envgym.trainer.tasks; callers and tests import them from
# here.
__all__ = ["StepReport", "Trainer", "derive_seed", "task_split"]

log = logging.getLogger(__name__)


# Loss options added after runs were already checkpointed: at these values a run computes what
# it did before they existed, so they are left out of its identity (its key and resume check).
_LOSS_DEFAULTS: dict[str, object] = {
    "kind": "grpo",
    "ratio_level": "token",
    "seq_eps_low": 3e-4,
    "seq_eps_high": 4e-4,
    "entropy_coef": 0.0,
    "ref_sync_every": 0,
}


def _run_config(config: TrainConfig | dict[str, Any]) -> dict[str, Any]:
    """The config that identifies a run (its key, what a resume must match): all but ``steps``,
    ``model.device`` and ``model.allow_moe_without_keep_routing`` (a consent, computing
    nothing), with ``overlong_scope`` as the scope it resolves to, left out when that is
    ``turn`` — what every run did before the key existed, so their checkpoints resume; the
    same for the loss options of :data:`_LOSS_DEFAULTS` at their defaults, ``model.lora`` when
    off and ``packing`` when false."""
    data = config.to_dict() if isinstance(config, TrainConfig) else copy.deepcopy(config)
    data.pop("steps", None)
    # Where ranks and rollouts run does not change what a step computes (envgym/trainer/ranks.py).
    data.pop("trainer", None)
    if isinstance(data.get("rollout"), dict):
        data["rollout"].pop("workers", None)
        data["rollout"].pop("ray_address", None)
    if isinstance(data.get("model"), dict):
        data["model"].pop("device", None)
        data["model"].pop("allow_moe_without_keep_routing", None)
        if data["model"].get("lora", "absent") is None:  # added later: off, as if absent
            del data["model"]["lora"]
    for env in data.get("envs") or []:  # ``kept`` was added later; expansion always clears it
        if isinstance(env, dict) and env.get("kept", "absent") is None:
            del env["kept"]
    if data.get("packing") is False:  # added later: off (the update is the same), as if absent
        del data["packing"]
    loss = data.get("loss")
    if isinstance(loss, dict):  # options added later: at their defaults, as if absent
        for key, default in _LOSS_DEFAULTS.items():
            if key in loss and loss[key] == default:
                del loss[key]
    scope = data.pop("overlong_scope", "turn")  # absent: a config from before the key
    if scope == "auto":  # as envgym.trainer.config.overlong_scope resolves it
        rollout = data.get("rollout")
        turns = rollout.get("max_turns", 16) if isinstance(rollout, dict) else 16
        scope = "sample" if isinstance(turns, int) and turns > 1 else "turn"
    if scope == "sample" and data.get("overlong_mask", True):
        data["overlong_scope"] = scope
    return data


class Trainer:
    """Runs the GRPO loop of one :class:`TrainConfig` (see the module docstring).

    ``model``/``tokenizer`` override ``config.model.path`` (tests pass tiny models) and
    ``model.device`` (the model is used where it is);
    ``engine_policy`` overrides the engine built from ``config.model``; ``on_step`` is called
    with each :class:`StepReport`, ``on_phase`` with a short text as phases start.
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        model: PreTrainedModel | None = None,
        tokenizer: Any = None,
        engine_policy: Any = None,
        on_step: Callable[[StepReport], None] | None = None,
        on_phase: Callable[[str], None] | None = None,
        ranks: Ranks | None = None,
    ) -> None:
        self.config = config
        self.ranks = ranks or Ranks()  # rank 0 of trainer.world_size (envgym/trainer/ranks.py)
        if self.ranks.world_size != config.trainer.world_size:
            raise ValueError(
                f"trainer.world_size is {config.trainer.world_size} but this Trainer runs on "
                f"{self.ranks.world_size} rank(s): start it with envgym train or torchrun "
                "(envgym.trainer.ranks_launch.start_ranks), or set trainer.world_size: 1"
            )
        from envgym.trainer.ranks_rollout import require_ray

        require_ray(config)
        self.on_step = on_step or (lambda report: None)
        self.on_phase = on_phase or (lambda text: None)
        torch.manual_seed(config.seed)
        self.train_tasks, self.heldout_tasks = task_split(config)
        self.order = TaskOrder(self.train_tasks, config.seed)
        if model is None:
            # before minutes of loading; an NCCL rank trains on its own GPU
            device = rank_device(config, self.ranks) or resolve_device(config.model.device)
            model, tokenizer = load_model(config)
            # transformers wraps PreTrainedModel.to with functools.wraps, hiding its signature
            model.to(device)  # type: ignore[arg-type]  # a model passed in stays where it was
        elif tokenizer is None:
            raise ValueError("a model passed in needs its tokenizer")
        self.tokenizer = tokenizer
        self.model = model
        from envgym.trainer.routing import moe_routers

        # The config check read config.json when model.path is a folder; this one sees the model.
        refuse_moe_without_routes(config, bool(moe_routers(model)))
        self.policy, self.ref_policy = build_policies(config, model)
        if engine_policy is None and not config.rollout.workers:  # workers: started by arun
            engine_policy = build_engine(config, model, tokenizer)
        self.engine = engine_policy
        self.update = Update(
            config, self.policy, self.ref_policy, pad_id=pad_id(tokenizer), ranks=self.ranks
        )
        self.step = 0
        self.version = 0
        self.metrics = MetricsLog(
            config.metrics.dir, tensorboard=config.metrics.tensorboard, plot=config.metrics.plot
        )
        config_key = _run_config(config)
        self.run_record = RunRecord(
            run_key="sha256:"
            + hashlib.sha256(json.dumps(config_key, sort_keys=True).encode()).hexdigest(),
            model=config.model.path,
            envs=[e.id for e in config.envs],
            config=config.to_dict(),
            metrics_dir=str(Path(config.metrics.dir).resolve()),
            checkpoint_dir=str(Path(config.checkpoint.dir).resolve()),
        )
        self.resumed_from: Path | None = None  # the checkpoint maybe_resume loaded
        # One per config.envs entry, entered when the run starts (arun) and closed at its end.
        self.rollout_engines: list[RolloutEngine] = []

    # -- resume ----------------------------------------------------------------------------------
    def maybe_resume(self) -> Path | None:
        """Load the newest checkpoint of ``checkpoint.dir`` when ``checkpoint.resume``."""
        if not self.config.checkpoint.resume:
            return None
        path = latest_checkpoint(self.config.checkpoint.dir)
        if path is None:
            return None
        state = load_checkpoint(
            path,
            model=self.model,
            optimizer=self.update.optimizer,
            scheduler=self.update.scheduler,
            ref_model=self.ref_policy.model if self.ref_policy is not None else None,
        )
        # Where the model sits does not change what the run computes: a run may resume on
        # another machine, and checkpoints written before model.device existed lack it.
        changed = config_changes(_run_config(state.config), _run_config(self.config))
        if changed:
            raise ValueError(
                f"checkpoint {path} was written under another config "
                f"(changed: {', '.join(changed)}); use a new checkpoint.dir or set "
                "checkpoint.resume: false"
            )
        if self._ref_synced(state.step) and not state.ref_model:
            raise ValueError(
                f"checkpoint {path} is past step {self.config.loss.ref_sync_every} of "
                "loss.ref_sync_every but holds no ref_model.pt (the synced KL reference): "
                "resume from a checkpoint written with it, or use a new checkpoint.dir"
            )
        self.step, self.version = state.step, state.policy_version
        self.order = TaskOrder(self.train_tasks, self.config.seed, **state.cursor)
        self.metrics.truncate(self.step)
        self.resumed_from = path
        return path

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> list[StepReport]:
        """Train until ``config.steps`` (resuming first when there is a checkpoint)."""
        return asyncio.run(self.arun())

    async def arun(self) -> list[StepReport]:
        reports: list[StepReport] = []
        self.maybe_resume()
        ref_model = self.ref_policy.model if self.ref_policy is not None else None
        u = self.update  # every rank starts from rank 0's weights and optimizer state
        self.ranks.share_state(self.model, u.optimizer, u.scheduler, ref_model)
        finished = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.config.rollout.workers and self.engine is None:
                    from envgym.trainer.ranks_rollout import RayRollout

                    self.on_phase(f"starting {self.config.rollout.workers} Ray rollout workers")
                    self.engine = await stack.enter_async_context(
                        RayRollout.start(self.config, self.model)
                    )
                    self.engine.version = self.version
                    if self.resumed_from is not None:
                        await self._sync_engine(self.version)
                elif self.engine is None:  # model.engine vllm, no vllm_url: serve it ourselves
                    self.on_phase("starting the vLLM engine (docs/TRAINER.md)")
                    self.engine = await stack.enter_async_context(
                        managed_vllm(self.config, self.model, self.tokenizer)
                    )
                    self.engine.version = self.version  # served from the resumed weights
                elif self.resumed_from is not None:
                    await self._sync_engine(self.version)
                self.rollout_engines = [
                    await stack.enter_async_context(e) for e in self._make_rollout_engines()
                ]
                write_run(self.run_record, self.config.metrics.dir, self.config.metrics.store)
                if self.config.async_.enabled:
                    await run_async(self, reports)
                else:
                    while self.step < self.config.steps:
                        reports.append(await self.finish_step(await self._collect_sync()))
            if self.config.checkpoint.export:
                self.on_phase(f"exporting the policy to {self.config.checkpoint.export}")
                export_policy(
                    self.model,
                    self.tokenizer,
                    self.config.checkpoint.export,
                    {
                        "step": self.step,
                        "policy_version": self.version,
                        "run_key": self.run_record.run_key,
                        "config": self.config.to_dict(),
                    },
                )
            self.run_record.status = "finished"
            finished = True
        except BaseException:
            self.run_record.status = "failed"
            raise
        finally:
            self._stop_ranks(finished)
            try:  # the final status (finished | failed) must not mask the run's own error
                write_run(self.run_record, self.config.metrics.dir, self.config.metrics.store)
            except Exception as exc:  # noqa: BLE001 - a store gone away, a full disk...
                log.warning(
                    "could not record the run's final status %r: %s", self.run_record.status, exc
                )
            self.metrics.close()
            if hasattr(self.engine, "aclose"):
                with contextlib.suppress(Exception):
                    await self.engine.aclose()
        return reports

    def _stop_ranks(self, finished: bool) -> None:
        """Tell the other ranks the run is over; after a finished run, check their replicas
        equal rank 0's (a failed run may have left them mid-step: no collective then)."""
        if not self.ranks.distributed:
            return
        self.ranks.send(("stop", finished))
        if finished:
            self.ranks.check_same(self.model)

    async def _sync_engine(self, version: int) -> None:
        """Rank 0's weights into the engine (Ray rollout workers, local engine or vLLM)."""
        from envgym.trainer.ranks_rollout import RayRollout

        if isinstance(self.engine, RayRollout):
            await self.engine.sync(self.model, version)
        else:
            await sync_weights(self.engine, self.model, version, self.config)

    def _train(self, samples: list[Any] | None) -> tuple[dict[str, float], str | None]:
        """Step 5 on every rank: rank 0 sends the batch (or that there is none), all train."""
        self.ranks.send(("step", samples, self.step))
        if samples is None:
            return {}, None
        return self.update.run(samples, self.step)

    def _make_rollout_engines(self) -> list[RolloutEngine]:
        from envgym import registry

        r = self.config.rollout
        params = SamplingParams(
            temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_tokens=r.max_tokens
        )
        budget = RolloutBudget(
            max_turns=r.max_turns, max_tokens=r.episode_tokens, max_seconds=r.max_seconds
        )
        from envgym.trainer.ranks_rollout import RayRollout

        if isinstance(self.engine, RayRollout):
            return self.engine.engines(params, budget)
        out = []
        for env in self.config.envs:
            factory = registry.env_factory(
                env.id,
                sandbox=env.sandbox,
                context=env.context,
                parser=self.config.model.parser,
                native_tools=True,
                time_budget_s=r.max_seconds,
            )
            out.append(
                RolloutEngine.local(
                    self.engine, factory, concurrency=r.concurrency, params=params, budget=budget
                )
            )
        return out

    async def _rollout(self, refs: list[TaskRef], seed: int, tally: Tally) -> list[Group]:
        """``group_size`` episodes of each task; one :class:`Group` per task with ≥ 2 valid.
        Every episode is recorded in ``tally`` and the ones left out of groups counted."""
        n = self.config.rollout.group_size
        by_env: dict[int, list[str]] = {}
        for env, task in refs:
            by_env.setdefault(env, []).append(task)

        async def one(env: int, tasks: list[str]) -> list[EpisodeResult]:
            specs = [EpisodeSpec(t, s, seed=seed) for t in tasks for s in range(n)]
            async with contextlib.aclosing(self.rollout_engines[env].run(specs)) as stream:
                return [r async for r in stream]

        runs = await asyncio.gather(*(one(e, ts) for e, ts in by_env.items()))
        groups: list[Group] = []
        for env, results in zip(by_env, runs):
            for r in results:
                tally.record(r)
            found, errored = group_results(results)
            tally.errored += errored
            for g in found:
                g.task_id = f"{env}::{g.task_id}"
            groups.extend(found)
        return groups

    async def _collect_sync(self) -> Collected:
        """One batch of groups (dynamic sampling with refills), or why the step is skipped."""
        c = self.config
        tally = Tally()
        started = time.monotonic()
        kept: list[Group] = []
        rounds = 1 + (c.dynamic_sampling.max_refills if c.dynamic_sampling.enabled else 0)
        for round_ in range(rounds):
            self.on_phase(f"step {self.step + 1}: rollouts (round {round_ + 1})")
            refs = self.order.take(c.rollout.prompts - len(kept))
            groups = await self._rollout(refs, derive_seed(c.seed, self.step, round_), tally)
            tally.refills += round_ > 0
            groups = tally.admit(groups, overlong_sample=overlong_scope(c) == "sample")
            kept.extend(tally.informative(groups, dynamic_sampling=c.dynamic_sampling.enabled))
            if len(kept) >= c.rollout.prompts:
                break
        skipped = None if kept else tally.skip_reason()
        return Collected(kept, skipped, tally, started)

    async def finish_step(self, collected: Collected) -> StepReport:
        """Update on the collected groups (unless skipped), sync, log, checkpoint."""
        groups, skipped, t0 = collected.groups, collected.skipped, collected.started
        rollout_s = time.monotonic() - t0
        # Before training on the batch: the survivors of a mostly errored batch are biased.
        check_errored(
            collected.tally.share,
            self.config.rollout.max_errored_share,
            where=f"step {self.step + 1}",
            log=log,
        )
        if collected.tally.nonfinite:  # masked, not skipped: say which, every time
            n = len(collected.tally.nonfinite)
            log.warning(
                "step %d: %d episode(s) with a non-finite reward masked: %s",
                self.step + 1,
                n,
                ", ".join(collected.tally.nonfinite[:5]) + (" …" if n > 5 else ""),
            )
        metrics: dict[str, float] = {}
        if skipped is None:
            self.on_phase(f"step {self.step + 1}: training on {len(groups)} groups")
            samples = samples_from_groups(
                groups,
                self._advantages(groups),
                overlong_mask=overlong_scope(self.config) == "turn",
            )
            # Each phase's freed memory back to the OS before the other phase allocates: glibc
            # keeps it otherwise, and an update's activations (GiBs) stayed resident through the
            # next rollouts (docs/TRAINER.md, "Memory between phases").
            release_freed()
            metrics, skipped = await asyncio.to_thread(self._train, samples)
            release_freed()
        else:
            await asyncio.to_thread(self._train, None)  # the other ranks keep step with rank 0
        t1 = time.monotonic()
        self.step += 1
        if skipped is None:
            await self._sync_engine(self.version + 1)
            self.version += 1
        if self._sync_ref():
            metrics["ref_synced"] = 1.0
        if (
            self.heldout_tasks
            and self.config.heldout.every
            and (self.step % self.config.heldout.every == 0 or self.step == self.config.steps)
        ):
            metrics["heldout_pass_rate"] = await self.evaluate_heldout()
        metrics.update(collected.tally.metrics(groups))
        metrics.update(
            step=self.step,
            policy_version=self.version,
            skipped=float(skipped is not None),
            rollout_s=rollout_s,
            train_s=t1 - t0 - rollout_s,
            step_s=time.monotonic() - t0,
        )
        if skipped is not None:
            log.warning("step %d: update skipped: %s", self.step, skipped)
        self.metrics.log(metrics)
        self._checkpoint()
        self.run_record.step, self.run_record.policy_version = self.step, self.version
        self.run_record.last_metrics = metrics
        write_run(self.run_record, self.config.metrics.dir, self.config.metrics.store)
        report = StepReport(self.step, metrics, skipped)
        self.on_step(report)
        return report

    def _advantages(self, groups: list[Group]) -> torch.Tensor:
        from envgym.trainer.advantages import group_advantages

        n = max(len(g.results) for g in groups)
        rewards = torch.zeros(len(groups), n, dtype=torch.float64)
        valid = torch.zeros(len(groups), n, dtype=torch.bool)
        for i, g in enumerate(groups):
            rewards[i, : len(g.results)] = torch.tensor(g.rewards, dtype=torch.float64)
            valid[i, : len(g.results)] = True
        return group_advantages(rewards, normalize_std=self.config.normalize_std, valid=valid)

    def _ref_synced(self, step: int) -> bool:
        """Whether the KL reference has been replaced by the policy by the end of ``step``."""
        every = self.config.loss.ref_sync_every
        return self.ref_policy is not None and every > 0 and step >= every

    def _sync_ref(self) -> bool:
        """Every ``loss.ref_sync_every`` steps (skipped ones count: the schedule is by step),
        the KL reference becomes a copy of the current policy — a reset of the anchor the KL
        holds the policy to, so a long run is not pulled back to its starting point."""
        every = self.config.loss.ref_sync_every
        if self.ref_policy is None or every <= 0 or self.step % every:
            return False
        with torch.no_grad():
            self.ref_policy.model.load_state_dict(self.model.state_dict())
        return True

    def _checkpoint(self) -> None:
        c = self.config.checkpoint
        if (c.every and self.step % c.every == 0) or self.step == self.config.steps:
            ref = self.ref_policy.model if self.ref_policy and self._ref_synced(self.step) else None
            save_checkpoint(
                c.dir,
                step=self.step,
                policy_version=self.version,
                model=self.model,
                optimizer=self.update.optimizer,
                scheduler=self.update.scheduler,
                cursor=self.order.cursor,
                config=self.config.to_dict(),
                keep=c.keep,
                ref_model=ref,
            )

    async def evaluate_heldout(self) -> float:
        """pass@1 on the held-out tasks (``heldout.samples`` each, fixed seeds)."""
        self.on_phase(f"step {self.step}: held-out evaluation")
        h = self.config.heldout
        passed = total = 0
        for env in sorted({e for e, _ in self.heldout_tasks}):
            tasks = [t for e, t in self.heldout_tasks if e == env]
            specs = [EpisodeSpec(t, s, seed=h.seed) for t in tasks for s in range(h.samples)]
            async with contextlib.aclosing(self.rollout_engines[env].run(specs)) as stream:
                async for r in stream:
                    if r.error is None:
                        passed += r.passed
                        total += 1
        return passed / total if total else math.nan


def build_policies(
    config: TrainConfig, model: PreTrainedModel
) -> tuple[TrainablePolicy, TrainablePolicy | None]:
    """The trained policy on ``model`` and, with ``loss.kl_beta``, the frozen KL reference (a
    copy of the initial policy); the same on every rank."""
    model.train(config.model.gradient_checkpointing)  # dropout-free HF LMs: only for GC
    if config.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    apply_lora(model, config.model.lora)  # model.lora: adapters on the frozen base, or none
    policy = TrainablePolicy(
        model,
        chunk_size=config.chunk_size,
        keep_sampling_mask=config.keep_sampling_mask,
        keep_routing=config.keep_routing,
    )
    ref_policy = None
    if config.loss.kl_beta > 0:  # the unbiased KL (eq. 7) needs the initial policy
        ref = copy.deepcopy(model).eval().requires_grad_(False)
        ref_policy = TrainablePolicy(
            ref,
            chunk_size=config.chunk_size,
            keep_sampling_mask=config.keep_sampling_mask,
            keep_routing=config.keep_routing,
        )
    return policy, ref_policy
