"""Whole-episode masking and the episode as the loss's sequence (envgym/trainer/batch.py,
collect.py, losses.py, masks.py, aggregation.py, config.py).

* overlong masking of whole samples (LongCat §3.2.2), the multi-turn default;
* NaN/±inf rewards mask their episodes only, counted in ``nonfinite_rewards``;
* OPSM's statistic (DeepSeek-V3.2 eq. 9) and seq-mean-token-mean run per trajectory (episode),
  not per record segment;
* an MoE policy on a user-started vLLM server is refused unless the user opts out.

Exact values on tiny float64 tensors, written out by hand (ratios chosen, log-probs built from
them), in the style of the loss tests.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from envgym.record import EpisodeRecord, Segment, TurnInfo
from envgym.rollout import EpisodeResult
from envgym.trainer.advantages import group_advantages
from envgym.trainer.aggregation import aggregate_parts
from envgym.trainer.batch import Group, collate, samples_from_groups
from envgym.trainer.collect import Tally
from envgym.trainer.config import (
    ConfigError,
    MoEWithoutRoutesError,
    config_from_dict,
    overlong_scope,
    refuse_moe_without_routes,
)
from envgym.trainer.losses import LossConfig, grpo_loss
from envgym.trainer.masks import opsm_mask
from envgym.trainer.microbatches import balanced_microbatches

F64 = torch.float64


def t(*rows: Any) -> torch.Tensor:
    return torch.tensor(rows if len(rows) > 1 else rows[0], dtype=F64)


def close(a: torch.Tensor | float, b: float) -> bool:
    return math.isclose(float(a), b, rel_tol=1e-12, abs_tol=1e-12)


def same(a: torch.Tensor, b: torch.Tensor, atol: float = 0.0) -> bool:
    """Equal shape and dtype, values within ``atol`` (not torch.testing: its import of
    torch.distributed takes minutes on a loaded machine)."""
    return (
        a.shape == b.shape and a.dtype == b.dtype and bool(torch.allclose(a, b, rtol=0, atol=atol))
    )


# -- records -------------------------------------------------------------------------------------
def _turns(*finish: str, start: int = 10) -> Segment:
    """A segment: one context token, then one sampled turn of two tokens per finish reason."""
    seg = Segment()
    seg.add_context([start])
    for k, reason in enumerate(finish):
        seg.add_sampled(
            [start + 2 * k + 1, start + 2 * k + 2],
            [-0.5, -0.5],
            kept=[None, None],
            info=TurnInfo(finish_reason=reason, policy_version=0),
        )
    return seg


def _episode(task: str, sample: int, reward: float, *segments: Segment) -> EpisodeResult:
    record = EpisodeRecord(segments=list(segments) or [_turns("stop")], reward=reward)
    return EpisodeResult(task_id=task, sample=sample, reward=reward, record=record)


def _advantages(groups: list[Group]) -> torch.Tensor:
    n = max(len(g.results) for g in groups)
    rewards = torch.zeros(len(groups), n, dtype=F64)
    valid = torch.zeros(len(groups), n, dtype=torch.bool)
    for i, g in enumerate(groups):
        rewards[i, : len(g.results)] = torch.tensor(g.rewards, dtype=F64)
        valid[i, : len(g.results)] = True
    return group_advantages(rewards, valid=valid)


def _overlong_group() -> Group:
    """Three episodes, rewards 1, 0, 0; episode 1's second turn was cut by the token limit."""
    return Group(
        "t",
        [
            _episode("t", 0, 1.0, _turns("stop", "stop")),
            _episode("t", 1, 0.0, _turns("stop", "length")),
            _episode("t", 2, 0.0, _turns("stop", "stop")),
        ],
    )


# -- 1. overlong: the whole sample ---------------------------------------------------------------
def test_whole_sample_overlong_mask_drops_the_episode_and_its_share_of_the_group_mean() -> None:
    tally = Tally()
    groups = tally.admit([_overlong_group()], overlong_sample=True)
    assert [r.sample for r in groups[0].results] == [0, 2]
    adv = _advantages(groups)
    assert same(adv, t([[0.5, -0.5]]), 0)  # mean over 1 and 0
    samples = samples_from_groups(groups, adv, overlong_mask=False)
    assert [(s.reward, s.advantage, s.trained_tokens) for s in samples] == [
        (1.0, 0.5, 4),
        (0.0, -0.5, 4),
    ]
    # rolled out and counted in the rollout statistics, masked from training
    m = tally.metrics(groups)
    assert m["overlong_masked"] == 1.0 and m["episodes"] == 3.0
    assert close(m["reward_mean"], 1 / 3) and m["errored"] == 0.0


def test_turn_scope_keeps_the_episodes_earlier_turns_and_its_place_in_the_mean() -> None:
    """``overlong_scope: turn`` (the behaviour before the option): only the cut turn goes."""
    tally = Tally()
    groups = tally.admit([_overlong_group()], overlong_sample=False)
    adv = _advantages(groups)
    assert same(adv, t([[2 / 3, -1 / 3, -1 / 3]]), 1e-15)
    samples = samples_from_groups(groups, adv, overlong_mask=True)
    assert [s.trained_tokens for s in samples] == [4, 2, 4]  # episode 1: its first turn only
    assert close(samples[1].advantage, -1 / 3) and tally.overlong_masked == 0


def test_a_group_left_with_one_episode_goes_and_its_survivor_is_counted() -> None:
    tally = Tally()
    group = Group("t", [_episode("t", 0, 1.0, _turns("length")), _episode("t", 1, 0.0)])
    assert tally.admit([group], overlong_sample=True) == []
    assert (tally.overlong_masked, tally.errored, tally.episodes) == (1, 1, 2)


def _config(**top: Any) -> Any:
    data: dict[str, Any] = {"envs": [{"id": "x"}], "rollout": {"group_size": 2, "prompts": 1}}
    data.update(top)
    return config_from_dict(data)


def test_whole_sample_masking_is_the_multi_turn_default() -> None:
    assert overlong_scope(_config()) == "sample"  # max_turns 16
    assert overlong_scope(_config(rollout={"group_size": 2, "max_turns": 2})) == "sample"
    assert overlong_scope(_config(rollout={"group_size": 2, "max_turns": 1})) == "turn"
    assert overlong_scope(_config(overlong_scope="turn")) == "turn"
    assert overlong_scope(_config(overlong_scope="sample", rollout={"max_turns": 1})) == "sample"
    assert overlong_scope(_config(overlong_mask=False)) is None
    with pytest.raises(ConfigError, match="overlong_scope"):
        _config(overlong_scope="episode")


def test_the_run_identity_keeps_checkpoints_of_turn_scope_runs_resumable() -> None:
    from envgym.trainer.loop import _run_config

    old = _config(overlong_scope="turn").to_dict()
    old.pop("overlong_scope")  # a checkpoint written before the key existed
    old["model"].pop("allow_moe_without_keep_routing")
    for env in old["envs"]:
        env.pop("kept")  # nor envs[].kept
    assert _run_config(old) == _run_config(_config(overlong_scope="turn"))
    assert _run_config(old) != _run_config(_config())  # auto = sample here: another run
    assert _run_config(_config()) == _run_config(_config(overlong_scope="sample"))
    assert _run_config(_config().to_dict()) == _run_config(_config())  # a new checkpoint


# -- 2. NaN rewards: the sample, not the step ------------------------------------------------------
def test_nonfinite_rewards_mask_their_episodes_only_and_are_counted() -> None:
    tally = Tally()
    groups = [
        Group("a", [_episode("a", 0, math.nan), _episode("a", 1, 1.0), _episode("a", 2, 0.0)]),
        Group("b", [_episode("b", 0, math.inf), _episode("b", 1, 0.5)]),
        Group("c", [_episode("c", 0, 1.0), _episode("c", 1, 0.0)]),
    ]
    kept = tally.admit(groups, overlong_sample=True)
    assert [(g.task_id, [r.sample for r in g.results]) for g in kept] == [
        ("a", [1, 2]),
        ("c", [0, 1]),
    ]
    assert tally.nonfinite == ["a#0 = nan", "b#0 = inf"]
    assert same(_advantages(kept), t([[0.5, -0.5], [0.5, -0.5]]), 0)
    m = tally.metrics(kept)
    assert m["nonfinite_rewards"] == 2.0 and m["episodes"] == 4.0 and m["errored"] == 1.0
    assert m["reward_mean"] == 0.5 and m["pass_rate"] == 0.5  # finite numbers
    assert tally.skip_reason().startswith("empty batch")


def test_a_batch_of_nothing_but_nonfinite_rewards_says_so_when_skipped() -> None:
    tally = Tally()
    assert tally.admit([Group("a", [_episode("a", 0, math.nan)] * 2)], overlong_sample=False) == []
    assert tally.skip_reason() == (
        "empty batch: every group was filtered out (non-finite rewards masked: a#0 = nan, a#0 = nan)"
    )
    assert Tally().skip_reason() == "empty batch: every group was filtered out"


# -- 3. the sequence is the trajectory -------------------------------------------------------------
# Rows 0 and 1 are the two segments of episode 0 (the context policy split it), row 2 is
# episode 1.  Ratios are 1 (logp = old_logp), so every trained token's surrogate is Â.
MASK = t([1.0, 1.0], [1.0, 0.0], [1.0, 1.0])
TRAJ = torch.tensor([0, 0, 1])
ADV = t([-0.5, -0.5, 1.0])


def _logp() -> torch.Tensor:
    return t([-1.0, -2.0], [-0.5, -9.0], [-1.5, -0.25]).requires_grad_(True)


def test_seq_mean_token_mean_averages_over_episodes_not_segments() -> None:
    cfg = LossConfig(aggregation="seq-mean-token-mean", tis_cap=None, dual_clip=None)
    logp = _logp()
    loss, d = grpo_loss(logp, logp.detach(), ADV, MASK, cfg, trajectory=TRAJ)
    # episode 0: 3 tokens of ℓ = 0.5 → 0.5; episode 1: 2 tokens of ℓ = −1 → −1; mean of 2
    assert close(loss, (0.5 - 1.0) / 2) and close(d["n_units"], 2.0) and close(d["sequences"], 2.0)
    (grad,) = torch.autograd.grad(loss, logp)
    # ∂ℓ/∂logp = −Â·r; each token weighs 1 / (|o_i| · #episodes)
    expect = t([1 / 12, 1 / 12], [1 / 12, 0.0], [-1 / 4, -1 / 4])
    assert same(grad, expect, 1e-15)
    # per segment (no trajectory) it would be (0.5 + 0.5 − 1) / 3 = 0, row 1's token 1/6
    per_row, _ = grpo_loss(logp, logp.detach(), ADV, MASK, cfg)
    assert close(per_row, 0.0)
    total, units = aggregate_parts(
        t([1.0, 1.0], [4.0, 0.0], [2.0, 6.0]), MASK > 0, "seq-mean-token-mean", None, TRAJ
    )
    assert close(total, (1 + 1 + 4) / 3 + (2 + 6) / 2) and close(units, 2.0)


def test_opsm_statistic_runs_over_the_whole_episode() -> None:
    """Episode 0 (Â < 0): its segments diverge by 0.1, 0.1 and 0.7 nats (mean 0.3 > δ = 0.25):
    both segments are masked, though segment 0 alone (0.1) would not be.  Episode 1 (Â > 0)
    diverges by 0.2 and 0 (mean 0.1) and is never masked."""
    cfg = LossConfig(opsm_delta=0.25, tis_cap=None, dual_clip=None)
    logp = _logp()
    engine = logp.detach() + t([0.1, 0.1], [0.7, 0.0], [0.2, 0.0])
    loss, d = grpo_loss(logp, logp.detach(), ADV, MASK, cfg, engine_logp=engine, trajectory=TRAJ)
    assert close(loss, (0 + 0 + 0 - 1 - 1) / 5)  # token-mean; episode 0 masked whole
    assert close(d["opsm_masked_fraction"], 1 / 2) and close(d["opsm_kl"], (0.3 + 0.1) / 2)
    keep, div = opsm_mask(logp.detach(), engine, ADV, MASK > 0, 0.25, TRAJ)
    assert keep.tolist() == [False, False, True]
    assert same(div, t([0.3, 0.3, 0.1]), 1e-15)
    # per segment: only row 1 masked, 1 of 3 sequences, loss (0.5 + 0.5 − 2) / 5
    per_row, d_row = grpo_loss(logp, logp.detach(), ADV, MASK, cfg, engine_logp=engine)
    assert close(per_row, -0.2) and close(d_row["opsm_masked_fraction"], 1 / 3)


def test_rows_of_one_trajectory_must_share_its_advantage() -> None:
    logp = _logp()
    with pytest.raises(ValueError, match="different advantages"):
        grpo_loss(logp, logp.detach(), t([-0.5, 0.5, 1.0]), MASK, LossConfig(), trajectory=TRAJ)
    with pytest.raises(ValueError, match="trajectory has shape"):
        grpo_loss(logp, logp.detach(), ADV, MASK, LossConfig(), trajectory=torch.tensor([0, 1]))


def test_samples_know_their_episode_and_batches_their_trajectories() -> None:
    two = _episode("t", 0, 1.0, _turns("stop", start=10), _turns("stop", start=20))
    group = Group("t", [two, _episode("t", 1, 0.0)])
    samples = samples_from_groups([group], t([[0.5, -0.5]]), overlong_mask=False)
    assert [(s.episode, s.advantage) for s in samples] == [(0, 0.5), (0, 0.5), (1, -0.5)]
    assert collate(samples, dtype=F64).trajectory.tolist() == [0, 0, 1]
    # the two segments of episode 0 share a microbatch (a segment each would split them)
    assert balanced_microbatches([5, 5, 5], 10, together=[0, 0, 1]) == [[0, 1], [2]]
    assert balanced_microbatches([5, 5, 5], 10) == [[0, 2], [1]]


def test_the_update_counts_episodes_as_seq_mean_units() -> None:
    from test_train_policy import _llama, _update

    two = _episode("t", 0, 1.0, _turns("stop", start=10), _turns("stop", start=20))
    group = Group("t", [two, _episode("t", 1, 0.0)])
    samples = samples_from_groups([group], t([[0.5, -0.5]]), overlong_mask=False)
    update = _update(_llama(), loss={"aggregation": "seq-mean-token-mean"})
    assert update._units(samples) == 2.0
    metrics, skipped = update.run(samples, step=0)
    assert skipped is None and metrics["optimizer_steps"] == 1.0


# -- 4. MoE on a user-started vLLM server ----------------------------------------------------------
def _model_dir(root: Path, **config: Any) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "x", **config}))
    return root


def _vllm(path: Path, **model: Any) -> Any:
    return _config(
        model={"path": str(path), "engine": "vllm", "vllm_url": "http://127.0.0.1:1/v1", **model}
    )


def test_an_moe_model_on_a_users_vllm_server_is_refused_at_config_validation(
    tmp_path: Path,
) -> None:
    moe = _model_dir(tmp_path / "moe", num_local_experts=4, num_experts_per_tok=2)
    with pytest.raises(MoEWithoutRoutesError, match="allow_moe_without_keep_routing"):
        _vllm(moe)
    assert issubclass(MoEWithoutRoutesError, ConfigError)
    assert _vllm(moe, allow_moe_without_keep_routing=True).model.allow_moe_without_keep_routing
    qwen = _model_dir(tmp_path / "qwen", num_experts=8)
    with pytest.raises(MoEWithoutRoutesError):
        _vllm(qwen)
    dense = _model_dir(tmp_path / "dense", num_experts=0)
    assert _vllm(dense).model.vllm_url  # dense: nothing to lose
    local = {"path": str(moe), "engine": "local"}
    assert _config(model=local).model.engine == "local"  # the local engine records routes
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("[")  # cannot tell: the load-time check runs
    assert _vllm(tmp_path / "bad").model.engine == "vllm"


def test_the_loaded_model_is_checked_too() -> None:
    config = _config(model={"engine": "vllm", "vllm_url": "http://127.0.0.1:1/v1"})
    with pytest.raises(MoEWithoutRoutesError, match="keep routing"):
        refuse_moe_without_routes(config, True)
    refuse_moe_without_routes(config, False)
    refuse_moe_without_routes(config, None)


@pytest.mark.timeout(120)
def test_the_trainer_refuses_an_moe_model_passed_in(tmp_path: Path) -> None:
    from test_train_loop import parity_bundle
    from test_train_policy import _mixtral

    from envgym.trainer.loop import Trainer

    bundle = parity_bundle(tmp_path / "b")
    config = config_from_dict(
        {
            "envs": [{"id": str(bundle), "sandbox": "inprocess"}],
            "rollout": {"group_size": 2, "prompts": 1},
            "model": {"engine": "vllm", "vllm_url": "http://127.0.0.1:1/v1"},
            "checkpoint": {"dir": str(tmp_path / "ck")},
            "metrics": {"dir": str(tmp_path / "m")},
        }
    )
    with pytest.raises(MoEWithoutRoutesError):
        Trainer(config, model=_mixtral(), tokenizer=object())


@pytest.mark.timeout(300)
def test_one_task_with_nan_rewards_costs_its_samples_not_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task t0's reward model is broken (NaN); t1's works: the step trains on t1's group and
    reports t0's four episodes in ``nonfinite_rewards`` (before: the step was skipped and
    ``episodes`` read 0)."""
    from test_train_loop import parity_bundle, tiny_model, train_config

    from envgym import registry
    from envgym.bundle_env import BundleEnv
    from envgym.embedded import load_tokenizer
    from envgym.trainer.loop import Trainer

    class OneNanTask(BundleEnv):
        def step(self, action: Any) -> Any:
            obs, reward, terminated, truncated, info = super().step(action)
            broken = terminated and self.task is not None and self.task.id == "t0"
            return obs, (math.nan if broken else reward), terminated, truncated, info

    bundle = parity_bundle(tmp_path / "b", tasks=2)
    registry.discover()
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    registry.register(
        "one-nan-v0", lambda **kw: OneNanTask(bundle, **kw), bundle_dir=lambda: bundle
    )
    config = train_config(tmp_path, "one-nan-v0", steps=1, **{"dynamic_sampling.enabled": False})
    trainer = Trainer(config, model=tiny_model(), tokenizer=load_tokenizer())
    (report,) = trainer.run()
    assert report.skipped is None and trainer.version == 1
    m = report.metrics
    assert m["nonfinite_rewards"] == 4.0 and m["episodes"] == 4.0 and m["groups_kept"] == 1.0
    assert math.isfinite(m["reward_mean"]) and m["optimizer_steps"] == 1.0
