"""The trainer's state is explicit: envgym/trainer/stream.py runs against the narrow StepHost
interface (no Trainer privates), Trainer creates every attribute in ``__init__``, Update.run leaves
its caller's samples alone, and envgym/trainer/loop.py and envgym/trainer/stream.py do not import
each other."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_train_loop import parity_bundle, tiny_model, tokenizer, train_config  # noqa: F401
from test_train_policy import _llama, _samples, _update

from envgym.record import EpisodeRecord
from envgym.rollout import EpisodeResult, EpisodeSpec
from envgym.trainer.batch import Group
from envgym.trainer.checkpoint import TaskOrder
from envgym.trainer.collect import Collected, StepReport, Tally
from envgym.trainer.config import TrainConfig, config_from_dict
from envgym.trainer.loop import Trainer
from envgym.trainer.stream import run_async

TRAINER = Path(__file__).resolve().parents[1] / "envgym" / "trainer"


class _Engine:
    """Stands in for a RolloutEngine: reward = sample parity, sampled at the host's version."""

    def __init__(self, host: _Host) -> None:
        self.host = host

    async def run(self, specs: list[EpisodeSpec]) -> AsyncIterator[EpisodeResult]:
        for spec in specs:
            await asyncio.sleep(0)  # let the consumer and the "training" interleave
            record = EpisodeRecord(policy_version=self.host.version)
            yield EpisodeResult(spec.task_id, spec.sample, reward=spec.sample % 2, record=record)


@dataclass
class _Host:
    """Only the members envgym.trainer.collect.StepHost names: no Trainer behind it."""

    config: TrainConfig
    order: TaskOrder
    rollout_engines: list[Any] = field(default_factory=list)
    step: int = 0
    version: int = 0
    on_phase: Callable[[str], None] = lambda text: None
    collected: list[Collected] = field(default_factory=list)

    async def finish_step(self, collected: Collected) -> StepReport:
        self.collected.append(collected)
        await asyncio.sleep(0)  # the update: the producer goes on meanwhile
        self.step += 1
        self.version += 1
        return StepReport(self.step, collected.tally.metrics(collected.groups), collected.skipped)


@pytest.mark.timeout(30)
def test_the_async_loop_runs_on_the_step_host_interface_alone() -> None:
    config = config_from_dict(
        {
            "envs": [{"id": "x"}],
            "rollout": {"group_size": 2, "prompts": 2},
            "steps": 3,
            "dynamic_sampling": {"enabled": False},
            "async": {"enabled": True, "max_staleness": 0, "stale": "regenerate"},
        }
    )
    host = _Host(config, TaskOrder([(0, t) for t in "abcd"], seed=0))
    host.rollout_engines = [_Engine(host)]
    reports: list[StepReport] = []
    asyncio.run(asyncio.wait_for(run_async(host, reports), timeout=20))
    assert [r.step for r in reports] == [1, 2, 3] and all(r.skipped is None for r in reports)
    for version, collected in enumerate(host.collected):
        assert len(collected.groups) == 2
        # staleness bound 0: every group trained on was sampled at the version it trains
        assert {g.results[0].record.policy_version for g in collected.groups} == {version}
        assert collected.tally.staleness_max == 0 and collected.tally.share.episodes >= 4
    # the producer ran ahead while step 1 trained: those groups were stale, dropped and counted
    stale = [c.tally.stale_dropped for c in host.collected]
    assert sum(stale) > 0
    assert [r.metrics["stale_dropped"] for r in reports] == [float(s) for s in stale]


class _ErroringEngine(_Engine):
    """Like _Engine, but the last sample of each task errors (an infrastructure failure)."""

    async def run(self, specs: list[EpisodeSpec]) -> AsyncIterator[EpisodeResult]:
        last = max(s.sample for s in specs)
        async for result in super().run(specs):
            if result.sample == last:
                result = EpisodeResult(result.task_id, result.sample, error="env")
            yield result


@pytest.mark.timeout(30)
def test_the_async_loop_counts_episodes_left_out_of_groups() -> None:
    config = config_from_dict(
        {
            "envs": [{"id": "x"}],
            "rollout": {"group_size": 3, "prompts": 2},
            "steps": 2,
            "dynamic_sampling": {"enabled": False},
            "async": {"enabled": True, "max_staleness": 4},
        }
    )
    host = _Host(config, TaskOrder([(0, t) for t in "abcd"], seed=0))
    host.rollout_engines = [_ErroringEngine(host)]
    reports: list[StepReport] = []
    asyncio.run(asyncio.wait_for(run_async(host, reports), timeout=20))
    kept = sum(len(c.groups) for c in host.collected)
    # each group trained on lost one sample; its step's metrics say so
    assert kept > 0 and sum(r.metrics["errored"] for r in reports) >= kept


def test_tally_counts_filters_and_reports() -> None:
    def group(task: str, *rewards: float) -> Group:
        return Group(task, [EpisodeResult(task, i, reward=r) for i, r in enumerate(rewards)])

    tally = Tally()
    groups = [group("a", 0.0, 1.0), group("b", 1.0, 1.0), group("c", 0.0, 0.0)]
    tally.count(groups)
    kept = tally.informative(groups, dynamic_sampling=True)
    assert [g.task_id for g in kept] == ["a"]
    assert (tally.all_correct, tally.all_wrong, tally.episodes, tally.passed) == (1, 1, 6, 3)
    metrics = tally.metrics(kept)
    assert metrics["reward_mean"] == 0.5 and metrics["groups_kept"] == 1.0
    assert "staleness_max" not in metrics  # only the async loop sets it
    assert tally.informative(groups, dynamic_sampling=False) == groups
    tally.staleness_max = 2
    assert tally.metrics(kept)["staleness_max"] == 2.0


def test_the_update_leaves_its_callers_samples_alone() -> None:
    """π_old and the reference log-probs go into copies the update trains on, not into the
    caller's samples (they were set on them by name before)."""
    samples = _samples()
    metrics, skipped = _update(_llama(), minibatches=2).run(samples, step=0)
    assert skipped is None and metrics["optimizer_steps"] == 2
    assert all(s.old_logp is None and s.ref_logp is None for s in samples)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("async_", [False, True])
def test_a_run_adds_no_attributes_to_the_trainer(
    tmp_path: Path,
    tokenizer: Any,  # noqa: F811 - the fixture imported above
    async_: bool,
) -> None:
    overrides = {"steps": 1, "rollout.prompts": 1, "dynamic_sampling.enabled": False}
    config = train_config(
        tmp_path, parity_bundle(tmp_path / "b"), **overrides, **{"async.enabled": async_}
    )
    trainer = Trainer(config, model=tiny_model(), tokenizer=tokenizer)
    before = set(vars(trainer))
    (report,) = trainer.run()
    assert report.step == 1
    assert set(vars(trainer)) == before


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top, inside functions or under TYPE_CHECKING."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_loop_and_stream_do_not_import_each_other() -> None:
    assert "envgym.trainer.stream" in _imports(TRAINER / "loop.py")
    assert "envgym.trainer.loop" not in _imports(TRAINER / "stream.py")
    assert "envgym.trainer.loop" not in _imports(TRAINER / "collect.py")
