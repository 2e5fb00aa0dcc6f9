"""From rollout results to training tensors: groups, filters, masks, padding, microbatches.

* :func:`group_results` — the G samples of each prompt form a GRPO group; errored episodes
  (infrastructure failures, not policy failures) are left out, like LongCat §3.2.2's masking of
  samples with an incomplete reward signal.
* :func:`split_informative` — dynamic sampling (Seed-Thinking §4.2; LongCat §3.2.2 online
  filtering; AM-Thinking keeps 0 < pass rate < 1): a group whose rewards are all equal has zero
  group-relative advantage everywhere, so it carries no gradient and is dropped.
* :func:`mask_nonfinite` / :func:`mask_overlong` — whole episodes masked before advantages
  (LongCat §3.2.2 "incomplete signal masking": samples whose score is unreliable, and samples
  that reached the generation length limit, are masked): an episode with a NaN/±inf reward, and
  (``overlong_scope: sample``) an episode with a turn cut by the token limit, leave their group,
  so they neither train nor count in its mean.
* :func:`overlong_loss_mask` — ``overlong_scope: turn``: only the turns whose finish reason is
  ``length`` are masked out of the loss (AM-Thinking's overlong handling gives them zero
  advantage); the episode's other turns keep its advantage.
* :func:`samples_from_groups` / :func:`collate` — one :class:`Sample` per record segment
  (envgym.record: a segment is one token sequence), each knowing its episode (its
  *trajectory*: the loss's sequence unit); padded :class:`TrainBatch` tensors, shifted so that
  position ``t`` predicts ``token_ids[t + 1]``.
* microbatches (the rows of one accumulation pass): envgym/trainer/microbatches.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
from torch import Tensor

from envgym.models.kept import KeptEntry, kept_tensors
from envgym.record import Segment
from envgym.rollout import EpisodeResult


@dataclass
class Group:
    """The samples of one prompt (task) in one rollout batch."""

    task_id: str
    results: list[EpisodeResult]

    @property
    def rewards(self) -> list[float]:
        return [r.reward for r in self.results]


def group_results(results: Sequence[EpisodeResult]) -> tuple[list[Group], int]:
    """Group by task (first-seen order), leaving errored episodes out.

    Returns the groups with at least two valid samples and how many episodes were left out
    (errored ones, and the survivors of groups left with fewer than two).
    """
    by_task: dict[str, list[EpisodeResult]] = {}
    dropped = 0
    for r in results:
        if r.error is not None:
            dropped += 1
            continue
        by_task.setdefault(r.task_id, []).append(r)
    groups = []
    for task_id, members in by_task.items():
        if len(members) < 2:
            dropped += len(members)
            continue
        groups.append(Group(task_id, sorted(members, key=lambda r: r.sample)))
    return groups, dropped


def split_informative(groups: Sequence[Group]) -> tuple[list[Group], int, int]:
    """``(informative, all_correct, all_wrong)``: drop groups whose rewards are all equal.

    ``all_correct`` counts dropped groups whose common reward is ≥ 1 (solved by every sample),
    ``all_wrong`` the others (every sample got the same lower reward, usually 0).
    """
    kept, correct, wrong = [], 0, 0
    for g in groups:
        rewards = g.rewards
        if max(rewards) > min(rewards):
            kept.append(g)
        elif rewards[0] >= 1.0:
            correct += 1
        else:
            wrong += 1
    return kept, correct, wrong


def nonfinite_rewards(groups: Sequence[Group]) -> list[str]:
    """``task#sample = value`` for every reward that is NaN or ±inf."""
    return [
        f"{r.task_id}#{r.sample} = {r.reward}"
        for g in groups
        for r in g.results
        if not math.isfinite(r.reward)
    ]


@dataclass(frozen=True)
class MaskedGroups:
    """Groups after masking whole episodes: what is left and what was masked."""

    groups: list[Group]  # each with ≥ 2 episodes left
    masked: list[EpisodeResult]  # the episodes masked, in group order
    lone: int  # survivors of groups left with fewer than two episodes (no group signal)


def _mask_episodes(groups: Sequence[Group], drop: Callable[[EpisodeResult], bool]) -> MaskedGroups:
    kept: list[Group] = []
    masked: list[EpisodeResult] = []
    lone = 0
    for g in groups:
        left = [r for r in g.results if not drop(r)]
        masked.extend(r for r in g.results if drop(r))
        if len(left) >= 2:
            kept.append(Group(g.task_id, left))
        else:
            lone += len(left)
    return MaskedGroups(kept, masked, lone)


def mask_nonfinite(groups: Sequence[Group]) -> MaskedGroups:
    """``groups`` less the episodes whose reward is NaN or ±inf (LongCat §3.2.2: a sample whose
    score has a problem is masked, the rest of the batch trains): a broken reward for one task
    costs that task's bad samples, not the step."""
    return _mask_episodes(groups, lambda r: not math.isfinite(r.reward))


def is_overlong(result: EpisodeResult) -> bool:
    """True when a turn of the episode finished by ``length`` (cut by the token limit)."""
    return any(
        info.finish_reason == "length" for seg in result.record.segments for info in seg.turn_info
    )


def mask_overlong(groups: Sequence[Group]) -> MaskedGroups:
    """``overlong_scope: sample`` (LongCat §3.2.2: samples that reach the generation length are
    masked): an episode with any turn cut by the token limit leaves its group, every segment of
    it, and the group's mean is taken over the rest.  Its reward comes from an episode that did
    not finish — an incomplete signal for the turns before the cut as much as for the cut one."""
    return _mask_episodes(groups, is_overlong)


def overlong_loss_mask(segment: Segment) -> list[int]:
    """The segment's loss mask with every turn that finished by ``length`` zeroed."""
    mask = list(segment.loss_mask)
    for (start, end), info in zip(segment.turns, segment.turn_info):
        if info.finish_reason == "length":
            mask[start:end] = [0] * (end - start)
    return mask


@dataclass
class Sample:
    """One training row: a segment of an episode, with its episode's advantage."""

    token_ids: list[int]
    loss_mask: list[int]  # [L]: 1 = trained on (policy-sampled, not masked)
    engine_logp: list[float]  # [L]: the sampler's log-probs (sampled distribution)
    kept: list[KeptEntry]  # [L]: kept set of token i (envgym.models.kept)
    routes: Tensor | None  # [L, layers, k] int64 (-1: never fed) for MoE records, else None
    advantage: float
    reward: float
    group: int  # index of its group in the rollout batch
    task_id: str
    policy_version: int  # the oldest version any of its turns was sampled with
    # Its episode (trajectory) in the rollout batch: the segments of one episode share it and
    # form one sequence of the loss (OPSM, seq-mean-token-mean).  None: a trajectory of its own.
    episode: int | None = None
    old_logp: Tensor | None = None  # [L - 1]: π_old per target position, once computed
    ref_logp: Tensor | None = None  # [L - 1]: reference policy, once computed (KL)
    extras: dict[str, float] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask[1:])


def samples_from_groups(
    groups: Sequence[Group], advantages: Tensor, *, overlong_mask: bool = True
) -> list[Sample]:
    """One :class:`Sample` per segment with at least one trained token.

    ``advantages: [G, n]`` — row ``g`` for ``groups[g].results`` (in order).  A segment whose
    every sampled token is masked (e.g. a single overlong turn) adds nothing and is skipped.
    ``overlong_mask`` masks the turns cut by the token limit (``overlong_scope: turn``; whole
    episodes are masked before, by :func:`mask_overlong`).  The samples of the ``k``-th episode
    (counted over the groups in order) have ``episode == k``.
    """
    if advantages.shape[0] != len(groups):
        raise ValueError(f"advantages has {advantages.shape[0]} rows for {len(groups)} groups")
    out = []
    episode = -1
    for g, group in enumerate(groups):
        if advantages.shape[1] < len(group.results):
            raise ValueError(
                f"advantages has {advantages.shape[1]} columns; group {g} has "
                f"{len(group.results)} samples"
            )
        for j, result in enumerate(group.results):
            episode += 1
            record = result.record
            for seg in record.segments:
                mask = overlong_loss_mask(seg) if overlong_mask else list(seg.loss_mask)
                if not any(mask[1:]):
                    continue
                versions = [i.policy_version for i in seg.turn_info if i.policy_version is not None]
                out.append(
                    Sample(
                        token_ids=list(seg.token_ids),
                        loss_mask=mask,
                        engine_logp=list(seg.sampled_logprobs),
                        kept=list(seg.kept),
                        routes=seg.routes_tensor() if seg.routes is not None else None,
                        advantage=float(advantages[g, j]),
                        reward=float(result.reward),
                        group=g,
                        task_id=group.task_id,
                        policy_version=min(versions, default=record.policy_version),
                        episode=episode,
                    )
                )
    return out


@dataclass
class TrainBatch:
    """Padded tensors of a few samples; position ``t`` of row ``b`` predicts ``targets[b, t]``.

    Rows are right-padded to ``T = max(length) - 1``.  ``kept_ids``/``kept_rows`` are given only
    for the trained positions, in row-major order of ``mask`` (the order of ``hidden[mask]``).
    """

    input_ids: Tensor  # [B, T] int64
    attention_mask: Tensor  # [B, T] int64: 1 = a real token
    targets: Tensor  # [B, T] int64
    mask: Tensor  # [B, T] float: 1 = trained on
    engine_logp: Tensor  # [B, T] float64→float32: the sampler's log-probs (0 where mask is 0)
    kept_ids: Tensor  # [M, K] int64, M = mask.sum(), -1 padding
    kept_rows: Tensor  # [M] bool: True where the row's kept set applies
    routes: Tensor | None  # [B, T, layers, k] int64 for the inputs, or None
    advantages: Tensor  # [B]
    rewards: Tensor  # [B]
    old_logp: Tensor | None  # [B, T] or None (not computed yet)
    ref_logp: Tensor | None  # [B, T] or None
    versions: Tensor  # [B] int64
    trajectory: Tensor  # [B] int64: rows with one id are segments of one episode
    # True: the policy runs the rows' real tokens packed into one row (envgym/trainer/packing.py);
    # the tensors here stay [B, T] either way
    packed: bool = False

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())


def collate(
    samples: Sequence[Sample],
    *,
    pad_id: int = 0,
    unknown_kept: Literal["raise", "full"] = "raise",
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    packed: bool = False,
) -> TrainBatch:
    """Pad ``samples`` into a :class:`TrainBatch` (shifted inputs/targets; see the class).

    ``packed``: the policy's forward packs the rows padding-free (:attr:`TrainBatch.packed`).

    ``device``: where the tensors go, the device of the model they feed (None: the CPU).  They
    are assembled on the CPU and each copied there once, so a microbatch costs one transfer per
    tensor, not one per sample."""
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    for s in samples:
        if not (len(s.loss_mask) == len(s.engine_logp) == len(s.kept) == s.length >= 2):
            raise ValueError(
                f"sample of task {s.task_id!r}: {s.length} ids, {len(s.loss_mask)} mask, "
                f"{len(s.engine_logp)} log-probs, {len(s.kept)} kept entries (need equal, ≥ 2)"
            )
    B, T = len(samples), max(s.length for s in samples) - 1
    input_ids = torch.full((B, T), pad_id, dtype=torch.int64)
    targets = torch.full((B, T), pad_id, dtype=torch.int64)
    attention = torch.zeros(B, T, dtype=torch.int64)
    mask = torch.zeros(B, T, dtype=dtype)
    engine = torch.zeros(B, T, dtype=dtype)
    kept: list[KeptEntry] = []
    for b, s in enumerate(samples):
        n = s.length - 1
        ids = torch.tensor(s.token_ids, dtype=torch.int64)
        input_ids[b, :n] = ids[:-1]
        targets[b, :n] = ids[1:]
        attention[b, :n] = 1
        m = torch.tensor(s.loss_mask[1:], dtype=dtype)
        mask[b, :n] = m
        lp = torch.tensor(s.engine_logp[1:], dtype=dtype)
        engine[b, :n] = torch.where(m > 0, lp, torch.zeros_like(lp))
        kept.extend(e for e, on in zip(s.kept[1:], s.loss_mask[1:]) if on)
    kept_ids, kept_rows = kept_tensors(kept, unknown=unknown_kept)
    batch = TrainBatch(
        input_ids=input_ids,
        attention_mask=attention,
        targets=targets,
        mask=mask,
        engine_logp=engine,
        kept_ids=kept_ids,
        kept_rows=kept_rows,
        routes=_routes(samples, T),
        advantages=torch.tensor([s.advantage for s in samples], dtype=dtype),
        rewards=torch.tensor([s.reward for s in samples], dtype=dtype),
        old_logp=_padded([s.old_logp for s in samples], T, dtype, device),
        ref_logp=_padded([s.ref_logp for s in samples], T, dtype, device),
        versions=torch.tensor([s.policy_version for s in samples], dtype=torch.int64),
        trajectory=torch.tensor(trajectory_ids(samples), dtype=torch.int64),
        packed=packed,
    )
    return batch if device is None else batch_to(batch, device)


def trajectory_ids(samples: Sequence[Sample]) -> list[int]:
    """Each sample's trajectory as 0, 1, … in first-seen order: samples of one episode share
    one; a sample without an episode is its own."""
    seen: dict[object, int] = {}
    out = []
    for b, s in enumerate(samples):
        key: object = ("episode", s.episode) if s.episode is not None else ("row", b)
        out.append(seen.setdefault(key, len(seen)))
    return out


def trajectories(samples: Sequence[Sample]) -> list[list[int]]:
    """The sample indices of each trajectory (episode), in first-seen order."""
    out: list[list[int]] = []
    for i, t in enumerate(trajectory_ids(samples)):
        if t == len(out):
            out.append([])
        out[t].append(i)
    return out


def batch_to(batch: TrainBatch, device: torch.device | str) -> TrainBatch:
    """``batch`` with every tensor on ``device`` (tensors already there are not copied)."""
    moved: dict[str, Any] = {}
    for f in fields(batch):
        value = getattr(batch, f.name)
        moved[f.name] = value.to(device) if isinstance(value, Tensor) else value
    return TrainBatch(**moved)


def _routes(samples: Sequence[Sample], T: int) -> Tensor | None:
    routes = [s.routes for s in samples if s.routes is not None]
    if not routes:
        return None
    if len(routes) != len(samples):
        raise ValueError("some samples have MoE routes and some do not: mixed records")
    shapes = {tuple(r.shape[1:]) for r in routes}
    if len(shapes) != 1:
        raise ValueError(f"samples' routes disagree in [layers, k]: {sorted(shapes)}")
    layers, k = shapes.pop()
    out = torch.full((len(samples), T, layers, k), -1, dtype=torch.int64)
    for b, (s, full) in enumerate(zip(samples, routes)):
        r = full[: s.length - 1]
        out[b, : r.shape[0]] = r
    return out


def _padded(
    values: list[Tensor | None], T: int, dtype: torch.dtype, device: torch.device | str | None
) -> Tensor | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if len(present) != len(values):
        raise ValueError("some samples have these log-probs and some do not")
    # Built where the batch goes: these log-probs were computed (and stay) on the model's device.
    out = torch.zeros(len(values), T, dtype=dtype, device=device)
    for b, v in enumerate(present):
        out[b, : v.shape[0]] = v.to(device=out.device, dtype=dtype)
    return out


def split_minibatches(n: int, parts: int, generator: torch.Generator) -> list[list[int]]:
    """A seeded shuffle of ``range(n)`` cut into ``parts`` near-equal minibatches."""
    if not 1 <= parts <= n:
        raise ValueError(f"cannot split {n} samples into {parts} minibatches")
    perm = torch.randperm(n, generator=generator).tolist()
    return [sorted(perm[i::parts]) for i in range(parts)]
