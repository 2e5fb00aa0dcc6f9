"""Where synthesis outcomes go: the run's journal (commit point) and the team store.

Write-ahead: a job's outcome is first appended to ``<out>/synth.jsonl`` (fsync-ed); only then
is its bundle moved from ``.staging/`` into ``bundles/`` (kept) or ``rejected/`` and recorded in
the store (``envgym.store.Store``: the bundle, and a validation of kind ``"synth"`` with the
reasons).  Every step after the journal is idempotent and :meth:`SynthRecorder.recover` redoes
the unfinished ones, so ``kill -9`` at any moment loses nothing and duplicates nothing: a job
without a journal record is simply run again, a journaled one is never run again.  Filter
results follow the same order (journal, then store).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.bundle import BundleError, load_bundle
from envgym.store import Store
from envgym.synth_agents.journal import Journal

JOURNAL = "synth.jsonl"
STAGING = ".staging"
KEPT, REJECTED = "bundles", "rejected"
SYNTH_KIND = "synth"


@dataclass(frozen=True)
class FilterKey:
    bundle_hash: str
    task_id: str
    model: str
    k: int
    drop_always_solved: bool

    def text(self) -> str:
        return f"{self.bundle_hash}/{self.task_id}/{self.model}/k{self.k}/drop{int(self.drop_always_solved)}"


class SynthRecorder:
    def __init__(self, out: Path, store: Store | None) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.out / JOURNAL)
        self.store = store

    # -- paths -----------------------------------------------------------------------------
    def staging(self, job_key: str) -> Path:
        return self.out / STAGING / job_key

    def final(self, record: dict[str, Any]) -> Path:
        return self.out / record["bundle"]

    # -- jobs --------------------------------------------------------------------------------
    def job(self, key: str) -> dict[str, Any] | None:
        return self.journal.get("job", key)

    def jobs(self) -> list[dict[str, Any]]:
        return self.journal.records("job")

    def commit_job(self, key: str, record: dict[str, Any]) -> None:
        """Journal the outcome (the commit point), then place the bundle and store it."""
        self.journal.append("job", key, record)
        self._finish_job(self.journal.get("job", key) or {})

    def _finish_job(self, record: dict[str, Any]) -> None:
        staging = self.staging(record["key"])
        if record.get("bundle"):
            final = self.final(record)
            if staging.is_dir() and not final.exists():
                final.parent.mkdir(parents=True, exist_ok=True)
                os.rename(staging, final)
            if final.is_dir():
                self._store_bundle(final, record)
        shutil.rmtree(staging, ignore_errors=True)

    def _store_bundle(self, root: Path, record: dict[str, Any]) -> None:
        if self.store is None:
            return
        try:
            bundle = load_bundle(root)
        except BundleError:
            return  # a malformed bundle cannot be stored; the journal keeps its reasons
        digest = self.store.add_bundle(bundle)
        if not any(v.kind == SYNTH_KIND for v in self.store.validations(digest)):
            report = {
                k: record.get(k)
                for k in (
                    "key",
                    "agent",
                    "category",
                    "seed",
                    "status",
                    "reasons",
                    "problems",
                    "validation",
                    "agent_info",
                )
            }
            self.store.record_validation(
                digest, passed=record["status"] == "kept", report=report, kind=SYNTH_KIND
            )

    def recover(self) -> int:
        """Finish journaled jobs whose later steps a crash cut short; drop unjournaled staging.

        Returns how many staging directories of unfinished (unjournaled) jobs were removed.
        """
        for record in self.jobs():
            self._finish_job(record)
        removed = 0
        staging = self.out / STAGING
        if staging.is_dir():
            for leftover in staging.iterdir():
                shutil.rmtree(leftover, ignore_errors=True)
                removed += 1
        for record in self.journal.records("filter"):
            self._store_filter(record)
        return removed

    # -- pass@k filter results ------------------------------------------------------------------
    def filter_result(self, key: FilterKey) -> dict[str, Any] | None:
        return self.journal.get("filter", key.text())

    def commit_filter(self, key: FilterKey, record: dict[str, Any]) -> None:
        self.journal.append(
            "filter",
            key.text(),
            {
                **record,
                "bundle_hash": key.bundle_hash,
                "task_id": key.task_id,
                "model": key.model,
                "k": key.k,
                "drop_always_solved": key.drop_always_solved,
            },
        )
        self._store_filter(self.journal.get("filter", key.text()) or {})

    def _store_filter(self, record: dict[str, Any]) -> None:
        if self.store is None or not record:
            return
        try:
            existing = self.store.filter_results(record["bundle_hash"])
        except Exception:  # noqa: BLE001 - the bundle is not in this store (e.g. another --db)
            return
        if any(
            f.task_id == record["task_id"]
            and f.model == record["model"]
            and f.k == record["k"]
            and f.params.get("drop_always_solved") == record["drop_always_solved"]
            for f in existing
        ):
            return
        params = {
            k: record[k]
            for k in (
                "drop_always_solved",
                "decision",
                "pass_rate",
                "difficulty",
                "tokens",
                "full_tokens_estimate",
                "errors",
            )
            if k in record
        }
        self.store.record_filter(
            record["bundle_hash"],
            record["task_id"],
            model=record["model"],
            k=record["k"],
            n=record["n"],
            c=record["c"],
            kept=record["kept"],
            params=params,
        )
