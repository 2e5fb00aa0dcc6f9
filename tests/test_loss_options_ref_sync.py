"""``loss.ref_sync_every``: the KL reference becomes a copy of the policy every N steps, and a
killed run resumes with the synced reference (not the initial model).

3 steps straight vs 2 steps + a run killed inside step 3 + a resumed run, with β > 0 and a sync
after step 2: step 3's KL is measured against the step-2 policy, so a resume that rebuilt the
reference from the initial weights would train step 3 differently.  The tiny random Llama and
the parity bundle of tests/test_train_loop.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from test_train_loop import parity_bundle, tiny_model, train_config

from envgym.embedded import load_tokenizer
from envgym.trainer.checkpoint import checkpoints
from envgym.trainer.collect import StepReport
from envgym.trainer.loop import Trainer


class Killed(Exception):
    """Stands for SIGKILL: the run stops wherever it is."""


def _config(tmp: Path, bundle: Path, name: str) -> Any:
    return train_config(
        tmp / name,
        bundle,
        steps=3,
        **{
            "loss.kl_beta": 0.5,
            "loss.ref_sync_every": 2,
            "checkpoint.every": 1,
            "checkpoint.keep": 3,
            "metrics.plot": False,
            "metrics.tensorboard": False,
        },
    )


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_the_synced_reference_is_kept_across_a_resume(tmp_path: Path) -> None:
    tokenizer = load_tokenizer()
    bundle = parity_bundle(tmp_path / "b", tasks=5)
    snapshots: dict[int, dict[str, torch.Tensor]] = {}

    straight: Trainer

    def snap(report: StepReport) -> None:
        snapshots[report.step] = _weights(straight.model)

    straight = Trainer(
        _config(tmp_path, bundle, "straight"), model=tiny_model(), tokenizer=tokenizer, on_step=snap
    )
    initial = _weights(straight.model)
    reports = straight.run()
    assert all(r.skipped is None for r in reports)
    assert [r.metrics.get("ref_synced", 0.0) for r in reports] == [0.0, 1.0, 0.0]
    assert straight.ref_policy is not None
    ref = _weights(straight.ref_policy.model)
    assert _same(ref, snapshots[2])  # the reference is the policy as step 2 left it
    assert not _same(ref, initial) and not _same(ref, snapshots[3])

    def kill_in_step_3(text: str) -> None:
        if text.startswith("step 3: training"):
            raise Killed(text)

    config = _config(tmp_path, bundle, "killed")
    first = Trainer(config, model=tiny_model(), tokenizer=tokenizer, on_phase=kill_in_step_3)
    with pytest.raises(Killed):
        first.run()
    ck = tmp_path / "killed" / "ck"
    saved = checkpoints(ck)
    assert [p.name for p in saved] == ["step-000001", "step-000002"]
    # before the first sync the reference is the initial model (rebuilt on resume): not saved
    assert not (saved[0] / "ref_model.pt").exists() and (saved[1] / "ref_model.pt").is_file()

    # A new process whose model starts from other weights: its reference must come from disk.
    resumed = Trainer(config, model=tiny_model(seed=1), tokenizer=tokenizer)
    resumed_reports = resumed.run()
    assert resumed.resumed_from == ck / "step-000002"
    assert resumed.ref_policy is not None
    assert _same(_weights(resumed.ref_policy.model), ref)
    assert _same(_weights(resumed.model), snapshots[3]), "weights differ after resume"
    assert resumed_reports[-1].metrics["kl"] == reports[-1].metrics["kl"]

    # A checkpoint past a sync without the reference cannot resume exactly: refused by name.
    (saved[1] / "ref_model.pt").unlink()
    for later in checkpoints(ck)[2:]:
        shutil.rmtree(later)
    again = Trainer(config, model=tiny_model(), tokenizer=tokenizer)
    with pytest.raises(ValueError, match="ref_model.pt"):
        again.maybe_resume()
