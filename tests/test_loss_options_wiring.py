"""The loss options through the real trainer: one GRPO step of the tiny Llama on the parity bundle.

The entropy bonus takes the kernel's per-token entropies (envgym/kernels/logprob.py, with their
gradient): with the same data and weights, the step's loss moves by exactly −η·entropy_bonus
and the gradient changes.  CISPO and GSPO train a step with finite values.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from test_train_loop import parity_bundle, tiny_model, train_config

from envgym.embedded import load_tokenizer
from envgym.trainer.loop import Trainer


def _step(tmp: Path, bundle: Path, name: str, **loss: Any) -> dict[str, float]:
    config = train_config(
        tmp / name,
        bundle,
        steps=1,
        **{f"loss.{k}": v for k, v in loss.items()},
        **{"metrics.plot": False, "metrics.tensorboard": False, "checkpoint.every": 0},
    )
    (report,) = Trainer(config, model=tiny_model(), tokenizer=load_tokenizer()).run()
    assert report.skipped is None
    return report.metrics


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_options_reach_the_update(tmp_path: Path) -> None:
    bundle = parity_bundle(tmp_path / "b", tasks=4)
    plain = _step(tmp_path, bundle, "plain")
    bonus = _step(tmp_path, bundle, "bonus", entropy_coef=0.1)
    # the same rollouts (seeded) and weights: only the bonus term differs
    assert plain["reward_mean"] == bonus["reward_mean"]
    assert math.isclose(plain["pg_loss"], bonus["pg_loss"], rel_tol=1e-6, abs_tol=1e-7)
    # token-mean: the bonus's aggregate is the token-mean entropy the trainer reports
    assert bonus["entropy_bonus"] > 0
    assert math.isclose(bonus["entropy_bonus"], bonus["entropy"], rel_tol=1e-5)
    expected = plain["loss"] - 0.1 * bonus["entropy_bonus"]
    assert math.isclose(bonus["loss"], expected, rel_tol=1e-5, abs_tol=1e-6)
    assert plain["entropy_bonus"] == 0.0  # off: not computed into the loss
    assert bonus["grad_norm"] != plain["grad_norm"]  # the kernel's entropy carries a gradient

    cispo = _step(tmp_path, bundle, "cispo", kind="cispo")
    gspo = _step(tmp_path, bundle, "gspo", ratio_level="sequence")
    for m in (cispo, gspo):
        assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"])
        assert m["optimizer_steps"] == 1.0
