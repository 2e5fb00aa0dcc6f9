"""configs/transfer/: the transfer experiment's cold start and GRPO arm read a suite the way
docs/TRANSFER.md builds it: training on its train split only (GRPO: the tasks the filter kept),
its held-out split never."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from envgym.bundle import load_bundle
from envgym.cli import app
from envgym.kept_tasks import load_kept
from envgym.suite_manifest import load_suite, split_dirs
from envgym.synth_agents.suite import SuiteConfig, build_suite
from envgym.trainer.config import ConfigError, load_config
from envgym.trainer.sft_run import load_run_config

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs" / "transfer"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real three-category suite where the configs expect it (runs/transfer/suite)."""
    root = tmp_path_factory.mktemp("transfer")
    config = SuiteConfig(
        categories=("coffee roasting", "newsroom", "court hearings"),
        per_category=1,
        held_out_share=0.34,
        tasks_per_bundle=2,
        difficulties=(1,),
        sandbox="inprocess",
        max_rows=10,
    )
    build_suite(config, root / "runs" / "transfer" / "suite", None)
    return root


@pytest.fixture
def split_names(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """Inside the workspace (the configs' paths are relative): each split's bundle names."""
    monkeypatch.chdir(workspace)
    suite = load_suite(workspace / "runs" / "transfer" / "suite")
    names = {
        split: {Path(b.path).name for b in suite.select(split)} for split in ("train", "held_out")
    }
    assert all(names.values())
    return names


@pytest.mark.timeout(300)
def test_grpo_trains_on_the_kept_tasks_of_the_train_split_only(
    split_names: dict[str, set[str]],
) -> None:
    with pytest.raises(ConfigError, match=r"envs\[0\]\.kept: no kept-tasks file"):
        load_config(CONFIGS / "grpo.yaml")  # the filter has not run yet
    # the documented filter command, with gold replays standing in for the cold-started policy
    args = ["filter", "runs/transfer/suite", "--split", "train", "--model", "gold", "--k", "4"]
    args += ["--temperature", "0.8", "--max-tokens", "128", "--max-turns", "3"]
    args += [
        "--episode-tokens",
        "384",
        "--sandbox",
        "inprocess",
        "--out",
        "runs/transfer/kept.json",
    ]
    assert CliRunner().invoke(app, args).exit_code == 0
    kept = load_kept("runs/transfer/kept.json")
    config = load_config(CONFIGS / "grpo.yaml")
    assert {Path(e.id).name for e in config.envs} == split_names["train"]
    by_hash = {load_bundle(e.id).manifest.content_hash: e.tasks for e in config.envs}
    assert by_hash == {h: list(b.kept) for h, b in kept.bundles.items()}
    assert config.model.path == "runs/transfer/cold-start"  # the cold start's output
    assert config.rollout.max_tokens == 128 and config.rollout.max_turns == 3


@pytest.mark.timeout(300)
def test_the_cold_start_trains_on_the_train_split_and_holds_out_the_rest(
    split_names: dict[str, set[str]],
) -> None:
    config = load_run_config(CONFIGS / "sft.yaml")
    assert config.train == ("runs/transfer/suite",) == config.held_out_bundles
    trained = split_dirs(config.train[0], None, "train")
    held = split_dirs(config.held_out_bundles[0], None, "held_out")
    assert trained is not None and held is not None
    assert {d.name for d in trained} == split_names["train"]
    assert {d.name for d in held} == split_names["held_out"]
    assert config.out == "runs/transfer/cold-start"
    assert config.max_turn_tokens == 128 and config.max_turns == 3
