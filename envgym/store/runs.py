"""Training runs in the store: the checked row values, the upsert on ``run_key``, the read view.

``envgym/trainer/metrics.py`` writes one run's row every step (status ``running``), at the end
(``finished``) and when the run raises (``failed``); docs/TRAINER.md describes the columns.
:class:`TrainingRunStore` holds the :class:`~envgym.store.Store` methods (a mixin: Store
inherits them), kept here so that store.py stays one module per concept and short.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from numbers import Real
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .connect import StoreError
from .rows import jsonable
from .schema import TrainingRunRow

TRAINING_STATUSES = ("running", "finished", "failed")


@dataclass(frozen=True)
class TrainingRun:
    """A stored training run; times are timezone-aware UTC."""

    run_key: str
    model: str
    envs: list[str]
    config: dict[str, Any]
    status: str
    step: int
    policy_version: int
    metrics_dir: str
    checkpoint_dir: str
    last_metrics: dict[str, float | None]
    started_at: datetime
    updated_at: datetime


class TrainingRunStore:
    """The training-run methods of :class:`~envgym.store.Store` (each one transaction)."""

    def _tx(self) -> AbstractContextManager[Session]:  # Store's: a session in a transaction
        raise NotImplementedError

    def record_training_run(
        self,
        run_key: str,
        *,
        model: str,
        envs: Sequence[str],
        config: Mapping[str, Any],
        status: str,
        step: int,
        policy_version: int = 0,
        metrics_dir: str = "",
        checkpoint_dir: str = "",
        last_metrics: Mapping[str, float | None] | None = None,
        started_at: datetime | str | None = None,
        updated_at: datetime | str | None = None,
    ) -> TrainingRun:
        """Insert or update (on ``run_key``) one run's row; returns it as stored.

        ``status``: running | finished | failed; times: datetimes or ISO-8601 strings (None:
        now; naive: UTC).  Non-finite metrics are stored as null; a resumed run keeps its
        first ``started_at``.  Bad arguments raise TypeError / ValueError, nothing written.
        """
        values = training_run_values(
            run_key,
            model=model,
            envs=envs,
            config=config,
            status=status,
            step=step,
            policy_version=policy_version,
            metrics_dir=metrics_dir,
            checkpoint_dir=checkpoint_dir,
            last_metrics=last_metrics,
            started_at=started_at,
            updated_at=updated_at,
        )
        try:
            with self._tx() as s:
                return training_run_view(upsert_training_run(s, values))
        except IntegrityError:  # another writer inserted the key first: update its row
            with self._tx() as s:
                return training_run_view(upsert_training_run(s, values))

    def training_run(self, run_key: str) -> TrainingRun:
        with self._tx() as s:
            row = s.scalar(select(TrainingRunRow).where(TrainingRunRow.run_key == run_key))
            if row is None:
                raise StoreError(f"no training run {run_key} in the store")
            return training_run_view(row)

    def training_runs(self, *, status: str | None = None) -> list[TrainingRun]:
        """Every stored run (or those of one ``status``), oldest first."""
        if status is not None:
            _status(status)
        with self._tx() as s:
            query = select(TrainingRunRow)
            if status is not None:
                query = query.where(TrainingRunRow.status == status)
            return [training_run_view(r) for r in s.scalars(query.order_by(TrainingRunRow.id))]


def training_run_values(
    run_key: Any,
    *,
    model: Any,
    envs: Any,
    config: Any,
    status: Any,
    step: Any,
    policy_version: Any,
    metrics_dir: Any,
    checkpoint_dir: Any,
    last_metrics: Any,
    started_at: Any,
    updated_at: Any,
) -> dict[str, Any]:
    """The row's column values, checked (TypeError / ValueError naming the argument)."""
    if isinstance(envs, str) or not isinstance(envs, Sequence):
        raise TypeError(f"envs must be a list of env ids, got {type(envs).__name__}: {envs!r}")
    for env in envs:
        _text("envs[]", env, 300)
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping, got {type(config).__name__}")
    now = datetime.now(UTC)
    return {
        "run_key": _text("run_key", run_key, 80, empty=False),
        "model": _text("model", model, 300),
        "envs": list(envs),
        "config": _finite(jsonable(dict(config))),
        "status": _status(status),
        "step": _count("step", step),
        "policy_version": _count("policy_version", policy_version),
        "metrics_dir": _text("metrics_dir", metrics_dir, None),
        "checkpoint_dir": _text("checkpoint_dir", checkpoint_dir, None),
        "last_metrics": _metrics(last_metrics),
        "started_at": _time("started_at", started_at, now),
        "updated_at": _time("updated_at", updated_at, now),
    }


def upsert_training_run(s: Session, values: dict[str, Any]) -> TrainingRunRow:
    """Insert the run or update its row in place; the first ``started_at`` is kept."""
    row = s.scalar(select(TrainingRunRow).where(TrainingRunRow.run_key == values["run_key"]))
    if row is None:
        row = TrainingRunRow(**values)
        s.add(row)
        s.flush()  # a concurrent insert of the same key fails here, inside the caller's retry
        return row
    for name, value in values.items():
        if name != "started_at":
            setattr(row, name, value)
    row.started_at = min(_aware(row.started_at), values["started_at"])
    return row


def training_run_view(row: TrainingRunRow) -> TrainingRun:
    return TrainingRun(
        row.run_key,
        row.model,
        list(row.envs),
        dict(row.config),
        row.status,
        row.step,
        row.policy_version,
        row.metrics_dir,
        row.checkpoint_dir,
        dict(row.last_metrics),
        _aware(row.started_at),
        _aware(row.updated_at),
    )


def _status(value: Any) -> str:
    if value not in TRAINING_STATUSES:
        raise ValueError(
            f"unknown training-run status {value!r} "
            f"(expected one of {', '.join(TRAINING_STATUSES)})"
        )
    return str(value)


def _text(name: str, value: Any, limit: int | None, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}: {value!r}")
    if not empty and not value:
        raise ValueError(f"{name} must not be empty")
    if limit is not None and len(value) > limit:
        raise ValueError(f"{name} is {len(value)} characters long; the store holds {limit}")
    return value


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be ≥ 0, got {value}")
    return value


def _metrics(value: Any) -> dict[str, float | None]:
    """Metric values as floats; NaN and ±inf become None (JSON null: PostgreSQL has no NaN)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"last_metrics must be a mapping, got {type(value).__name__}")
    out: dict[str, float | None] = {}
    for key, v in value.items():
        if not isinstance(key, str):
            raise TypeError(f"last_metrics keys must be strings, got {key!r}")
        if v is not None and (isinstance(v, bool) or not isinstance(v, Real)):
            raise TypeError(
                f"last_metrics[{key!r}] must be a number, got {type(v).__name__}: {v!r}"
            )
        out[key] = None if v is None or not math.isfinite(v) else float(v)
    return out


def _finite(value: Any) -> Any:
    """``value`` (JSON data) with NaN and ±inf floats replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _time(name: str, value: Any, default: datetime) -> datetime:
    """A datetime or an ISO-8601 string (naive means UTC), as an aware UTC datetime."""
    if value is None:
        return default
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{name} is not an ISO-8601 time: {value!r}") from None
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime or an ISO-8601 string, got {value!r}")
    return _aware(value)


def _aware(value: datetime) -> datetime:
    # SQLite hands DateTime(timezone=True) back naive; what is stored is always UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
