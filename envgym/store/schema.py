"""The store's tables (SQLAlchemy 2 declarative models).  docs/EVAL.md draws the schema.

Episode payloads (the trajectory and the per-token record) are JSON *text* columns rather than
a JSON type: they are written once and read whole, and reading text lets the store name the
episode when a stored payload is corrupted instead of failing inside the driver.

``SCHEMA_VERSION`` names the shape of the *existing* tables; a change to one of them bumps it
(and a store of another version is refused).  A new table does not: ``Store`` runs
``create_all``, which adds missing tables to an older database and leaves the others alone, so
old and new envgyms open each other's databases.  ``training_runs`` was added that way.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SCHEMA_VERSION = 1


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON}


class Meta(Base):
    __tablename__ = "envgym_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


class BundleRow(Base):
    __tablename__ = "bundles"
    id: Mapped[int] = mapped_column(primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(80), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    category: Mapped[str] = mapped_column(String(200))
    path: Mapped[str] = mapped_column(Text)
    manifest: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (UniqueConstraint("bundle_id", "task_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id", ondelete="CASCADE"), index=True)
    task_id: Mapped[str] = mapped_column(String(200))
    difficulty: Mapped[int] = mapped_column(Integer)
    data: Mapped[dict[str, Any]]


class ValidationRow(Base):
    """One validation of a bundle (or of one of its tasks): ``envgym check``, synthesis validators."""

    __tablename__ = "validations"
    id: Mapped[int] = mapped_column(primary_key=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id", ondelete="CASCADE"), index=True)
    task_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    kind: Mapped[str] = mapped_column(String(64))
    passed: Mapped[bool] = mapped_column(Boolean)
    report: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class FilterRow(Base):
    """A pass@k difficulty filter's verdict on one task for one model (AM-Thinking: keep 0 < p < 1)."""

    __tablename__ = "filter_results"
    id: Mapped[int] = mapped_column(primary_key=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id", ondelete="CASCADE"), index=True)
    task_id: Mapped[str] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(300))
    k: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    c: Mapped[int] = mapped_column(Integer)
    pass_rate: Mapped[float] = mapped_column(Float)
    kept: Mapped[bool] = mapped_column(Boolean)
    params: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class EvaluationRow(Base):
    """An evaluation, keyed by the content hashes of bundle, model and config."""

    __tablename__ = "evaluations"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(80), unique=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id", ondelete="CASCADE"), index=True)
    model: Mapped[str] = mapped_column(String(300))
    model_hash: Mapped[str] = mapped_column(String(80))
    config_hash: Mapped[str] = mapped_column(String(80))
    config: Mapped[dict[str, Any]]
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class EpisodeRow(Base):
    __tablename__ = "episodes"
    __table_args__ = (UniqueConstraint("evaluation_id", "task_id", "sample"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    evaluation_id: Mapped[int] = mapped_column(
        ForeignKey("evaluations.id", ondelete="CASCADE"), index=True
    )
    task_id: Mapped[str] = mapped_column(String(200))
    sample: Mapped[int] = mapped_column(Integer)
    reward: Mapped[float] = mapped_column(Float)
    passed: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(String(32), nullable=True)
    truncated_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    turns: Mapped[int] = mapped_column(Integer)
    tool_calls: Mapped[int] = mapped_column(Integer)
    sampled_tokens: Mapped[int] = mapped_column(Integer)
    duration_s: Mapped[float] = mapped_column(Float)
    trajectory: Mapped[str] = mapped_column(Text)  # EpisodeResult.to_dict() without the record
    record: Mapped[str] = mapped_column(Text)  # EpisodeRecord.to_dict()
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TrainingRunRow(Base):
    """One training run (``envgym train``), upserted on ``run_key`` every step (docs/TRAINER.md).

    ``last_metrics`` holds the latest step's metrics; non-finite values are stored as null
    (PostgreSQL's JSON has no NaN).  ``started_at`` is the first time the run was recorded: a
    resumed run keeps it.
    """

    __tablename__ = "training_runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_key: Mapped[str] = mapped_column(String(80), unique=True)  # sha256 of the config
    model: Mapped[str] = mapped_column(String(300))
    envs: Mapped[list[str]] = mapped_column(JSON)
    config: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16))  # running | finished | failed
    step: Mapped[int] = mapped_column(Integer)
    policy_version: Mapped[int] = mapped_column(Integer)
    metrics_dir: Mapped[str] = mapped_column(Text)
    checkpoint_dir: Mapped[str] = mapped_column(Text)
    last_metrics: Mapped[dict[str, Any]]
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
