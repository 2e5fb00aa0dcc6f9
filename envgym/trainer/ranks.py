"""Data-parallel training ranks for the GRPO loop: one update path for any world size.

    ranks = join(config)          # torchrun's env, or envgym train's own spawned ranks; else 1
    Update(config, policy, ref, ranks=ranks)

Rank 0 is the driver (Seed-Thinking-v1.5 §5.1's single controller): it rolls out, computes
advantages, writes metrics and checkpoints and syncs the engine's weights.  Every rank holds a
full replica of the policy and its optimizer.  Each step rank 0 sends the batch's samples to the
others (:meth:`Ranks.send`); every rank builds the same minibatches and microbatches from them
(the split is seeded by the step) and trains on its share, microbatch ``i`` on rank
``i % world_size`` (:meth:`Ranks.mine`).  Each microbatch's loss is already divided by its
*minibatch's* units, counted over the whole minibatch, so summing the ranks' gradients
(:meth:`Ranks.reduce`, one all-reduce) gives exactly the gradient one process accumulates over
all the microbatches; clipping and the AdamW step then run identically on every rank, and the
replicas stay equal (checked at the end of a run: :meth:`Ranks.check_same`).

With one rank every method is the identity: the single-process run *is* the world-size-1 case.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from envgym.trainer.config import TrainConfig
from envgym.trainer.distributed import init_distributed

T = TypeVar("T")

# How long a collective may wait: ranks ≠ 0 wait in one while rank 0 rolls out (a step's
# rollouts, refills and held-out evaluation), which has no useful bound.  A rank that dies ends
# the others sooner: its connections close, and envgym train / torchrun stop the rest.
COLLECTIVE_TIMEOUT_S = 24 * 3600.0

# Set by envgym train on the ranks it spawns itself; torchrun sets the same names.
_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class RanksError(ValueError):
    """The launch does not match ``trainer.world_size`` / ``trainer.backend``."""


@dataclass(frozen=True)
class Ranks:
    """This process's place among the training ranks (``world_size`` 1: alone)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def mine(self, microbatches: Sequence[T]) -> list[T]:
        """This rank's share of a minibatch's microbatches (all of them with one rank)."""
        return list(microbatches[self.rank :: self.world_size])

    def reduce(
        self, optimizer: torch.optim.Optimizer, finite: bool, total: float
    ) -> tuple[bool, float]:
        """Sum the gradients of ``optimizer``'s parameters, the minibatch loss ``total`` and the
        finiteness verdict over the ranks, in one all-reduce.  A rank with no microbatch
        contributes zeros; a parameter no rank touched keeps ``grad None``."""
        if not self.distributed:
            return finite, total
        params = [p for g in optimizer.param_groups for p in g["params"]]
        device = params[0].device
        touched = torch.tensor([float(p.grad is not None) for p in params], device=device)
        grads = [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(torch.float32)
            for p in params
        ]
        head = torch.tensor([total if finite else 0.0, 0.0 if finite else 1.0], device=device)
        flat = torch.cat([head, touched, *grads])
        dist.all_reduce(flat)
        total, bad = float(flat[0]), float(flat[1])
        offset = 2 + len(params)
        for i, p in enumerate(params):
            n = p.numel()
            if float(flat[2 + i]) > 0:
                p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone()
            offset += n
        return bad == 0.0 and math.isfinite(total), total

    def merge(self, sums: MutableMapping[str, float], weights: MutableMapping[str, float]) -> None:
        """Token-weighted diagnostics summed over the ranks (each saw its own microbatches)."""
        if not self.distributed:
            return
        mine: list[Any] = [(dict(sums), dict(weights))]
        every: list[Any] = [None] * self.world_size
        dist.all_gather_object(every, mine[0])
        sums.clear()
        weights.clear()
        for part_sums, part_weights in every:
            for key, value in part_sums.items():
                sums[key] = sums.get(key, 0.0) + value
            for key, value in part_weights.items():
                weights[key] = weights.get(key, 0.0) + value

    # -- rank 0 → the others -------------------------------------------------------------------
    def send(self, message: Any) -> Any:
        """Rank 0's ``message`` on every rank (pickled; the others pass ``None``)."""
        if not self.distributed:
            return message
        box = [message if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def share_state(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        ref_model: nn.Module | None,
    ) -> None:
        """Every rank takes rank 0's weights, optimizer and scheduler state (a fresh start or a
        resume): only rank 0 reads checkpoints, so no shared file system is needed."""
        if not self.distributed:
            return
        state = None
        if self.is_main:
            state = (
                _cpu(model.state_dict()),
                optimizer.state_dict(),
                scheduler.state_dict(),
                None if ref_model is None else _cpu(ref_model.state_dict()),
            )
        weights, opt, sched, ref = self.send(state)
        if not self.is_main:
            model.load_state_dict(weights)
            optimizer.load_state_dict(opt)
            scheduler.load_state_dict(sched)
            if ref_model is not None and ref is not None:
                ref_model.load_state_dict(ref)

    def check_same(self, model: nn.Module) -> None:
        """Raise when a rank's replica drifted from rank 0's (they must stay bitwise equal)."""
        if not self.distributed:
            return
        with torch.no_grad():
            mark = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum()
        marks: list[Any] = [None] * self.world_size
        dist.all_gather_object(marks, float(mark))
        if len(set(marks)) != 1:
            raise RuntimeError(f"the ranks' replicas differ after training: sums {marks}")

    def close(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


def _cpu(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {k: v.detach().to("cpu") for k, v in state.items()}


def launched_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """``RANK`` when this process was launched as one of several ranks, else ``None``."""
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    try:
        return int(env["RANK"])
    except ValueError:
        raise RanksError(f"RANK must be an integer, not {env['RANK']!r}") from None


def join(config: TrainConfig, environ: Mapping[str, str] | None = None) -> Ranks:
    """Join the ranks this process was launched as (torchrun's or envgym train's environment
    variables), checked against ``config.trainer``; :class:`Ranks` () when launched alone."""
    env = os.environ if environ is None else environ
    t = config.trainer
    if launched_rank(env) is None:
        if t.world_size > 1:
            raise RanksError(
                f"trainer.world_size {t.world_size} but this process was not launched as a rank "
                "(no RANK/WORLD_SIZE): run envgym train (it spawns the ranks on one node) or "
                "torchrun (docs/DISTRIBUTED.md)"
            )
        return Ranks()
    missing = [k for k in _ENV if k not in env]
    if missing:
        raise RanksError(f"launched as a rank but {', '.join(missing)} not set")
    try:
        rank, world, local = (int(env[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
        port = int(env["MASTER_PORT"])
    except ValueError:
        raise RanksError("RANK, WORLD_SIZE, LOCAL_RANK and MASTER_PORT must be integers") from None
    if world != t.world_size:
        raise RanksError(
            f"launched with WORLD_SIZE={world} but trainer.world_size is {t.world_size}"
        )
    if world == 1:
        return Ranks()
    if t.backend is None:  # config.check refuses it too: this guards a config built otherwise
        raise RanksError("trainer.backend must be gloo (CPU) or nccl (GPU) to train on ranks")
    init_distributed(
        rank,
        world,
        master_port=port,
        master_addr=env["MASTER_ADDR"],
        backend=t.backend,
        timeout_s=COLLECTIVE_TIMEOUT_S,
    )
    return Ranks(rank=rank, world_size=world, local_rank=local)


def rank_device(config: TrainConfig, ranks: Ranks) -> torch.device | None:
    """NCCL ranks each train on their own GPU (``LOCAL_RANK``); ``None``: ``model.device``."""
    if ranks.distributed and config.trainer.backend == "nccl":
        return torch.device("cuda", ranks.local_rank)
    return None
