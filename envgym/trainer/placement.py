"""Ray placement of training and rollout workers, and trainer ranks as Ray actors.

    ensure_ray(None, num_cpus=2)                         # or a cluster address
    placement = Placement(PlacementPlan(trainers=2, rollout_workers=1,
                                        trainer_cpus=0.5, rollout_cpus=0.5))
    policy = RayPolicy(factory, replicas=1, actor_options=placement.rollout_options())
    with TrainerGroup(model_factory, partial(torch.optim.AdamW, lr=1e-6), placement) as group:
        stats = group.step(batch, loss_fn)              # rows split over the ranks
        weights = group.full_state_dict()               # rank 0's gather -> engine / checkpoint

The layout is Seed-Thinking-v1.5's single controller (§5.1): this driver holds the data and the
algorithm; the ranks are a worker group that runs one SPMD program
(:mod:`envgym.trainer.distributed`). Rollout and training get separate placement groups — LongCat's
DORA (§3.1.1) keeps a standalone generator group beside the training devices — so the engine's
replicas never take a trainer's CPUs or GPUs.  The ranks form a ``torch.distributed`` group
themselves (gloo on CPU, NCCL on GPU) with rank 0's host as the rendezvous; Ray only starts and
places them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from envgym.rollout.ray_engine import ensure_ray

from .distributed import (
    Batch,
    LossFn,
    StepStats,
    distributed_step,
    free_port,
    full_state_dict,
    init_distributed,
    shard_batch,
    shard_model,
)

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
ModelFactory = Callable[[], nn.Module]
OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


@dataclass(frozen=True)
class PlacementPlan:
    """How many workers of each kind, and what each reserves (one placement bundle per worker)."""

    trainers: int = 2
    rollout_workers: int = 1
    trainer_cpus: float = 1.0
    trainer_gpus: float = 0.0
    rollout_cpus: float = 1.0
    rollout_gpus: float = 0.0
    strategy: str = "PACK"

    def __post_init__(self) -> None:
        # trainers 0: the ranks run outside Ray (torchrun, envgym train), only rollouts placed
        for name, minimum in (("trainers", 0), ("rollout_workers", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}, not {value!r}")
        for name in ("trainer_cpus", "trainer_gpus", "rollout_cpus", "rollout_gpus"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, not {value!r}")
        if self.trainers + self.rollout_workers == 0:
            raise ValueError("nothing to place: trainers and rollout_workers are both 0")
        if self.trainers and self.trainer_cpus == 0 and self.trainer_gpus == 0:
            raise ValueError("a trainer reserves nothing: trainer_cpus and trainer_gpus are 0")
        if self.rollout_workers and self.rollout_cpus == 0 and self.rollout_gpus == 0:
            raise ValueError("a rollout worker reserves nothing: rollout_cpus and _gpus are 0")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, not {self.strategy!r}")

    def trainer_bundles(self) -> list[dict[str, float]]:
        return [_bundle(self.trainer_cpus, self.trainer_gpus)] * self.trainers

    def rollout_bundles(self) -> list[dict[str, float]]:
        return [_bundle(self.rollout_cpus, self.rollout_gpus)] * self.rollout_workers


def _bundle(cpus: float, gpus: float) -> dict[str, float]:
    return {k: float(v) for k, v in (("CPU", cpus), ("GPU", gpus)) if v}


class Placement:
    """The plan's two placement groups, reserved (or a ``TimeoutError`` saying what was missing)."""

    def __init__(self, plan: PlacementPlan, *, timeout_s: float = 60.0) -> None:
        if not isinstance(plan, PlacementPlan):
            raise TypeError(f"plan must be a PlacementPlan, not {type(plan).__name__}")
        self.plan = plan
        self._ray = ensure_ray()
        from ray.util.placement_group import placement_group

        self.trainer_group = (
            placement_group(plan.trainer_bundles(), strategy=plan.strategy)
            if plan.trainers
            else None
        )
        self.rollout_group = (
            placement_group(plan.rollout_bundles(), strategy=plan.strategy)
            if plan.rollout_workers
            else None
        )
        groups = [g for g in (self.trainer_group, self.rollout_group) if g is not None]
        try:
            self._ray.get([g.ready() for g in groups], timeout=timeout_s)
        except self._ray.exceptions.GetTimeoutError:
            self.remove()
            raise TimeoutError(
                f"placement not ready in {timeout_s} s: trainers {plan.trainer_bundles()}, "
                f"rollout {plan.rollout_bundles()}, strategy {plan.strategy}; the cluster has "
                f"{self._ray.cluster_resources()}"
            ) from None

    def _strategy(self, group: Any, index: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=index
        )

    def trainer_options(self, rank: int) -> dict[str, Any]:
        """``.options(...)`` for rank ``rank``'s actor: its own bundle."""
        world = self.plan.trainers
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise ValueError(f"rank must be an int in [0, {world}), not {rank!r}")
        assert self.trainer_group is not None  # trainers >= 1 here
        return {
            "num_cpus": self.plan.trainer_cpus,
            "num_gpus": self.plan.trainer_gpus,
            "scheduling_strategy": self._strategy(self.trainer_group, rank),
        }

    def rollout_options(self, index: int | None = None) -> dict[str, Any]:
        """``actor_options`` for ``RayPolicy`` / ``RayEnvPool``: the rollout group (any bundle,
        or bundle ``index``).  Env actors that should take no CPU can override ``num_cpus=0``."""
        if self.rollout_group is None:
            raise ValueError("the plan has rollout_workers=0: no rollout placement group")
        if index is not None and not (
            isinstance(index, int) and 0 <= index < self.plan.rollout_workers
        ):
            bound = self.plan.rollout_workers
            raise ValueError(f"index must be None or in [0, {bound}), not {index!r}")
        bundle = -1 if index is None else index  # -1: any bundle of the group
        return {
            "num_cpus": self.plan.rollout_cpus,
            "num_gpus": self.plan.rollout_gpus,
            "scheduling_strategy": self._strategy(self.rollout_group, bundle),
        }

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for group in (self.trainer_group, self.rollout_group):
            if group is not None:
                remove_placement_group(group)


class TrainerWorker:
    """One rank, run as a Ray actor: its process group, model shard and optimizer."""

    def __init__(self, rank: int, world_size: int, threads: int = 1) -> None:
        self.rank, self.world_size = rank, world_size
        torch.set_num_threads(threads)  # Ray sizes OMP threads by num_cpus; fractions still mean 1
        self.model: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    def rendezvous(self, master_addr: str | None) -> tuple[str, int]:
        """Rank 0's address (its node's IP unless given) and a port free there."""
        import ray

        addr = master_addr or ray.util.get_node_ip_address()
        return addr, free_port(addr)

    def setup(
        self,
        master_addr: str,
        master_port: int,
        model_factory: ModelFactory,
        optimizer_factory: OptimizerFactory,
        backend: str | None,
    ) -> None:
        init_distributed(
            self.rank,
            self.world_size,
            master_addr=master_addr,
            master_port=master_port,
            backend=backend,
        )
        self.model = shard_model(model_factory())  # rank 0's initial weights everywhere
        self.optimizer = optimizer_factory(self.model.parameters())

    def step(self, batch: Batch, loss_fn: LossFn, max_grad_norm: float | None) -> StepStats:
        assert self.model is not None and self.optimizer is not None, "setup() first"
        return distributed_step(
            self.model, self.optimizer, batch, loss_fn, max_grad_norm=max_grad_norm
        )

    def full_state_dict(self) -> dict[str, Tensor]:
        assert self.model is not None, "setup() first"
        return full_state_dict(self.model)

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class TrainerGroup:
    """``placement.plan.trainers`` ranks as Ray actors (one per trainer bundle), one process group.

    ``model_factory`` and ``optimizer_factory`` must pickle (module-level functions,
    ``functools.partial``); each rank builds its model, shards it and adopts rank 0's weights.
    """

    def __init__(
        self,
        model_factory: ModelFactory,
        optimizer_factory: OptimizerFactory,
        placement: Placement,
        *,
        master_addr: str | None = None,
        backend: str | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        if not callable(model_factory) or not callable(optimizer_factory):
            raise TypeError("model_factory and optimizer_factory must be callable")
        if not isinstance(placement, Placement):
            raise TypeError(f"placement must be a Placement, not {type(placement).__name__}")
        self._ray = ensure_ray()
        self.world_size = placement.plan.trainers
        self.timeout_s = timeout_s
        actor = self._ray.remote(TrainerWorker)
        self.workers = [
            actor.options(**placement.trainer_options(rank)).remote(rank, self.world_size)
            for rank in range(self.world_size)
        ]
        try:
            addr, port = self._get(self.workers[0].rendezvous.remote(master_addr))
            self._get(
                [
                    w.setup.remote(addr, port, model_factory, optimizer_factory, backend)
                    for w in self.workers
                ]
            )
        except BaseException:
            self.close()
            raise

    def _get(self, refs: Any) -> Any:
        return self._ray.get(refs, timeout=self.timeout_s)

    def step(
        self, batch: Batch, loss_fn: LossFn, *, max_grad_norm: float | None = None
    ) -> StepStats:
        """One optimizer step on ``batch``: rank r gets rows ``shard_batch(batch, r, world)``."""
        shards: list[Mapping[str, Tensor]] = [
            shard_batch(batch, rank, self.world_size) for rank in range(self.world_size)
        ]
        refs = [w.step.remote(s, loss_fn, max_grad_norm) for w, s in zip(self.workers, shards)]
        return self._get(refs)[0]  # identical on every rank

    def full_state_dict(self) -> dict[str, Tensor]:
        """Rank 0's gathered weights (every rank takes part in the gather)."""
        states = self._get([w.full_state_dict.remote() for w in self.workers])
        return states[0]

    def close(self) -> None:
        closing = [w.close.remote() for w in self.workers]
        try:
            self._ray.get(closing, timeout=30)
        except Exception:  # a rank already dead or hung: killing it below is what matters
            pass
        for w in self.workers:
            self._ray.kill(w)
        self.workers = []

    def __enter__(self) -> TrainerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
