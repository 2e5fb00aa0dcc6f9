"""The store (SQLAlchemy 2): bundles, tasks, validations, pass@k filter results, evaluations
and their episodes with per-token records, training runs; export to JSONL / Parquet.  See
docs/EVAL.md (training runs: docs/TRAINER.md).

* schema.py — the tables; connect.py — URLs and engines; rows.py — what reads hand back;
* store.py — :class:`Store`, every method one transaction; export.py — JSONL / Parquet;
* runs.py — training runs (``envgym train``'s row, upserted on its run key; mixed into Store).
"""

from .connect import StoreError, default_url
from .export import FORMATS, episode_row
from .rows import Evaluation, FilterResult, ValidationResult
from .runs import TRAINING_STATUSES, TrainingRun
from .schema import SCHEMA_VERSION
from .store import Store

__all__ = [
    "FORMATS",
    "SCHEMA_VERSION",
    "Evaluation",
    "FilterResult",
    "Store",
    "StoreError",
    "TRAINING_STATUSES",
    "TrainingRun",
    "ValidationResult",
    "default_url",
    "episode_row",
]
