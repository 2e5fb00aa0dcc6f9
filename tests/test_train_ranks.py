"""Training ranks (envgym/trainer/ranks.py): ``envgym train`` on 2 gloo ranks with 2 Ray rollout
workers makes the single-process step; bad launches and configs are refused with a clear error.

The heavy test runs the real CLI twice in subprocesses on the tiny random Llama and parity bundle
of tests/test_train_loop.py: once alone (in-process engine), once with ``trainer.world_size: 2``
(rank 1 spawned by envgym train itself) and ``rollout.workers: 2``.  Sampling is seeded per
episode and turn, so both runs roll out the same episodes; the update's microbatches are split
over the ranks and their gradients summed, which must give the same loss and weights.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
import typer
from test_train_loop import parity_bundle, tiny_model
from typer.testing import CliRunner

from envgym.apps.train import register
from envgym.embedded import load_tokenizer
from envgym.trainer.checkpoint import latest_checkpoint
from envgym.trainer.config import ConfigError, config_from_dict
from envgym.trainer.ranks import Ranks, RanksError, join
from envgym.trainer.ranks_launch import start_ranks

ROOT = Path(__file__).resolve().parents[1]


def _config(tmp: Path, bundle: Path | str, model_path: str, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": {"path": model_path, "device": "cpu"},
        "envs": [{"id": str(bundle), "sandbox": "inprocess"}],
        "rollout": {
            "group_size": 4,
            "prompts": 2,
            "max_tokens": 10,
            "episode_tokens": 20,
            "max_turns": 2,
            "concurrency": 1,
        },
        "steps": 1,
        "overlong_mask": False,  # a random model never stops by itself
        "dynamic_sampling": {"enabled": False},
        "micro_tokens": 64,  # below one episode: a microbatch per episode, 8 to split over ranks
        "optimizer": {"lr": 1e-3},
        "checkpoint": {"dir": str(tmp / "ck")},
        "metrics": {"dir": str(tmp / "metrics"), "tensorboard": False, "plot": False},
    }
    for key, value in extra.items():
        data[key] = {**data.get(key, {}), **value}
    return data


def _train(
    tmp: Path, data: dict[str, Any], launcher: list[str], tmpdir: Path | None = None
) -> dict[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "config.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    done = subprocess.run(
        [*launcher, "-m", "envgym.cli", "train", str(path), "--json"],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _weights(ck: Path) -> dict[str, torch.Tensor]:
    found = latest_checkpoint(ck)
    assert found is not None, f"{ck}: no checkpoint (rank 0 writes it)"
    return dict(torch.load(found / "model.pt", map_location="cpu"))


# Two steps (the second rolls out from the weights rank 0 synced), two minibatches, a KL term
# (the reference replicated on every rank).
COMMON = {"steps": 2, "minibatches": 2, "loss": {"kl_beta": 0.01}}


LORA = {"lora": {"rank": 4, "target_modules": ["q_proj", "v_proj"]}}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle and the tiny model (an HF folder) every run of this module trains."""
    tmp = tmp_path_factory.mktemp("ranks")
    parity_bundle(tmp / "bundle", tasks=4)
    tiny_model().save_pretrained(tmp / "model")
    load_tokenizer().save_pretrained(tmp / "model")
    return tmp


@pytest.fixture(scope="module")
def alone(workspace: Path) -> dict[str, Any]:
    """The single-process runs the ranked runs must reproduce, each run once: full weights and
    LoRA, by name."""
    results: dict[str, Any] = {}

    def run(name: str, **extra: Any) -> dict[str, Any]:
        if name not in results:
            where = workspace / f"alone-{name}"
            data = {**_config(where, workspace / "bundle", str(workspace / "model"), **extra)}
            results[name] = _train(where, {**data, **COMMON}, [sys.executable])
        return dict(results[name])

    return {"run": run}


@pytest.mark.heavy
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("launch", ["envgym-train-ray-workers", "torchrun", "lora-ray-workers"])
def test_two_gloo_ranks_make_the_single_process_steps(
    workspace: Path, alone: dict[str, Any], launch: str
) -> None:
    """envgym train spawning rank 1, rollouts on 2 Ray workers (full weights, or LoRA adapters
    whose merged weights the workers load); or torchrun's 2 ranks with the in-process engine on
    rank 0: the same losses and weights as one process."""
    tmp = workspace
    lora = launch.startswith("lora")
    single = alone["run"]("lora", model=LORA) if lora else alone["run"]("full")
    run = tmp / launch
    extra: dict[str, Any] = {"trainer": {"world_size": 2, "backend": "gloo"}}
    if lora:
        extra["model"] = LORA
    launcher = [sys.executable]
    if launch == "torchrun":
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        launcher += ["--nproc_per_node", "2"]
    else:
        extra["rollout"] = {"workers": 2}
    data = {**_config(run, tmp / "bundle", str(tmp / "model"), **extra), **COMMON}
    # The run's own temporary root (short: Ray's socket paths are bounded), so that tests running
    # side by side cannot see each other's Ray directories.
    own_tmp = Path(tempfile.mkdtemp(prefix="r"))
    try:
        ranked = _train(run, data, launcher, tmpdir=own_tmp)
        # Ray was started in a temporary directory of its own, stopped, and the directory removed.
        assert not list(own_tmp.glob("envgym-ray-*"))
    finally:
        shutil.rmtree(own_tmp, ignore_errors=True)
    a, r = single["last"], ranked["last"]
    assert single["steps"] == ranked["steps"] == 2
    assert single["skipped"] == ranked["skipped"] == 0
    # The same episodes at step 2 (sampled from the synced weights): rewards and lengths agree.
    for key in ("reward_mean", "response_len_mean", "tokens", "optimizer_steps"):
        assert a[key] == r[key], key
    for key in ("loss", "grad_norm", "kl"):
        assert a[key] == pytest.approx(r[key], rel=1e-5, abs=1e-7), key

    w_alone = _weights(tmp / ("alone-lora" if lora else "alone-full") / "ck")
    w_ranks = _weights(run / "ck")
    assert w_alone.keys() == w_ranks.keys()
    # What trains moved: every weight, or the adapters' B (initialized at zero).
    initial = tiny_model().state_dict()
    if lora:
        initial = {k: torch.zeros_like(v) for k, v in w_alone.items() if "lora_B" in k}
        assert initial
    moved = max(float((w_alone[k] - initial[k]).abs().max()) for k in initial)
    assert moved > 1e-4  # the steps changed the weights: the comparison below means something
    for key, value in w_alone.items():
        torch.testing.assert_close(w_ranks[key], value, rtol=1e-5, atol=1e-6, msg=key)


# -- bad input -------------------------------------------------------------------------------
def _minimal(**extra: Any) -> dict[str, Any]:
    return _config(Path("/nonexistent"), "some-env", "smollm2", **extra)


def test_a_world_of_ranks_needs_a_backend() -> None:
    with pytest.raises(ConfigError, match="trainer.world_size 2 needs trainer.backend: gloo"):
        config_from_dict(_minimal(trainer={"world_size": 2}))
    with pytest.raises(ConfigError, match="trainer.backend must be gloo, nccl or null"):
        config_from_dict(_minimal(trainer={"world_size": 2, "backend": "mpi"}))
    with pytest.raises(ConfigError, match="multiple of trainer.nodes"):
        config_from_dict(_minimal(trainer={"world_size": 3, "nodes": 2, "backend": "gloo"}))
    with pytest.raises(ConfigError, match="rollout.workers must be"):
        config_from_dict(_minimal(rollout={"workers": -1}))


def test_a_trainer_alone_refuses_a_world_of_ranks() -> None:
    from envgym.trainer.loop import Trainer

    two = config_from_dict(_minimal(trainer={"world_size": 2, "backend": "gloo"}))
    with pytest.raises(ValueError, match="trainer.world_size is 2 but this Trainer runs on 1"):
        Trainer(two)


def test_rollout_workers_without_ray_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(_config(tmp_path, "some-env", "smollm2", rollout={"workers": 2})))
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, [str(path)])
    assert result.exit_code == 2
    assert "rollout.workers 2 needs Ray, which is not installed" in " ".join(result.output.split())


def test_launches_that_do_not_match_the_config_are_refused() -> None:
    two = config_from_dict(_minimal(trainer={"world_size": 2, "backend": "gloo"}))
    with pytest.raises(RanksError, match="not launched as a rank"):
        join(two, {})
    env = {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}
    with pytest.raises(RanksError, match="MASTER_ADDR, MASTER_PORT not set"):
        join(two, env)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    with pytest.raises(RanksError, match="WORLD_SIZE=4 but trainer.world_size is 2"):
        join(two, env)
    with pytest.raises(RanksError, match="must be integers"):
        join(two, {**env, "WORLD_SIZE": "two"})
    nodes = config_from_dict(_minimal(trainer={"world_size": 4, "nodes": 2, "backend": "gloo"}))
    if "RANK" not in os.environ:
        with pytest.raises(RanksError, match="trainer.nodes 2: launch envgym train with torchrun"):
            start_ranks(nodes)
    alone = config_from_dict(_minimal())
    assert join(alone, {}) == Ranks()


def test_one_rank_is_the_identity() -> None:
    ranks = Ranks()
    assert ranks.mine([[0], [1, 2], [3]]) == [[0], [1, 2], [3]]
    assert Ranks(rank=1, world_size=2).mine([[0], [1, 2], [3]]) == [[1, 2]]
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    before = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    assert ranks.reduce(optimizer, True, 1.5) == (True, 1.5)
    assert all(torch.equal(a, p.grad) for a, p in zip(before, model.parameters()))
    assert ranks.send("x") == "x"


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended while we looked
            continue
        if text in args:
            found.append(args)
    return found


@pytest.mark.heavy
@pytest.mark.timeout(300)
def test_a_failing_rank_ends_the_run_and_its_spawned_ranks(tmp_path: Path) -> None:
    """Rank 0 finds no tasks (rank 1, which never reads them, loads the model and waits for
    rank 0's weights): rank 0's own error, exit 2 — not a report about rank 1, which fails
    too once rank 0 is gone — and rank 1 does not outlive the run."""
    scratch = tmp_path / "tmp"  # the spawned ranks' config file is made here: findable below
    scratch.mkdir()
    tiny_model().save_pretrained(tmp_path / "model")
    load_tokenizer().save_pretrained(tmp_path / "model")
    data = _config(
        tmp_path,
        tmp_path / "no-bundle",
        str(tmp_path / "model"),
        trainer={"world_size": 2, "backend": "gloo"},
    )
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(data))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch)}
    done = subprocess.run(
        [sys.executable, "-m", "envgym.cli", "train", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "no-bundle" in "".join(done.stderr.split())  # rich may wrap the path mid-word
    assert not _processes_mentioning(str(scratch))
    assert not list(scratch.glob("envgym-ranks-*.json"))  # the spawned ranks' config removed


def _reduce_worker(rank: int, world: int, port: int, out: str) -> None:
    """Rank 0 trains on a microbatch, rank 1 on none (more ranks than microbatches); then a
    minibatch whose loss is NaN on rank 1 only."""
    from envgym.trainer.distributed import init_distributed

    init_distributed(rank, world, master_port=port, backend="gloo", timeout_s=60)
    ranks = Ranks(rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[1].requires_grad_(False)  # frozen: not in the optimizer
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    total = 0.0
    for idx in ranks.mine([[0]]):
        loss = model(torch.full((1, 3), float(idx[0] + 1))).sum()
        loss.backward()
        total += float(loss)
    finite, total = ranks.reduce(optimizer, True, total)
    grads = [p.grad.clone() for p in optimizer.param_groups[0]["params"]]
    sums: dict[str, float] = {"kl": 2.0 * (rank + 1)}
    weights: dict[str, float] = {"kl": float(rank + 1)}
    ranks.merge(sums, weights)
    nan_finite, _ = ranks.reduce(optimizer, rank == 0, 0.0 if rank == 0 else math.nan)
    torch.save(
        {
            "grads": grads,
            "finite": finite,
            "total": total,
            "nan_finite": nan_finite,
            "sums": sums,
            "weights": weights,
        },
        Path(out) / f"rank{rank}.pt",
    )
    ranks.close()


@pytest.mark.heavy  # two spawned processes: ~20 s here
@pytest.mark.timeout(300)
def test_reduce_sums_over_ranks_when_a_rank_has_no_microbatch(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    from envgym.trainer.distributed import free_port

    mp.spawn(_reduce_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    loss = model(torch.full((1, 3), 1.0)).sum()
    loss.backward()
    want = [model[0].weight.grad, model[0].bias.grad]
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["finite"] is True and got["nan_finite"] is False
        assert got["total"] == pytest.approx(float(loss))
        for a, b in zip(got["grads"], want, strict=True):
            torch.testing.assert_close(a, b)
        assert got["sums"] == {"kl": 6.0} and got["weights"] == {"kl": 3.0}
