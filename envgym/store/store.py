"""``Store``: bundles, tasks, validations, filter results, evaluations and episodes in one database.

SQLite file by default (``$ENVGYM_DB`` or ``~/.cache/envgym/envgym.db``); any SQLAlchemy URL
(``postgresql://user@host/db`` is driven by psycopg 3).  Every write is one transaction: a
process killed mid-write leaves either the whole row or nothing, which is what lets an
interrupted evaluation resume without losing or duplicating an episode.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import CursorResult, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from envgym.bundle import Bundle
from envgym.rollout.episode import EpisodeResult

from .connect import StoreError, default_url, open_engine
from .rows import Evaluation, FilterResult, ValidationResult, decode_episode, jsonable
from .runs import TrainingRunStore
from .schema import (
    SCHEMA_VERSION,
    Base,
    BundleRow,
    EpisodeRow,
    EvaluationRow,
    FilterRow,
    Meta,
    TaskRow,
    ValidationRow,
    utcnow,
)


class Store(TrainingRunStore):
    """One database of envgym results (``url``: any SQLAlchemy URL; None = :func:`default_url`).

    Training runs' methods (``record_training_run``, ``training_run``, ``training_runs``) come
    from :class:`~envgym.store.runs.TrainingRunStore`.
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self.engine = open_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        try:
            Base.metadata.create_all(self.engine)
        except Exception as exc:  # noqa: BLE001 - unreachable server, bad credentials...
            self.engine.dispose()
            raise StoreError(f"cannot open the store at {self.engine.url!r}: {exc}") from None
        self._check_version()

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        with self._sessions() as session, session.begin():
            yield session

    def _check_version(self) -> None:
        with self._tx() as s:
            row = s.get(Meta, "schema_version")
            if row is None:
                s.add(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
            elif row.value != str(SCHEMA_VERSION):
                raise StoreError(
                    f"the store at {self.engine.url!r} has schema version {row.value}; this envgym uses {SCHEMA_VERSION}"
                )

    # -- bundles and tasks -------------------------------------------------------------------
    def add_bundle(self, bundle: Bundle) -> str:
        """Record a bundle and its tasks (idempotent on the content hash); returns the hash."""
        m = bundle.manifest
        with self._tx() as s:
            row = s.scalar(select(BundleRow).where(BundleRow.content_hash == m.content_hash))
            if row is None:
                manifest = {
                    "name": m.name,
                    "category": m.category,
                    "description": m.description,
                    "provenance": vars(m.provenance),
                    "schema_version": m.schema_version,
                }
                row = BundleRow(
                    content_hash=m.content_hash,
                    name=m.name,
                    category=m.category,
                    path=str(bundle.root),
                    manifest=manifest,
                )
                s.add(row)
                s.flush()
                for task in bundle.tasks:
                    s.add(
                        TaskRow(
                            bundle_id=row.id,
                            task_id=task.id,
                            difficulty=task.difficulty,
                            data=task.to_dict(),
                        )
                    )
            else:
                row.path = str(bundle.root)
        return m.content_hash

    def tasks(self, bundle_hash: str) -> list[dict[str, Any]]:
        with self._tx() as s:
            bundle = self._bundle(s, bundle_hash)
            rows = s.scalars(
                select(TaskRow).where(TaskRow.bundle_id == bundle.id).order_by(TaskRow.id)
            )
            return [dict(r.data) for r in rows]

    def _bundle(self, s: Session, bundle_hash: str) -> BundleRow:
        row = s.scalar(select(BundleRow).where(BundleRow.content_hash == bundle_hash))
        if row is None:
            raise StoreError(f"no bundle {bundle_hash} in the store (add it with Store.add_bundle)")
        return row

    # -- synthesis: validations and pass@k filters ----------------------------------------------
    def record_validation(
        self,
        bundle_hash: str,
        *,
        passed: bool,
        report: dict[str, Any],
        kind: str = "check",
        task_id: str | None = None,
    ) -> None:
        with self._tx() as s:
            bundle = self._bundle(s, bundle_hash)
            s.add(
                ValidationRow(
                    bundle_id=bundle.id,
                    task_id=task_id,
                    kind=kind,
                    passed=passed,
                    report=jsonable(report),
                )
            )

    def validations(self, bundle_hash: str) -> list[ValidationResult]:
        with self._tx() as s:
            bundle = self._bundle(s, bundle_hash)
            rows = s.scalars(
                select(ValidationRow)
                .where(ValidationRow.bundle_id == bundle.id)
                .order_by(ValidationRow.id)
            )
            return [
                ValidationResult(
                    bundle_hash, r.task_id, r.kind, r.passed, dict(r.report), r.created_at
                )
                for r in rows
            ]

    def record_filter(
        self,
        bundle_hash: str,
        task_id: str,
        *,
        model: str,
        k: int,
        n: int,
        c: int,
        kept: bool,
        params: dict[str, Any] | None = None,
    ) -> None:
        if not 0 <= c <= n or k <= 0:
            raise StoreError(
                f"filter result for {task_id!r} needs 0 ≤ c ≤ n and k > 0 (got k={k}, n={n}, c={c})"
            )
        with self._tx() as s:
            bundle = self._bundle(s, bundle_hash)
            s.add(
                FilterRow(
                    bundle_id=bundle.id,
                    task_id=task_id,
                    model=model,
                    k=k,
                    n=n,
                    c=c,
                    pass_rate=c / n if n else 0.0,
                    kept=kept,
                    params=jsonable(params or {}),
                )
            )

    def filter_results(self, bundle_hash: str) -> list[FilterResult]:
        with self._tx() as s:
            bundle = self._bundle(s, bundle_hash)
            rows = s.scalars(
                select(FilterRow).where(FilterRow.bundle_id == bundle.id).order_by(FilterRow.id)
            )
            return [
                FilterResult(
                    bundle_hash,
                    r.task_id,
                    r.model,
                    r.k,
                    r.n,
                    r.c,
                    r.pass_rate,
                    r.kept,
                    dict(r.params),
                    r.created_at,
                )
                for r in rows
            ]

    # -- evaluations and episodes ---------------------------------------------------------------
    def open_evaluation(
        self,
        key: str,
        *,
        bundle_hash: str,
        model: str,
        model_hash: str,
        config_hash: str,
        config: dict[str, Any],
    ) -> Evaluation:
        """The evaluation ``key``, created on first use (its episodes survive across runs)."""
        with self._tx() as s:
            bundle = self._bundle(s, bundle_hash)
            row = s.scalar(select(EvaluationRow).where(EvaluationRow.key == key))
            if row is None:
                s.add(
                    EvaluationRow(
                        key=key,
                        bundle_id=bundle.id,
                        model=model,
                        model_hash=model_hash,
                        config_hash=config_hash,
                        config=jsonable(config),
                    )
                )
        return self.evaluation(key)

    def evaluation(self, key: str) -> Evaluation:
        with self._tx() as s:
            row = self._eval(s, key)
            return self._evaluation(s, row)

    def evaluations(self) -> list[Evaluation]:
        with self._tx() as s:
            return [
                self._evaluation(s, r)
                for r in s.scalars(select(EvaluationRow).order_by(EvaluationRow.id))
            ]

    def _evaluation(self, s: Session, row: EvaluationRow) -> Evaluation:
        bundle = s.get(BundleRow, row.bundle_id)
        count = len(
            s.scalars(select(EpisodeRow.id).where(EpisodeRow.evaluation_id == row.id)).all()
        )
        return Evaluation(
            row.key,
            bundle.content_hash if bundle else "",
            row.model,
            row.model_hash,
            row.config_hash,
            dict(row.config),
            row.summary,
            row.created_at,
            count,
        )

    def _eval(self, s: Session, key: str) -> EvaluationRow:
        row = s.scalar(select(EvaluationRow).where(EvaluationRow.key == key))
        if row is None:
            raise StoreError(f"no evaluation {key} in the store")
        return row

    def episode_keys(self, key: str) -> set[tuple[str, int]]:
        """``(task_id, sample)`` of every stored episode of evaluation ``key``."""
        with self._tx() as s:
            ev = self._eval(s, key)
            rows = s.execute(
                select(EpisodeRow.task_id, EpisodeRow.sample).where(
                    EpisodeRow.evaluation_id == ev.id
                )
            )
            return {(t, n) for t, n in rows}

    def add_episode(self, key: str, result: EpisodeResult) -> bool:
        """Store a finished episode; False (and nothing written) if it is already stored."""
        data = result.to_dict()
        record = json.dumps(data.pop("record"))
        trajectory = json.dumps(jsonable(data))
        try:
            with self._tx() as s:
                ev = self._eval(s, key)
                s.add(
                    EpisodeRow(
                        evaluation_id=ev.id,
                        task_id=result.task_id,
                        sample=result.sample,
                        reward=result.reward,
                        passed=result.passed,
                        error=result.error,
                        truncated_by=result.truncated_by,
                        turns=result.turns,
                        tool_calls=result.tool_calls,
                        sampled_tokens=result.sampled_tokens,
                        duration_s=result.duration_s,
                        trajectory=trajectory,
                        record=record,
                    )
                )
                ev.updated_at = utcnow()
        except IntegrityError:
            return False
        return True

    def delete_errored(self, key: str) -> int:
        """Forget the errored episodes of ``key`` so a rerun tries them again."""
        with self._tx() as s:
            ev = self._eval(s, key)
            done = s.execute(
                delete(EpisodeRow).where(
                    EpisodeRow.evaluation_id == ev.id, EpisodeRow.error.is_not(None)
                )
            )
            # a DELETE's result is a CursorResult (Session.execute is typed for any statement)
            return int(done.rowcount or 0) if isinstance(done, CursorResult) else 0

    def episodes(
        self, key: str, *, task_ids: Iterable[str] | None = None, samples: int | None = None
    ) -> list[EpisodeResult]:
        """Stored episodes of ``key`` (optionally only these tasks / the first ``samples``)."""
        with self._tx() as s:
            ev = self._eval(s, key)
            query = select(EpisodeRow).where(EpisodeRow.evaluation_id == ev.id)
            if task_ids is not None:
                query = query.where(EpisodeRow.task_id.in_(list(task_ids)))
            if samples is not None:
                query = query.where(EpisodeRow.sample < samples)
            rows = s.scalars(query.order_by(EpisodeRow.task_id, EpisodeRow.sample)).all()
            return [decode_episode(row, key) for row in rows]

    def set_summary(self, key: str, summary: dict[str, Any]) -> None:
        with self._tx() as s:
            ev = self._eval(s, key)
            ev.summary = jsonable(summary)
            ev.updated_at = utcnow()

    def export(self, path: Path | str, *, key: str | None = None, fmt: str | None = None) -> int:
        """Write episodes (of ``key``, or all) as JSONL or Parquet; returns the row count."""
        from .export import export_rows

        with self._tx() as s:
            query = select(EpisodeRow, EvaluationRow).join(
                EvaluationRow, EpisodeRow.evaluation_id == EvaluationRow.id
            )
            if key is not None:
                query = query.where(EvaluationRow.id == self._eval(s, key).id)
            pairs = s.execute(query.order_by(EpisodeRow.id)).all()
            rows = [(ev.key, ev.model, decode_episode(ep, ev.key)) for ep, ev in pairs]
        return export_rows(Path(path), rows, fmt=fmt)


__all__ = ["Store"]
