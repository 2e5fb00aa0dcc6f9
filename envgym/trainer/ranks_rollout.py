"""``rollout.workers``: rollouts on Ray workers — policy replicas and env actors — fed by rank 0.

    async with RayRollout.start(config, model) as rollout:   # ray.init locally unless ray_address
        engines = rollout.engines(params, budget)             # one RolloutEngine per config.envs
        await rollout.sync(model.state_dict(), version)       # rank 0's weights → every replica

Each worker is an actor holding the trainer's local engine (envgym.trainer.weight_sync.build_engine)
on its own copy of the model, placed in the rollout placement group of envgym/trainer/placement.py
(one bundle per worker); envs and their sandboxes are Ray actors too (envgym.rollout.RayEnvPool).  A
session always goes to the same worker, so its KV cache stays where it was built.  Weights come
from rank 0 only: one ``ray.put`` of its state dict, loaded by every worker between decode
steps.  A Ray this module started (locally, in a temporary directory of its own) is shut down
and the directory removed on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import shutil
import tempfile
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from torch import Tensor, nn

from envgym.policy import Policy, SamplingParams, Turn
from envgym.rollout import RolloutBudget, RolloutEngine
from envgym.rollout.ray_engine import RayEnvPool, ensure_ray
from envgym.trainer.config import TrainConfig
from envgym.trainer.placement import Placement, PlacementPlan


def require_ray(config: TrainConfig) -> None:
    """A clear error when ``rollout.workers`` is set and Ray is not installed."""
    if config.rollout.workers and importlib.util.find_spec("ray") is None:
        raise ValueError(
            f"rollout.workers {config.rollout.workers} needs Ray, which is not installed: "
            "pip install 'envgym[ray]', or set rollout.workers: 0 (rollouts in this process)"
        )


def _engine_state(model: nn.Module) -> dict[str, Tensor]:
    """What a worker's engine loads: the plain model's keys (a LoRA policy merged, W + s·BA,
    as envgym.trainer.weight_sync gives its local engine), on the CPU for Ray's object store."""
    from envgym.trainer.lora import merged_state_dict

    return {k: v.detach().to("cpu") for k, v in merged_state_dict(model).items()}


class _Worker:
    """One rollout worker (a Ray actor): the local engine on a copy of the policy."""

    def __init__(self, config: dict[str, Any], state: Mapping[str, Tensor], threads: int) -> None:
        import torch

        from envgym.trainer.config import config_from_dict
        from envgym.trainer.weight_sync import build_engine, load_model

        torch.set_num_threads(threads)  # Ray sizes OMP threads by num_cpus; keep it explicit
        cfg = config_from_dict(config)
        model, tokenizer = load_model(cfg)
        model.load_state_dict(state)
        self.policy: Any = build_engine(cfg, model, tokenizer)

    async def describe(self) -> tuple[str, int]:
        return self.policy.name, self.policy.version

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        turn: Turn = await self.policy.act(session, messages, tools, params)
        return turn

    async def end_session(self, session: str) -> None:
        await self.policy.end_session(session)

    async def load(self, state: Mapping[str, Tensor], version: int) -> None:
        def copy_in() -> None:
            self.policy.model.load_state_dict(state)

        await self.policy._on_worker(copy_in)  # between decode steps: no half-loaded forward
        self.policy.version = version

    async def aclose(self) -> None:
        await self.policy.aclose()


class RayRollout:
    """The rollout workers and the :class:`Policy` that routes sessions to them."""

    def __init__(self, config: TrainConfig, ray: Any, placement: Placement, workers: list[Any]):
        self.config, self._ray, self.placement, self.workers = config, ray, placement, workers
        self.name, self.version = ray.get(workers[0].describe.remote(), timeout=600)

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, config: TrainConfig, model: nn.Module) -> AsyncIterator[RayRollout]:
        require_ray(config)
        n = config.rollout.workers
        tmp = None
        import ray

        started = not ray.is_initialized()
        if started and config.rollout.ray_address is None:
            tmp = tempfile.mkdtemp(prefix="envgym-ray-")  # short: Ray's socket paths are bounded
            ensure_ray(None, _temp_dir=tmp)
        else:
            ensure_ray(config.rollout.ray_address)
        placement: Placement | None = None
        workers: list[Any] = []
        try:
            placement = await asyncio.to_thread(
                Placement, PlacementPlan(trainers=0, rollout_workers=n, rollout_cpus=1.0)
            )
            state = ray.put(_engine_state(model))
            actor = ray.remote(_Worker)  # async methods: an asyncio actor, concurrent calls
            workers = [
                actor.options(**placement.rollout_options(i)).remote(config.to_dict(), state, 1)
                for i in range(n)
            ]
            rollout = await asyncio.to_thread(cls, config, ray, placement, workers)
            yield rollout
        finally:
            closing = [w.aclose.remote() for w in workers]
            with contextlib.suppress(Exception):
                await asyncio.to_thread(ray.get, closing, timeout=30)
            for w in workers:
                ray.kill(w)
            if placement is not None:
                placement.remove()
            if started:
                ray.shutdown()
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    # -- the Policy protocol (sessions pinned to a worker by crc32 of their id) ----------------
    def _worker(self, session: str) -> Any:
        return self.workers[zlib.crc32(session.encode()) % len(self.workers)]

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        from envgym.policy import PolicyError

        try:
            turn: Turn = await self._worker(session).act.remote(session, messages, tools, params)
        except self._ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, PolicyError):
                raise type(cause)(str(cause)) from None
            raise PolicyError(f"rollout worker raised {type(cause).__name__}: {cause}") from None
        except self._ray.exceptions.RayActorError as exc:
            raise PolicyError(f"rollout worker died: {exc}") from None
        return turn

    async def end_session(self, session: str) -> None:
        await self._worker(session).end_session.remote(session)

    async def aclose(self) -> None:  # the workers are closed by start()'s exit
        return None

    async def sync(self, model: nn.Module, version: int) -> None:
        """Rank 0's weights into every worker; the policy version with them."""
        ref = self._ray.put(_engine_state(model))
        await asyncio.gather(*(w.load.remote(ref, version) for w in self.workers))
        self.version = version

    def engines(self, params: SamplingParams, budget: RolloutBudget) -> list[RolloutEngine]:
        """One engine per ``config.envs`` entry, its envs in Ray actors."""
        from envgym import registry

        r = self.config.rollout
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
            pool = RayEnvPool(factory, r.concurrency, address=r.ray_address)
            policy: Policy = self
            out.append(
                RolloutEngine(policy, pool, concurrency=r.concurrency, params=params, budget=budget)
            )
        return out
