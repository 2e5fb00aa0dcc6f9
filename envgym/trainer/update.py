"""One rollout batch's policy updates (step 5 of envgym/trainer/loop.py).

:class:`Update` owns the optimizer (AdamW, linear warm-up) and turns a batch of
:class:`~envgym.trainer.batch.Sample` s into ``minibatches`` optimizer steps:

1. one no-grad pass over length-balanced microbatches computes π_old at the rollout weights
   (``old_logprobs: recompute``), the reference log-probs for the KL term (eq. 7) and the MoE
   routing-flip rate, returned as a :class:`Prepared` (copies of the samples with them filled
   in: the caller's samples are left alone); non-finite engine or recomputed log-probs skip
   the batch (reported);
2. the episodes (trajectories: all segments of one episode travel together) are shuffled
   (seeded by the step) into minibatches; each minibatch accumulates gradients over its
   microbatches (an episode's segments share one): each microbatch contributes its loss *sum*
   divided by the minibatch's units — trained tokens (token-mean), trajectories
   (seq-mean-token-mean) or the fixed ``loss.normalizer`` (constant) — so the accumulated
   gradient is that of one ``grpo_loss`` over the whole minibatch; a non-finite loss or
   gradient norm skips that optimizer step (counted in ``minibatches_skipped`` and logged).

With ``packing`` each microbatch is cut by its real tokens (not rows × longest row) and the
policy runs it padding-free (envgym/trainer/packing.py); with ``model.lora`` only the adapters are
parameters of the optimizer (envgym/trainer/lora.py), and adapter dropout acts in step 2's gradient
passes only (π_old and the reference are computed without it).

The weight sync to the engine that follows is envgym/trainer/weight_sync.py.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from envgym.trainer.aggregation import nonzero
from envgym.trainer.batch import (
    Sample,
    TrainBatch,
    collate,
    split_minibatches,
    trajectories,
    trajectory_ids,
)
from envgym.trainer.config import TrainConfig
from envgym.trainer.lora import adapter_dropout
from envgym.trainer.losses import grpo_loss
from envgym.trainer.micro_tokens import resolve_micro_tokens
from envgym.trainer.microbatches import balanced_microbatches, prefix_microbatches
from envgym.trainer.policy import TrainablePolicy
from envgym.trainer.ranks import Ranks

log = logging.getLogger(__name__)

# Diagnostics of grpo_loss that are bookkeeping, not metrics.
_NOT_METRICS = frozenset({"loss_sum", "n_units", "tokens", "sequences"})


@dataclass(frozen=True)
class Prepared:
    """What the no-grad pass computed, or why the batch is skipped (then nothing else)."""

    samples: list[Sample]  # copies of the samples given, π_old / reference log-probs filled in
    metrics: dict[str, float]
    skipped: str | None = None


class Update:
    """The optimizer and the per-batch update (see the module docstring)."""

    def __init__(
        self,
        config: TrainConfig,
        policy: TrainablePolicy,
        ref_policy: TrainablePolicy | None,
        *,
        pad_id: int = 0,
        ranks: Ranks | None = None,
    ) -> None:
        self.ranks = ranks or Ranks()  # data-parallel ranks (envgym/trainer/ranks.py); one: alone
        self.config = config
        self.policy = policy
        self.ref_policy = ref_policy
        self.pad_id = pad_id
        # micro_tokens: auto is resolved once, where the model is (envgym/trainer/micro_tokens.py)
        self.micro_tokens = resolve_micro_tokens(config.micro_tokens, policy.model)
        log.info("micro_tokens: %d (config: %s)", self.micro_tokens, config.micro_tokens)
        o = config.optimizer
        params = [p for p in policy.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=o.lr, betas=(o.betas[0], o.betas[1]), eps=o.eps, weight_decay=o.weight_decay
        )
        warmup = o.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
        )

    def _collate(self, samples: Sequence[Sample]) -> TrainBatch:
        """One microbatch, collated once and placed on the policy's device (a GPU policy
        cannot read CPU ids; the reference policy is a copy on the same device)."""
        first = next(self.policy.model.parameters())
        return collate(
            samples,
            pad_id=self.pad_id,
            unknown_kept=self.config.unknown_kept,
            dtype=first.dtype,
            device=first.device,
            packed=self.config.packing,
        )

    def _micro(self, samples: Sequence[Sample], rows: Sequence[int]) -> list[list[int]]:
        episodes = trajectory_ids(samples)  # an episode's segments in one microbatch
        together = [episodes[i] for i in rows]
        packed = self.config.packing
        routed = any(samples[i].routes is not None for i in rows)
        if self.policy.runs_prefix_once(routed=routed, packed=packed):
            ids = [samples[i].token_ids for i in rows]
            bins = prefix_microbatches(ids, self.micro_tokens, together, packed=packed)
        else:
            lengths = [samples[i].length for i in rows]
            bins = balanced_microbatches(lengths, self.micro_tokens, together, packed=packed)
        return [[rows[j] for j in mb] for mb in bins]

    def run(self, samples: list[Sample], step: int) -> tuple[dict[str, float], str | None]:
        """Train on ``samples`` (left unchanged) after ``step`` finished steps; ``(metrics,
        skip reason or None)``.  A skipped minibatch is counted and logged."""
        if not samples:
            return {}, "empty batch: no trained tokens after masking"
        metrics: dict[str, float] = {"samples": float(len(samples))}
        prepared = self._prepare(samples)
        metrics.update(prepared.metrics)
        if prepared.skipped is not None:
            return metrics, prepared.skipped
        samples = prepared.samples
        gen = torch.Generator().manual_seed(int(step) * 1_000_003 + self.config.seed)
        sums: dict[str, float] = defaultdict(float)
        weights: dict[str, float] = defaultdict(float)
        steps_done = skipped = 0
        norms = []
        losses = []
        # Minibatches of whole episodes (the loss's sequences); masking (overlong turns) can
        # leave fewer episodes than minibatches: one episode each then.
        episodes = trajectories(samples)
        parts = min(self.config.minibatches, len(episodes))
        for k, chosen in enumerate(split_minibatches(len(episodes), parts, gen), 1):
            part = sorted(i for e in chosen for i in episodes[e])
            units = self._units([samples[i] for i in part])
            self.optimizer.zero_grad(set_to_none=True)
            finite, total = True, 0.0
            for idx in self.ranks.mine(self._micro(samples, part)):
                batch = self._collate([samples[i] for i in idx])
                loss_sum, diag = self._loss(batch)
                if not torch.isfinite(loss_sum):
                    finite = False
                    break
                # Σ over microbatches of loss_sum / (the minibatch's units) = one pass's loss.
                (loss_sum / units).backward()
                total += float(loss_sum.detach()) / units
                w = float(batch.tokens)
                for key, value in diag.items():
                    v = float(value)
                    if key not in _NOT_METRICS and math.isfinite(v):
                        sums[key] += v * w
                        weights[key] += w
            finite, total = self.ranks.reduce(self.optimizer, finite, total)  # sum over ranks
            max_norm = self.config.optimizer.max_grad_norm or math.inf
            params = self.optimizer.param_groups[0]["params"]
            norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
            if not finite or not math.isfinite(norm):
                self.optimizer.zero_grad(set_to_none=True)
                skipped += 1
                what = "gradient norm" if finite else "loss"
                log.warning(
                    "step %d: minibatch %d of %d skipped: non-finite %s", step + 1, k, parts, what
                )
                continue
            self.optimizer.step()
            self.scheduler.step()
            losses.append(total)
            norms.append(norm)
            steps_done += 1
        self.ranks.merge(sums, weights)
        metrics.update({k: sums[k] / weights[k] for k in sums if weights[k]})
        metrics.update(
            loss=float(sum(losses) / len(losses)) if losses else math.nan,
            optimizer_steps=float(steps_done),
            minibatches_skipped=float(skipped),
            grad_norm=float(sum(norms) / len(norms)) if norms else math.nan,
            lr=float(self.scheduler.get_last_lr()[0]),
        )
        if not steps_done:
            return metrics, "non-finite loss or gradients in every minibatch"
        return metrics, None

    def _units(self, part: Sequence[Sample]) -> float:
        """The minibatch's denominator (envgym.trainer.aggregation.aggregate_parts): trained tokens
        (token-mean), trajectories (seq-mean-token-mean: episodes, each sample has a trained
        token and the minibatch holds whole episodes) or the
        constant normalizer — 1 when 0, as grpo_loss does (envgym.trainer.aggregation.nonzero), so
        the accumulated gradient is exactly that of one grpo_loss over the minibatch."""
        agg = self.config.loss.aggregation
        if agg == "token-mean":
            units = float(sum(s.trained_tokens for s in part))
        elif agg == "seq-mean-token-mean":
            units = float(len(trajectories(part)))
        else:
            assert self.config.loss.normalizer is not None
            units = float(self.config.loss.normalizer)
        return units if units > 0 else 1.0

    def _loss(self, batch: TrainBatch) -> tuple[Tensor, dict[str, Any]]:
        """``(loss_sum with its graph, diagnostics)`` of one microbatch."""
        c = self.config
        with adapter_dropout(self.policy.model):  # LoRA dropout: in this gradient pass only
            logp, entropy = self.policy.logprobs(
                batch, temperature=c.rollout.temperature, with_entropy=True
            )
        old = batch.old_logp if c.old_logprobs == "recompute" else batch.engine_logp
        assert old is not None
        loss, diag = grpo_loss(
            logp,
            old,
            batch.advantages,
            batch.mask,
            c.loss,
            ref_logp=batch.ref_logp,
            engine_logp=batch.engine_logp,
            rewards_positive=batch.rewards >= 1.0,
            trajectory=batch.trajectory,
            entropy=entropy if c.loss.entropy_coef > 0 else None,  # the bonus's H, with grad
        )
        diag = dict(diag)
        assert entropy is not None
        diag["entropy"] = (entropy.detach() * batch.mask).sum() / batch.mask.sum().clamp_min(1)
        # loss = loss_sum / n_units (n_units a constant): the summable part, with its graph.
        return loss * nonzero(diag["n_units"]), diag

    @torch.no_grad()
    def _prepare(self, samples: list[Sample]) -> Prepared:
        """π_old / reference log-probs and the flip rate; a skip reason on non-finite values."""
        c = self.config
        old: dict[int, Tensor] = {}  # sample index → its log-probs [length - 1]
        ref: dict[int, Tensor] = {}
        flips, flip_w = 0.0, 0
        lengths: list[int] = []
        for idx in self._micro(samples, list(range(len(samples)))):
            batch = self._collate([samples[i] for i in idx])
            sel = batch.mask > 0
            if not bool(torch.isfinite(batch.engine_logp[sel]).all()):
                return Prepared(
                    [], {}, "non-finite engine log-probs (the engine did not report them?)"
                )
            if c.old_logprobs == "recompute":
                lp, _ = self.policy.logprobs(batch, temperature=c.rollout.temperature)
                if not bool(torch.isfinite(lp[sel]).all()):
                    return Prepared([], {}, "non-finite log-probs from the trainer's recompute")
                old.update(_rows(samples, idx, lp))
            if self.ref_policy is not None:
                lp, _ = self.ref_policy.logprobs(batch, temperature=c.rollout.temperature)
                ref.update(_rows(samples, idx, lp))
            rate = self.policy.routing_flip_rate(batch) if batch.routes is not None else None
            if rate is not None:
                flips += rate * batch.tokens
                flip_w += batch.tokens
            lengths.extend(samples[i].length for i in idx)
        metrics = {
            "seq_len_mean": float(sum(lengths) / len(lengths)),
            "tokens": float(sum(s.trained_tokens for s in samples)),
        }
        if flip_w:
            metrics["routing_flip_rate"] = flips / flip_w
        filled = [
            dataclasses.replace(s, old_logp=old.get(i, s.old_logp), ref_logp=ref.get(i, s.ref_logp))
            for i, s in enumerate(samples)
        ]
        return Prepared(filled, metrics)


def _rows(samples: Sequence[Sample], idx: Sequence[int], logp: Tensor) -> dict[int, Tensor]:
    """Row ``b`` of a microbatch's ``logp [B, T]`` cut to sample ``idx[b]``'s positions."""
    return {i: logp[b, : samples[i].length - 1].detach().clone() for b, i in enumerate(idx)}
