"""The store's ``training_runs`` table: round trip, upsert on run_key, NaN as null, an old
database, bad input, and the trainer writing its row (running → finished, or failed)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select, text
from test_train_loop import parity_bundle, tiny_model, train_config

from envgym.embedded import load_tokenizer
from envgym.store import SCHEMA_VERSION, Store, StoreError, TrainingRun
from envgym.store.schema import Base, BundleRow, Meta, TrainingRunRow
from envgym.trainer.loop import StepReport, Trainer
from envgym.trainer.metrics import RunRecord, write_run

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2025, 3, 1, 12, 5, 30, tzinfo=UTC)


def _url(tmp_path: Path, name: str = "envgym.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def _run(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_key": "sha256:abc",
        "model": "smollm2",
        "envs": ["code-interpreter-v0", "trip-v0"],
        "config": {"steps": 3, "optimizer": {"lr": 1e-6}},
        "status": "running",
        "step": 1,
        "policy_version": 1,
        "metrics_dir": "/runs/m",
        "checkpoint_dir": "/runs/ck",
        "last_metrics": {"step": 1.0, "reward_mean": 0.25},
        "started_at": T0,
        "updated_at": T0,
    }
    row.update(overrides)
    return row


def test_a_run_round_trips(tmp_path: Path) -> None:
    with Store(_url(tmp_path)) as store:
        # ISO-8601 strings (what envgym.trainer.metrics.RunRecord holds) are accepted as well.
        returned = store.record_training_run(
            **_run(started_at="2025-03-01T12:00:00+00:00", updated_at="2025-03-01T12:05:30")
        )
    with Store(_url(tmp_path)) as store:  # a fresh connection reads what was committed
        (run,) = store.training_runs()
        assert store.training_run("sha256:abc") == run == returned
    assert run == TrainingRun(
        "sha256:abc",
        "smollm2",
        ["code-interpreter-v0", "trip-v0"],
        {"steps": 3, "optimizer": {"lr": 1e-6}},
        "running",
        1,
        1,
        "/runs/m",
        "/runs/ck",
        {"step": 1.0, "reward_mean": 0.25},
        T0,
        T1,  # a naive time is read as UTC
    )


def test_upsert_keeps_one_row_per_run_key_and_updates_it(tmp_path: Path) -> None:
    with Store(_url(tmp_path)) as store:
        store.record_training_run(**_run())
        store.record_training_run(**_run(run_key="sha256:other", model="other"))
        # the same run resumed later: a new Trainer starts a new clock, the row keeps the first
        later = datetime(2025, 3, 2, tzinfo=UTC)
        store.record_training_run(
            **_run(
                status="finished",
                step=3,
                policy_version=2,
                started_at=later,
                updated_at=later,
                last_metrics={"step": 3.0, "reward_mean": 0.75, "kl": 0.5},
            )
        )
        runs = store.training_runs()
        with store.engine.connect() as conn:
            rows = conn.scalar(select(func.count()).select_from(TrainingRunRow.__table__))
        assert rows == 2 and [r.run_key for r in runs] == ["sha256:abc", "sha256:other"]
        run = store.training_run("sha256:abc")
        assert (run.status, run.step, run.policy_version) == ("finished", 3, 2)
        assert run.last_metrics == {"step": 3.0, "reward_mean": 0.75, "kl": 0.5}
        assert run.started_at == T0 and run.updated_at == later
        assert [r.run_key for r in store.training_runs(status="finished")] == ["sha256:abc"]
        assert [r.run_key for r in store.training_runs(status="running")] == ["sha256:other"]
        assert store.training_runs(status="failed") == []


def test_non_finite_metrics_are_stored_as_null(tmp_path: Path) -> None:
    metrics = {"step": 2.0, "kl": math.nan, "grad_norm": math.inf, "lm_loss": -math.inf, "x": 1}
    with Store(_url(tmp_path)) as store:
        store.record_training_run(**_run(last_metrics=metrics, config={"eps": math.nan}))
        with store.engine.connect() as conn:
            raw = conn.execute(text("SELECT last_metrics, config FROM training_runs")).one()
        # the column text is strict JSON: null where the value was not finite (no NaN token)
        assert json.loads(raw[0]) == {
            "step": 2.0,
            "kl": None,
            "grad_norm": None,
            "lm_loss": None,
            "x": 1.0,
        }
        assert "NaN" not in raw[0] and "Infinity" not in raw[0]
        assert json.loads(raw[1]) == {"eps": None}
        run = store.training_run("sha256:abc")
        assert run.last_metrics == {
            "step": 2.0,
            "kl": None,
            "grad_norm": None,
            "lm_loss": None,
            "x": 1.0,
        }


def test_a_database_from_before_the_table_opens_and_gains_it(tmp_path: Path) -> None:
    # The store as it was before training_runs: every other table, schema version 1, a bundle.
    url = _url(tmp_path, "old.db")
    engine = create_engine(url)
    old_tables = [t for t in Base.metadata.sorted_tables if t.name != "training_runs"]
    Base.metadata.create_all(engine, tables=old_tables)
    with engine.begin() as conn:
        conn.execute(Meta.__table__.insert().values(key="schema_version", value="1"))
        conn.execute(
            BundleRow.__table__.insert().values(
                content_hash="sha256:b",
                name="b",
                category="c",
                path="/b",
                manifest={},
                created_at=T0,
            )
        )
        names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
    engine.dispose()
    assert "training_runs" not in names and "bundles" in names and SCHEMA_VERSION == 1

    with Store(url) as store:
        store.record_training_run(**_run())
        assert [r.run_key for r in store.training_runs()] == ["sha256:abc"]
        with store.engine.connect() as conn:
            assert conn.scalar(text("SELECT content_hash FROM bundles")) == "sha256:b"
            assert conn.scalar(text("SELECT value FROM envgym_meta")) == "1"


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (
            {"status": "done"},
            ValueError,
            "unknown training-run status 'done' \\(expected one of running, finished, failed\\)",
        ),
        ({"step": -1}, ValueError, "step must be ≥ 0, got -1"),
        ({"step": 1.5}, TypeError, "step must be an int, got float"),
        ({"policy_version": True}, TypeError, "policy_version must be an int, got bool"),
        ({"run_key": ""}, ValueError, "run_key must not be empty"),
        ({"run_key": "k" * 81}, ValueError, "run_key is 81 characters long; the store holds 80"),
        ({"model": None}, TypeError, "model must be a string, got NoneType"),
        ({"envs": "trip-v0"}, TypeError, "envs must be a list of env ids, got str"),
        ({"envs": ["a", 3]}, TypeError, "envs\\[\\] must be a string, got int"),
        ({"config": [1]}, TypeError, "config must be a mapping, got list"),
        (
            {"last_metrics": {"kl": "high"}},
            TypeError,
            "last_metrics\\['kl'\\] must be a number, got str",
        ),
        (
            {"started_at": "yesterday"},
            ValueError,
            "started_at is not an ISO-8601 time: 'yesterday'",
        ),
        ({"updated_at": 12}, TypeError, "updated_at must be a datetime or an ISO-8601 string"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    tmp_path: Path, change: dict[str, Any], error: type[Exception], match: str
) -> None:
    with Store(_url(tmp_path)) as store:
        store.record_training_run(**_run())
        bad = _run(step=5)
        bad.update(change)
        with pytest.raises(error, match=match):
            store.record_training_run(**bad)
        run = store.training_run("sha256:abc")
        assert (run.step, run.status) == (1, "running")  # the good row is untouched
        assert len(store.training_runs()) == 1


def test_reading_an_unknown_run_or_status_is_a_clear_error(tmp_path: Path) -> None:
    with Store(_url(tmp_path)) as store:
        with pytest.raises(StoreError, match="no training run sha256:nope in the store"):
            store.training_run("sha256:nope")
        with pytest.raises(ValueError, match="unknown training-run status 'ok'"):
            store.training_runs(status="ok")


def test_write_run_writes_run_json_and_the_row(tmp_path: Path) -> None:
    record = RunRecord(
        "sha256:r",
        "smollm2",
        ["trip-v0"],
        {"steps": 2},
        step=2,
        last_metrics={"step": 2.0, "kl": math.nan},
    )
    assert write_run(record, tmp_path) is False  # no store configured: run.json only
    assert json.loads((tmp_path / "run.json").read_text())["run_key"] == "sha256:r"
    assert write_run(record, tmp_path, _url(tmp_path)) is True
    with Store(_url(tmp_path)) as store:
        run = store.training_run("sha256:r")
    assert (run.status, run.step, run.last_metrics) == ("running", 2, {"step": 2.0, "kl": None})
    assert run.updated_at == datetime.fromisoformat(record.updated_at)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer()


@pytest.mark.timeout(300)
def test_a_training_run_writes_its_row_running_then_finished(
    tmp_path: Path, tokenizer: Any
) -> None:
    url = _url(tmp_path)
    config = train_config(
        tmp_path,
        parity_bundle(tmp_path / "b"),
        steps=1,
        **{
            "metrics.store": url,
            "metrics.plot": False,
            "metrics.tensorboard": False,
            "rollout.prompts": 1,
            "rollout.group_size": 2,
        },
    )
    seen: list[TrainingRun] = []

    def on_step(report: StepReport) -> None:
        with Store(url) as store:
            seen.append(store.training_run(trainer.run_record.run_key))

    trainer = Trainer(config, model=tiny_model(), tokenizer=tokenizer, on_step=on_step)
    (report,) = trainer.run()

    assert [(r.status, r.step) for r in seen] == [("running", 1)]
    with Store(url) as store:
        (run,) = store.training_runs()
    assert run.run_key == json.loads((tmp_path / "metrics" / "run.json").read_text())["run_key"]
    assert (run.status, run.step, run.policy_version) == ("finished", 1, trainer.version)
    assert run.model == config.model.path and run.envs == [str(tmp_path / "b")]
    assert run.config == json.loads(json.dumps(config.to_dict()))
    assert run.last_metrics == {
        k: (v if math.isfinite(v) else None) for k, v in report.metrics.items()
    }
    assert run.metrics_dir == str((tmp_path / "metrics").resolve())
    assert run.checkpoint_dir == str((tmp_path / "ck").resolve())


@pytest.mark.timeout(300)
def test_a_training_run_that_raises_is_recorded_failed(tmp_path: Path, tokenizer: Any) -> None:
    url = _url(tmp_path)
    config = train_config(
        tmp_path,
        parity_bundle(tmp_path / "b"),
        steps=1,
        **{"metrics.store": url, "metrics.plot": False, "metrics.tensorboard": False},
    )

    def on_phase(text: str) -> None:
        raise RuntimeError("interrupted by the test")

    trainer = Trainer(config, model=tiny_model(), tokenizer=tokenizer, on_phase=on_phase)
    with pytest.raises(RuntimeError, match="interrupted by the test"):
        trainer.run()
    with Store(url) as store:
        (run,) = store.training_runs()
    assert (run.status, run.step) == ("failed", 0)
