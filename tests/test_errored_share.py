"""An errored share above a few percent is loud: a warning with the first cause, and a
threshold (``rollout.max_errored_share`` in training, ``--max-errored-share`` in eval) that
stops the run.  Before, a trainer that lost 50 of 64 episodes to sandbox start-up errors
trained on the other 14, and the only sign was the ``errored`` metric."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from test_eval import DOUBLE, double
from test_train_loop import parity_bundle, tiny_model, tokenizer, train_config  # noqa: F401

from envgym import registry
from envgym.bundle_env import BundleEnv
from envgym.evaluate import EvalConfig, EvalError, evaluate
from envgym.rollout import EpisodeResult
from envgym.rollout.errored import ErroredShare, TooManyErrored, check_errored, tally
from envgym.sandbox import SandboxUnavailable
from envgym.store import Store
from envgym.trainer.config import ConfigError
from envgym.trainer.loop import Trainer

LOG = logging.getLogger("test-errored")


class StartFailsEnv(BundleEnv):
    """Every reset fails the way a sandbox that could not start fails."""

    def reset(self, **kw: Any) -> Any:
        raise SandboxUnavailable("bwrap sandbox worker did not start: launcher said no")


def _results(errored: int, ok: int) -> list[EpisodeResult]:
    bad = [
        EpisodeResult("t", i, error="env", error_message=f"boom {i}\n  now") for i in range(errored)
    ]
    return bad + [EpisodeResult("t", errored + i) for i in range(ok)]


def test_the_share_names_the_first_cause() -> None:
    share = tally(_results(2, 6))
    assert (share.episodes, share.errored, share.share) == (8, 2, 0.25)
    assert share.first_cause == "env: boom 0 now"
    assert share.describe() == "2 of 8 episodes errored (25%); first cause: env: boom 0 now"
    assert ErroredShare().share == 0.0


def test_warns_past_a_few_percent_and_stops_past_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="test-errored"):
        check_errored(tally(_results(1, 99)), 0.1, where="step 1", log=LOG)  # 1 %: quiet
        assert not caplog.records
        check_errored(tally(_results(5, 95)), 0.1, where="step 2", log=LOG)
        [record] = caplog.records
        assert "step 2: 5 of 100 episodes errored (5%); first cause: env: boom 0" in record.message
    with pytest.raises(TooManyErrored, match=r"step 3: 50 of 64 .* over the limit of 10%"):
        check_errored(tally(_results(50, 14)), 0.1, where="step 3", log=LOG)
    check_errored(tally(_results(50, 14)), None, where="step 4", log=LOG)  # no limit: warns only


@pytest.mark.timeout(300)
def test_training_stops_when_most_episodes_errored(
    tmp_path: Path,
    tokenizer: Any,  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle = parity_bundle(tmp_path / "b")
    registry.discover()
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    registry.register(
        "start-fails-v0", lambda **kw: StartFailsEnv(bundle, **kw), bundle_dir=lambda: bundle
    )
    config = train_config(tmp_path, "start-fails-v0", steps=1)
    assert config.rollout.max_errored_share == 0.1  # on by default
    trainer = Trainer(config, model=tiny_model(), tokenizer=tokenizer)
    with pytest.raises(
        TooManyErrored, match=r"(\d+) of \1 episodes errored \(100%\).*did not start"
    ):
        trainer.run()
    assert trainer.step == 0  # nothing was trained on the survivors


def test_the_training_limit_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rollout.max_errored_share"):
        train_config(tmp_path, "x", **{"rollout.max_errored_share": 1.5})
    assert (
        train_config(tmp_path, "x", **{"rollout.max_errored_share": None}).rollout.max_errored_share
        is None
    )


def test_eval_warns_and_stops_past_its_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'eval.db'}")
    broken = double(fail=lambda session, turn: "policy" if session.startswith("trip-001") else None)
    with caplog.at_level(logging.WARNING, logger="envgym.evaluate.runner"):
        run = evaluate(
            "trip-planning-v0", DOUBLE, EvalConfig(k=1, limit=3), store=store, policy=broken
        )
    assert run.summary.errored == 1
    assert any(
        "1 of 3 episodes errored (33%); first cause: policy" in r.message for r in caplog.records
    )
    store = Store(f"sqlite:///{tmp_path / 'eval2.db'}")
    with pytest.raises(EvalError, match="1 of .* episodes errored"):
        evaluate(
            "trip-planning-v0",
            DOUBLE,
            EvalConfig(k=1, limit=3, max_errored_share=0.1),
            store=store,
            policy=double(fail=lambda s, t: "policy" if s.startswith("trip-001") else None),
        )
    with pytest.raises(EvalError, match="max errored share"):
        EvalConfig(max_errored_share=-0.5)
