"""envgym/trainer/config.py: typed YAML config; every bad input is one clear error naming its
key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envgym.trainer.config import ConfigError, TrainConfig, config_from_dict, load_config

REPO = Path(__file__).resolve().parents[1]
BASE: dict[str, Any] = {"envs": [{"id": "code-interpreter-math-v0"}]}


def _with(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    node = data
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return data


def test_the_example_config_loads_and_round_trips() -> None:
    config = load_config(REPO / "configs" / "grpo_smollm2.yaml")
    assert isinstance(config, TrainConfig)
    assert config.envs[0].id == "code-interpreter-math-v0"
    assert config.rollout.group_size == 8 and config.rollout.top_p == 0.95
    assert config.loss.eps_high == 0.28 and config.loss.opsm_delta is None
    assert config.async_.enabled is False
    assert config_from_dict(config.to_dict()) == config  # "async" written back under its YAML name
    assert "async" in config.to_dict() and "async_" not in config.to_dict()


def test_the_quick_config_names_real_tasks() -> None:
    from envgym.trainer.tasks import task_split

    config = load_config(REPO / "configs" / "grpo_smollm2_quick.yaml")
    train, held = task_split(config)  # every listed task exists in the registered env
    assert len(train) == 6 and len(held) == 2 and not set(train) & set(held)
    assert config.dynamic_sampling.enabled is False and config.minibatches == 2


def test_defaults_and_types() -> None:
    c = config_from_dict(_with("rollout.temperature", 1))  # an int where a float is expected
    assert c.rollout.temperature == 1.0 and isinstance(c.rollout.temperature, float)
    assert c.optimizer.max_grad_norm == 1.0
    assert config_from_dict(_with("optimizer.max_grad_norm", None)).optimizer.max_grad_norm is None
    assert config_from_dict(_with("loss.opsm_delta", 0.5)).loss.opsm_delta == 0.5


def test_file_keys_expand_home_and_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    monkeypatch.setenv("RUNS", "/data/runs")
    data = {
        "model": {"path": "~/sft/e1"},
        "envs": [{"id": "~/bundles/math"}, {"id": "code-interpreter-math-v0"}],
        "checkpoint": {"dir": "$RUNS/ck", "export": "$RUNS/policy"},
        "metrics": {"dir": "~/m"},
    }
    c = config_from_dict(data)
    assert c.model.path == "/home/u/sft/e1"
    assert [e.id for e in c.envs] == ["/home/u/bundles/math", "code-interpreter-math-v0"]
    assert (c.checkpoint.dir, c.checkpoint.export) == ("/data/runs/ck", "/data/runs/policy")
    assert c.metrics.dir == "/home/u/m"
    assert config_from_dict(_with("model.path", "smollm2")).model.path == "smollm2"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        # unknown keys, at every depth
        ("stepz", 3, "unknown config key 'stepz'"),
        ("rollout.groupsize", 8, "unknown config key 'rollout.groupsize'"),
        ("loss.epsilon", 0.2, "unknown config key 'loss.epsilon'"),
        ("async.maximum_staleness", 1, "unknown config key 'async.maximum_staleness'"),
        # wrong types
        ("steps", "10", "steps must be an integer, not str '10'"),
        ("steps", True, "steps must be an integer"),
        ("rollout.group_size", 8.5, "rollout.group_size must be an integer"),
        ("rollout.temperature", "hot", "rollout.temperature must be a number"),
        ("rollout.temperature", float("nan"), "rollout.temperature must be finite"),
        ("overlong_mask", "yes", "overlong_mask must be true or false"),
        ("rollout", [1], "rollout must be a mapping"),
        ("optimizer.betas", 0.9, "optimizer.betas must be a list"),
        ("old_logprobs", "sampler", "old_logprobs must be one of ['recompute', 'engine']"),
        ("async.stale", "keep", "async.stale must be one of"),
        ("model.dtype", "int8", "model.dtype must be one of"),
        # impossible values
        ("steps", 0, "steps must be > 0"),
        ("minibatches", 0, "minibatches must be > 0"),
        ("minibatches", 100, "minibatches (100) must be ≤ the episodes per batch"),
        ("micro_tokens", -1, "micro_tokens must be > 0"),
        ("rollout.group_size", 1, "rollout.group_size must be ≥ 2"),
        ("rollout.prompts", 0, "rollout.prompts must be > 0"),
        ("rollout.temperature", 0.0, "rollout.temperature must be > 0"),
        ("rollout.top_p", 1.5, "rollout.top_p must be in (0, 1]"),
        ("rollout.top_k", -1, "rollout.top_k must be ≥ 0"),
        ("rollout.max_seconds", 0, "rollout.max_seconds must be > 0"),
        ("optimizer.lr", 0.0, "optimizer.lr must be > 0"),
        ("optimizer.betas", [0.9], "optimizer.betas must be two numbers"),
        ("optimizer.max_grad_norm", 0.0, "optimizer.max_grad_norm must be > 0 or null"),
        ("model.sync_check_tol", 0.0, "model.sync_check_tol must be > 0 or null"),
        ("model.sync_check_tol", -1e-3, "model.sync_check_tol must be > 0 or null"),
        ("heldout.fraction", 1.0, "heldout.fraction must be in [0, 1)"),
        ("heldout.samples", 0, "heldout.samples must be > 0"),
        ("dynamic_sampling.max_refills", -1, "dynamic_sampling.max_refills must be ≥ 0"),
        ("async.max_staleness", -1, "async.max_staleness must be ≥ 0"),
        ("checkpoint.keep", 0, "checkpoint.keep must be > 0"),
        ("checkpoint.dir", " ", "checkpoint.dir and metrics.dir must be non-empty"),
        ("envs", [], "envs must list at least one environment"),
        ("envs", [{"id": ""}], "envs[0].id must name an environment"),
        ("envs", [{"id": "x", "tasks": []}], "envs[0].tasks is empty"),
        ("envs", [{"id": "x", "task": ["a"]}], "unknown config key 'envs[0].task'"),
        # the loss section's own checks, named by section
        ("loss.eps_low", 1.5, "loss: eps_low must be in [0, 1)"),
        ("loss.dual_clip", 0.5, "loss: dual_clip must be > 1"),
        ("loss.aggregation", "constant", "loss: aggregation 'constant' needs normalizer > 0"),
        ("loss.aggregation", "sum", "loss.aggregation must be one of"),
        ("loss.tis_cap", 0.5, "loss: tis_cap must be ≥ 1"),
    ],
)
def test_bad_values_raise_one_error_naming_the_key(path: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(_with(path, value))
    assert message in str(info.value)


def test_vllm_with_truncated_sampling_keeps_the_exact_mask_up_to_the_top_logprobs_bound() -> None:
    from envgym.models.kept import TOP_LOGPROBS

    data = _with("model.engine", "vllm")
    data["model"]["vllm_url"] = "http://127.0.0.1:1/v1"
    data["rollout"] = {"top_p": 0.9, "top_k": TOP_LOGPROBS - 1}
    assert config_from_dict(data).unknown_kept == "raise"  # recovered exactly: no approximation
    data["rollout"]["top_k"] = TOP_LOGPROBS
    with pytest.raises(ConfigError, match=f"exact only for top_k < {TOP_LOGPROBS}"):
        config_from_dict(data)
    data["keep_sampling_mask"] = False
    assert config_from_dict(data).rollout.top_k == TOP_LOGPROBS


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="the config must be a mapping"):
        load_config(bad)
    bad.write_text("")
    with pytest.raises(ConfigError, match="envs must list"):
        load_config(bad)


def test_the_cli_fails_before_anything_runs(tmp_path: Path) -> None:
    from envgym.cli import app

    config = tmp_path / "run.yaml"
    config.write_text(
        f"envs: [{{id: code-interpreter-math-v0}}]\nrollout: {{group_size: 1}}\n"
        f"checkpoint: {{dir: {tmp_path / 'ck'}}}\nmetrics: {{dir: {tmp_path / 'm'}}}\n"
    )
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 2
    assert "rollout.group_size must be ≥ 2" in result.output
    assert not (tmp_path / "ck").exists() and not (tmp_path / "m").exists()
    config.write_text("envs: [{id: code-interpreter-math-v0}]\nlearning_rate: 1\n")
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 2 and "unknown config key 'learning_rate'" in result.output
