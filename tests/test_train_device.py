"""Device placement of the trainer without a GPU: ``model.device`` is resolved and checked,
``envgym train`` places the model it loads there, and every microbatch the update feeds the
policy is built on the policy's device.  The "other device" here is ``meta`` (shape-only
tensors, available in every torch build): a batch left on the CPU shows up as ``cpu``.  What
runs on a real GPU is scripts/gpu_check.sh (docs/GPU.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_train_batch import _result
from test_train_loop import parity_bundle, tiny_model, train_config

from envgym.record import Segment, TurnInfo
from envgym.trainer import loop
from envgym.trainer.batch import Group, TrainBatch, collate, samples_from_groups
from envgym.trainer.config import ConfigError, config_from_dict, resolve_device
from envgym.trainer.policy import TrainablePolicy
from envgym.trainer.update import Update

META = torch.device("meta")


def _samples() -> list[Any]:
    segs = []
    for i in range(2):
        seg = Segment()
        seg.add_context([10, 11 + i])
        seg.add_sampled([13, 14], [-0.5, -0.25], kept=[None, [14, 20]], info=TurnInfo())
        segs.append(seg)
    g = Group(
        "t", [_result("t", 0, 1.0, segments=[segs[0]]), _result("t", 1, 0.0, segments=[segs[1]])]
    )
    samples = samples_from_groups([g], torch.tensor([[0.5, -0.5]]), overlong_mask=False)
    for s in samples:  # π_old as Update._prepare stores it; MoE routes [L, layers, k]
        s.old_logp = torch.zeros(s.length - 1)
        s.routes = torch.zeros(s.length, 1, 2, dtype=torch.int64)
    return samples


def _devices(batch: TrainBatch) -> dict[str, torch.device]:
    return {k: v.device for k, v in vars(batch).items() if isinstance(v, torch.Tensor)}


def test_collate_builds_every_tensor_on_the_device_asked_for() -> None:
    samples = _samples()
    on_cpu = collate(samples)
    assert set(_devices(on_cpu).values()) == {torch.device("cpu")}
    moved = collate(samples, device=META)
    assert set(_devices(moved)) == set(_devices(on_cpu))  # old_logp and routes included
    assert {"old_logp", "routes", "kept_ids"} <= set(_devices(moved))
    assert set(_devices(moved).values()) == {META}
    assert moved.input_ids.shape == on_cpu.input_ids.shape and moved.mask.dtype == torch.float32


def test_the_update_feeds_the_policy_batches_on_the_models_device(tmp_path: Path) -> None:
    config = config_from_dict({"envs": [{"id": "x"}]})
    model = tiny_model().to(dtype=torch.float64, device=META)
    update = Update(config, TrainablePolicy(model), None, pad_id=2)
    samples = _samples()
    for s in samples:
        s.routes = None  # a dense model's records
    batch = update._collate(samples)
    assert set(_devices(batch).values()) == {META}
    assert batch.mask.dtype == torch.float64  # and at the model's dtype, as before


def test_resolve_device(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="model.device is 'cuda' but torch .* no CUDA device"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ConfigError, match=r"'cuda:2' but torch sees 2 CUDA device"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "CUDA", "cuda:x", "mps", ""])
def test_a_bad_model_device_is_a_config_error_naming_the_key(bad: str) -> None:
    with pytest.raises(ConfigError, match="model.device must be auto, cpu, cuda or cuda:N"):
        config_from_dict({"envs": [{"id": "x"}], "model": {"device": bad}})
    assert config_from_dict({"envs": [{"id": "x"}]}).model.device == "auto"


@pytest.mark.timeout(120)
def test_envgym_train_places_the_model_it_loads_on_model_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envgym.embedded import load_tokenizer

    config = train_config(tmp_path, parity_bundle(tmp_path / "b"), **{"model.device": "cuda:1"})
    asked: list[str] = []

    def resolve(spec: str) -> torch.device:
        asked.append(spec)
        return META

    monkeypatch.setattr(loop, "resolve_device", resolve)
    monkeypatch.setattr(loop, "load_model", lambda c: (tiny_model(), load_tokenizer()))
    trainer = loop.Trainer(config, engine_policy=object())
    assert asked == ["cuda:1"]
    assert next(trainer.model.parameters()).device == META
    assert next(trainer.update.policy.model.parameters()).device == META


def test_a_model_passed_in_stays_where_it_is(tmp_path: Path) -> None:
    from envgym.embedded import load_tokenizer

    config = train_config(tmp_path, parity_bundle(tmp_path / "b"), **{"model.device": "cuda:7"})
    trainer = loop.Trainer(
        config, model=tiny_model(), tokenizer=load_tokenizer(), engine_policy=object()
    )
    assert next(trainer.model.parameters()).device == torch.device("cpu")


def test_model_device_is_not_part_of_the_run_identity(tmp_path: Path) -> None:
    """A run resumes on another machine, and from checkpoints written before the key."""
    a = config_from_dict({"envs": [{"id": "x"}], "model": {"device": "cpu"}})
    b = config_from_dict({"envs": [{"id": "x"}], "model": {"device": "cuda:0"}})
    old = a.to_dict()
    del old["model"]["device"]
    assert loop._run_config(a) == loop._run_config(b) == loop._run_config(old)
