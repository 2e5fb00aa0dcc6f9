"""envgym/trainer/checkpoint.py: exact resume, atomic saves, the data order, refused config changes.

The resume test: 3 steps straight vs 2 steps + a run killed in the middle of step
3 + a resumed run that finishes step 3 ⇒ identical weights, optimizer state and data order.  It
uses the tiny random Llama and the real parity bundle env of tests/test_train_loop.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from test_train_loop import parity_bundle, tiny_model, train_config

from envgym.embedded import load_tokenizer
from envgym.trainer.checkpoint import (
    TaskOrder,
    checkpoints,
    config_changes,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from envgym.trainer.loop import Trainer


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer()


class Killed(Exception):
    """Stands for SIGKILL: the run stops wherever it is, nothing after it runs."""


def _config(tmp: Path, bundle: Path, name: str) -> Any:
    # top_k keeps the keep-sampling-mask path in play; 2 minibatches so Adam state matters.
    return train_config(
        tmp / name,
        bundle,
        steps=3,
        minibatches=2,
        **{
            "rollout.top_k": 40,
            "checkpoint.every": 1,
            "checkpoint.keep": 3,
            "metrics.plot": False,
            "metrics.tensorboard": False,
        },
    )


@pytest.mark.timeout(600)
def test_killed_run_resumes_with_identical_weights_and_data_order(
    tmp_path: Path, tokenizer: Any
) -> None:
    bundle = parity_bundle(tmp_path / "b", tasks=5)

    config = _config(tmp_path, bundle, "straight")
    straight = Trainer(config, model=tiny_model(), tokenizer=tokenizer)
    straight_reports = straight.run()
    assert [r.step for r in straight_reports] == [1, 2, 3]
    assert all(r.skipped is None for r in straight_reports)

    def kill_in_step_3(text: str) -> None:
        if text.startswith("step 3: training"):  # step 3's rollouts are done, its update not
            raise Killed(text)

    config = _config(tmp_path, bundle, "killed")
    first = Trainer(config, model=tiny_model(), tokenizer=tokenizer, on_phase=kill_in_step_3)
    with pytest.raises(Killed):
        first.run()
    ck = tmp_path / "killed" / "ck"
    assert [p.name for p in checkpoints(ck)] == ["step-000001", "step-000002"]
    (ck / ".tmp-step-000003-999").mkdir()  # a save the kill cut short: must be ignored
    (ck / ".tmp-step-000003-999" / "model.pt").write_bytes(b"half")

    # A new process: a fresh model object with other weights, the same config.
    resumed = Trainer(config, model=tiny_model(seed=1), tokenizer=tokenizer)
    resumed_reports = resumed.run()
    assert resumed.resumed_from == ck / "step-000002"
    assert [r.step for r in resumed_reports] == [3]

    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), "weights differ after resume"
    engine = resumed.engine.model.state_dict()
    assert all(torch.equal(engine[k], b[k]) for k in b)  # the engine got the resumed weights
    opt_a, opt_b = straight.update.optimizer.state_dict(), resumed.update.optimizer.state_dict()
    for key, state in opt_a["state"].items():
        for name, value in state.items():
            assert torch.equal(value, opt_b["state"][key][name]), (key, name)
    assert straight.order.cursor == resumed.order.cursor
    assert straight.version == resumed.version == 3
    # The same data: step 3's rollouts and their statistics match the straight run's.
    m_a, m_b = straight_reports[-1].metrics, resumed_reports[-1].metrics
    for key in (
        "reward_mean",
        "pass_rate",
        "episodes",
        "response_len_mean",
        "loss",
        "kl",
        "grad_norm",
        "tis_ratio_mean",
    ):
        assert m_a[key] == m_b[key], key
    rows = (tmp_path / "killed" / "metrics" / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1.0", "2.0", "3.0"]  # no duplicate step 3


def test_task_order_cursor_restores_the_same_order() -> None:
    tasks = [f"t{i}" for i in range(5)]
    straight = TaskOrder(tasks, seed=3)
    taken = straight.take(3) + straight.take(4) + straight.take(6)
    assert sorted(taken[:5]) == tasks and sorted(taken[5:10]) == tasks  # one epoch = each once
    first = TaskOrder(tasks, seed=3)
    part = first.take(3) + first.take(4)
    again = TaskOrder(tasks, seed=3, **first.cursor)
    assert part + again.take(6) == taken
    assert TaskOrder(tasks, seed=4).take(5) != TaskOrder(tasks, seed=3).take(5)


def test_task_order_bad_input() -> None:
    with pytest.raises(ValueError, match="no training tasks"):
        TaskOrder([], seed=0)
    with pytest.raises(ValueError, match=r"cursor \(epoch 0, index 9\) is outside 2 tasks"):
        TaskOrder(["a", "b"], seed=0, index=9)
    with pytest.raises(ValueError, match=r"cursor \(epoch -1"):
        TaskOrder(["a", "b"], seed=0, epoch=-1)


def _parts() -> tuple[torch.nn.Module, Any, Any]:
    model = torch.nn.Linear(3, 2, dtype=torch.float64)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    model(torch.ones(1, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    sched.step()
    return model, opt, sched


def test_save_load_round_trip_prunes_and_restores_rng(tmp_path: Path) -> None:
    model, opt, sched = _parts()
    for step in (1, 2, 3):
        torch.manual_seed(100 + step)
        save_checkpoint(
            tmp_path,
            step=step,
            policy_version=step + 10,
            model=model,
            optimizer=opt,
            scheduler=sched,
            cursor={"epoch": 0, "index": step},
            config={"a": 1},
            keep=2,
        )
    assert [p.name for p in checkpoints(tmp_path)] == ["step-000002", "step-000003"]
    expected = torch.rand(4)  # what the RNG gives right after the last save
    model2, opt2, sched2 = _parts()
    with torch.no_grad():
        model2.weight.zero_()
    torch.manual_seed(0)
    state = load_checkpoint(
        latest_checkpoint(tmp_path), model=model2, optimizer=opt2, scheduler=sched2
    )
    assert torch.equal(torch.rand(4), expected)
    assert torch.equal(model2.weight, model.weight)
    assert (state.step, state.policy_version, state.cursor) == (3, 13, {"epoch": 0, "index": 3})
    assert state.config == {"a": 1}


def test_unreadable_checkpoint_is_named(tmp_path: Path) -> None:
    model, opt, sched = _parts()
    path = save_checkpoint(
        tmp_path,
        step=1,
        policy_version=1,
        model=model,
        optimizer=opt,
        scheduler=sched,
        cursor={"epoch": 0, "index": 0},
        config={},
    )
    (path / "model.pt").write_bytes(b"not a tensor file")
    with pytest.raises(ValueError, match=r"checkpoint .*step-000001 is unreadable"):
        load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)
    assert latest_checkpoint(tmp_path / "nowhere") is None


def test_config_changes_names_the_keys() -> None:
    saved = {
        "steps": 3,
        "loss": {"eps_low": 0.2, "kl_beta": 0.0},
        "checkpoint": {"resume": True},
        "seed": 0,
    }
    now = {
        "steps": 9,
        "loss": {"eps_low": 0.1, "kl_beta": 0.0},
        "checkpoint": {"resume": False},
        "seed": 1,
    }
    assert config_changes(saved, now) == ["loss.eps_low", "seed"]


@pytest.mark.timeout(300)
def test_resume_under_another_config_is_refused(tmp_path: Path, tokenizer: Any) -> None:
    bundle = parity_bundle(tmp_path / "b")
    config = train_config(
        tmp_path, bundle, steps=1, **{"metrics.plot": False, "metrics.tensorboard": False}
    )
    Trainer(config, model=tiny_model(), tokenizer=tokenizer).run()
    other = train_config(
        tmp_path,
        bundle,
        steps=2,
        **{"loss.eps_high": 0.3, "metrics.plot": False, "metrics.tensorboard": False},
    )
    with pytest.raises(ValueError, match=r"another config \(changed: loss.eps_high\)"):
        Trainer(other, model=tiny_model(), tokenizer=tokenizer).run()
    run = json.loads((tmp_path / "metrics" / "run.json").read_text())
    assert run["status"] == "finished" and run["step"] == 1  # the refused run wrote nothing
