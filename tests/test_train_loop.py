"""envgym/trainer/loop.py end to end on CPU: a tiny random Llama (hidden 32) on a real bundle env.

The env is a real :class:`BundleEnv` (in-process sandbox) whose tasks end on the first assistant
message and whose verifier passes when the answer has an even number of characters: a tiny random
model's groups then hold mixed rewards, so GRPO has a gradient.  The tests' helpers are imported
by tests/test_train_checkpoint.py too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from bundle_factory import make_notes_bundle
from transformers import LlamaConfig, LlamaForCausalLM

from envgym import registry
from envgym.bundle import write_manifest
from envgym.bundle_env import BundleEnv
from envgym.embedded import load_tokenizer
from envgym.trainer import loop
from envgym.trainer.config import TrainConfig, config_from_dict
from envgym.trainer.loop import Trainer, task_split

PARITY = """

def verify_parity(submission, task):
    text = submission.get("content") or ""
    return {"checks": [{"name": "even", "passed": len(text) % 2 == 0, "detail": ""}]}


def verify_always(submission, task):
    return {"checks": [{"name": "ok", "passed": True, "detail": ""}]}
"""


def parity_bundle(root: Path, *, tasks: int = 4, verifier: str = "verify_parity") -> Path:
    specs = [
        {
            "id": f"t{i}",
            "prompt": f"Say something about {i}.",
            "solution": "solve_secret",
            "verifier": verifier,
            "difficulty": 1,
            "submit_tool": None,
            "metadata": {"key": "secret"},
        }
        for i in range(tasks)
    ]
    make_notes_bundle(root, tasks=specs)
    (root / "verifier.py").write_text((root / "verifier.py").read_text() + PARITY)
    write_manifest(root, name="parity", category="test", provenance={"agent": "test", "seed": 0})
    return root


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).float()


def train_config(tmp: Path, bundle: Path | str, **overrides: Any) -> TrainConfig:
    data: dict[str, Any] = {
        "envs": [{"id": str(bundle), "sandbox": "inprocess"}],
        "rollout": {
            "group_size": 4,
            "prompts": 2,
            "max_tokens": 10,
            "episode_tokens": 20,
            "max_turns": 2,
            "concurrency": 1,
        },
        "steps": 2,
        "overlong_mask": False,  # a random model never stops by itself: every turn is "length"
        "optimizer": {"lr": 1e-3},
        "checkpoint": {"dir": str(tmp / "ck")},
        "metrics": {"dir": str(tmp / "metrics")},
    }
    for key, value in overrides.items():
        node = data
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return config_from_dict(data)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer()


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.timeout(300)
def test_two_steps_end_to_end(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    released: list[int] = []  # each update is bracketed by a release of freed memory
    monkeypatch.setattr(loop, "release_freed", lambda: released.append(1) or 0)
    bundle = parity_bundle(tmp_path / "b", tasks=5)
    config = train_config(
        tmp_path,
        bundle,
        minibatches=2,
        **{
            "loss.kl_beta": 0.01,
            "heldout.fraction": 0.2,
            "heldout.every": 2,
            "rollout.top_k": 50,
        },
    )
    model = tiny_model()
    before = _weights(model)
    phases: list[str] = []
    trainer = Trainer(config, model=model, tokenizer=tokenizer, on_phase=phases.append)
    assert len(trainer.train_tasks) == 4 and len(trainer.heldout_tasks) == 1
    assert not set(trainer.train_tasks) & set(trainer.heldout_tasks)
    reports = trainer.run()

    assert [r.step for r in reports] == [1, 2] and all(r.skipped is None for r in reports)
    assert len(released) == 4  # before and after each of the two updates
    assert trainer.version == 2 and trainer.engine.version == 2
    after = model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it learned something
    engine = trainer.engine.model.state_dict()
    assert all(torch.equal(engine[k], after[k]) for k in after)  # and the engine has it
    m = reports[-1].metrics
    for key in (
        "reward_mean",
        "pass_rate",
        "kl",
        "entropy",
        "clip_low_fraction",
        "clip_high_fraction",
        "dual_clip_fraction",
        "opsm_masked_fraction",
        "tis_ratio_mean",
        "tis_ratio_mean_truncated",
        "response_len_mean",
        "seq_len_mean",
        "grad_norm",
        "heldout_pass_rate",
    ):
        assert key in m and math.isfinite(m[key]), key
    assert m["optimizer_steps"] == 2 and m["policy_version"] == 2
    assert 0.0 < m["entropy"] <= math.log(50) + 1e-6  # π_θ renormalized over the top-50 kept set
    metrics_dir = tmp_path / "metrics"
    rows = (metrics_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("step,")
    assert (metrics_dir / "curves.png").stat().st_size > 1000
    assert list((metrics_dir / "tb").glob("events.out.tfevents.*"))
    run = json.loads((metrics_dir / "run.json").read_text())
    assert run["status"] == "finished" and run["step"] == 2 and run["run_key"].startswith("sha256:")
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step-000001", "step-000002"]
    assert any("held-out" in p for p in phases)


class NanRewardEnv(BundleEnv):
    """A real bundle env whose final reward is NaN (a broken reward model, say)."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, (math.nan if terminated else reward), terminated, truncated, info


@pytest.mark.timeout(300)
def test_nan_rewards_skip_the_batch_and_are_reported(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = parity_bundle(tmp_path / "b")
    registry.discover()
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    registry.register(
        "nan-reward-v0", lambda **kw: NanRewardEnv(bundle, **kw), bundle_dir=lambda: bundle
    )
    config = train_config(tmp_path, "nan-reward-v0", steps=1)
    model = tiny_model()
    before = _weights(model)
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    (report,) = trainer.run()
    assert report.skipped is not None and "non-finite rewards" in report.skipped
    assert "t" in report.skipped and "= nan" in report.skipped
    assert report.metrics["skipped"] == 1.0 and trainer.version == 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.timeout(300)
def test_an_empty_batch_after_filtering_is_refilled_then_the_step_skipped(
    tmp_path: Path, tokenizer: Any
) -> None:
    bundle = parity_bundle(tmp_path / "b", verifier="verify_always")  # every group all-correct
    config = train_config(tmp_path, bundle, steps=1, **{"dynamic_sampling.max_refills": 1})
    model = tiny_model()
    before = _weights(model)
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    (report,) = trainer.run()
    assert report.skipped == "empty batch: every group was filtered out"
    m = report.metrics
    assert m["refills"] == 1 and m["groups_all_correct"] == 4 and m["groups_kept"] == 0
    assert m["episodes"] == 16 and m["pass_rate"] == 1.0
    assert trainer.version == 0 and trainer.engine.version == 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert trainer.order.cursor == {"epoch": 0, "index": 4}  # 2 + 2 prompts of 4 consumed


@pytest.mark.timeout(300)
def test_async_mode_trains_within_the_staleness_bound(tmp_path: Path, tokenizer: Any) -> None:
    bundle = parity_bundle(tmp_path / "b")
    config = train_config(
        tmp_path,
        bundle,
        **{
            "async.enabled": True,
            "async.max_staleness": 0,
            "async.stale": "regenerate",
            "dynamic_sampling.enabled": False,
        },
    )
    trainer = Trainer(config, model=tiny_model(), tokenizer=tokenizer)
    reports = trainer.run()
    assert [r.step for r in reports] == [1, 2] and all(r.skipped is None for r in reports)
    assert trainer.version == 2
    assert all(r.metrics["staleness_max"] == 0.0 for r in reports)


def test_oldest_version_reads_every_turn() -> None:
    from envgym.record import EpisodeRecord, Segment, TurnInfo
    from envgym.rollout import EpisodeResult
    from envgym.trainer.batch import Group
    from envgym.trainer.stream import oldest_version

    def result(versions: list[int | None]) -> EpisodeResult:
        seg = Segment()
        seg.add_context([1])
        for v in versions:
            seg.add_sampled([2], [-1.0], kept=[None], info=TurnInfo(policy_version=v))
        return EpisodeResult("t", 0, record=EpisodeRecord(segments=[seg], policy_version=5))

    assert oldest_version(Group("t", [result([4, 3]), result([6])])) == 3
    assert oldest_version(Group("t", [result([None]), result([7])])) == 5  # unknown → episode's


@pytest.mark.timeout(300)
def test_the_cli_trains_from_a_yaml_config(tmp_path: Path, tokenizer: Any) -> None:
    from typer.testing import CliRunner

    from envgym.cli import app

    model_dir = tmp_path / "model"
    tiny_model().save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    bundle = parity_bundle(tmp_path / "b")
    config = tmp_path / "run.yaml"
    config.write_text(
        json.dumps(
            {  # JSON is YAML
                "model": {"path": str(model_dir)},
                "envs": [{"id": str(bundle), "sandbox": "inprocess"}],
                "rollout": {
                    "group_size": 2,
                    "prompts": 2,
                    "max_tokens": 8,
                    "episode_tokens": 8,
                    "concurrency": 2,
                },
                "overlong_mask": False,
                "steps": 1,
                "checkpoint": {"dir": str(tmp_path / "ck"), "export": str(tmp_path / "policy")},
                "metrics": {"dir": str(tmp_path / "m")},
            }
        )
    )
    result = CliRunner().invoke(app, ["train", str(config), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert payload["steps"] == 1 and payload["last"]["step"] == 1
    checkpoint = tmp_path / "ck" / "step-000001" / "model.pt"
    assert checkpoint.is_file()
    # the exported policy is the trained one, and loads where `envgym eval --model` loads models
    from envgym.models import load_policy

    exported = load_policy(str(tmp_path / "policy"))
    trained = torch.load(checkpoint, weights_only=True)
    state = exported.model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in trained.items())
    assert not all(torch.equal(state[k], v) for k, v in tiny_model().state_dict().items())
    meta = json.loads((tmp_path / "policy" / "train_run.json").read_text())
    assert meta["step"] == 1 and meta["policy_version"] == 1


def test_export_refuses_a_folder_it_did_not_write(tmp_path: Path, tokenizer: Any) -> None:
    from envgym.trainer.checkpoint import export_policy

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "weights.bin").write_text("someone's model")
    with pytest.raises(FileExistsError, match="not an earlier export"):
        export_policy(tiny_model(), tokenizer, theirs, {})
    assert (theirs / "weights.bin").read_text() == "someone's model"
    out = export_policy(tiny_model(), tokenizer, tmp_path / "ours", {"step": 1})
    export_policy(tiny_model(seed=1), tokenizer, out, {"step": 2})  # an earlier export: replaced
    assert json.loads((out / "train_run.json").read_text()) == {"step": 2}
    assert not list(tmp_path.glob(".ours.tmp-*"))


def test_task_split_bad_input(tmp_path: Path) -> None:
    bundle = parity_bundle(tmp_path / "b")
    with pytest.raises(ValueError, match=r"envs\[0\].tasks: no such tasks .*'nope'"):
        envs = [{"id": str(bundle), "tasks": ["t0", "nope"]}]
        task_split(train_config(tmp_path, bundle, envs=envs))
    with pytest.raises(ValueError, match=r"heldout.tasks: no such tasks: \['zz'\]"):
        task_split(train_config(tmp_path, bundle, **{"heldout.tasks": ["zz"]}))
    with pytest.raises(ValueError, match=r"envs\[0\].id"):
        task_split(train_config(tmp_path, tmp_path / "missing"))
    train, held = task_split(train_config(tmp_path, bundle, **{"heldout.tasks": [f"{bundle}::t1"]}))
    assert held == [(0, "t1")] and (0, "t1") not in train and len(train) == 3
    every = train_config(tmp_path, bundle, **{"heldout.tasks": ["t0", "t1", "t2", "t3"]})
    with pytest.raises(ValueError, match="no training tasks"):
        Trainer(every, model=tiny_model(), tokenizer=None)
