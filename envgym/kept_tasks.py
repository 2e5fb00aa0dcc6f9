"""The kept-tasks file: which tasks of which bundles a pass@k filter kept.

DeepSeek-V3.2 §3.2.3 keeps a synthesized task when the policy solves it at least once in k
tries.  ``envgym filter`` writes the decisions for a suite or bundles and a given policy
(``envgym/synth_agents/kept_run.py``); the trainer's config reads them (``envs[i].kept``), so GRPO
samples only tasks that policy solves sometimes, and fewer of its groups are all-wrong (no
gradient).  Bundles are keyed by content hash: the file follows the bundles, not their paths,
and a bundle changed since it was filtered is refused rather than trained on unfiltered.

The file is untrusted input: its size is bounded, every field is type-checked, and anything
wrong is a :class:`KeptError` naming the file and the field.  It sits in the core because the
trainer's config, which may import only the core, reads it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

FORMAT = "envgym-kept-tasks"
VERSION = 1
MAX_BYTES = 64 * 1024 * 1024  # ~100k bundles; anything larger is not ours
Scalar = str | int | float | bool | None


class KeptError(ValueError):
    """The kept-tasks file cannot be read or used."""


@dataclass(frozen=True)
class KeptBundle:
    path: str  # where the bundle was when it was filtered (for people; lookups use the hash)
    content_hash: str
    tasks: int  # how many tasks the bundle has
    kept: tuple[str, ...]  # in the bundle's task order
    pass_rates: dict[str, float]  # task id -> share of its samples that solved it
    # False: left out of a sampled run (``envgym filter --sample``), so nothing is kept; recorded
    # so the trainer knows the bundle and leaves it out rather than refusing it as unknown
    filtered: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "content_hash": self.content_hash,
            "tasks": self.tasks,
            "filtered": self.filtered,
            "kept": list(self.kept),
            "pass_rates": dict(self.pass_rates),
        }


@dataclass(frozen=True)
class KeptTasks:
    # What decided the file (model and its fingerprint, k, sampling, budgets, seed): a rerun
    # resumes a file only with the same settings.
    settings: dict[str, Scalar]
    bundles: dict[str, KeptBundle]  # by content hash, in the order they were decided

    def with_bundle(self, bundle: KeptBundle) -> KeptTasks:
        return replace(self, bundles={**self.bundles, bundle.content_hash: bundle})

    @property
    def kept(self) -> int:
        return sum(len(b.kept) for b in self.bundles.values())

    @property
    def mean_pass_rate(self) -> float:
        """Over every filtered task (0 when none was filtered)."""
        rates = [r for b in self.bundles.values() for r in b.pass_rates.values()]
        return sum(rates) / len(rates) if rates else 0.0

    @property
    def tasks(self) -> int:
        """Tasks of the bundles that were filtered."""
        return sum(b.tasks for b in self.bundles.values() if b.filtered)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "settings": dict(self.settings),
            "kept": self.kept,
            "tasks": self.tasks,
            "bundles": [b.to_json() for b in self.bundles.values()],
        }


def write_kept(path: Path, kept: KeptTasks) -> None:
    """Write ``kept`` to ``path`` whole or not at all (a killed writer leaves the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(kept.to_json(), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_kept(path: str | Path) -> KeptTasks:
    """Read and check the kept-tasks file at ``path``."""
    p = Path(path)
    try:
        if p.is_symlink():
            raise KeptError(f"{p} is a symbolic link; name the file itself")
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise KeptError(f"{p} is {size} bytes, over the {MAX_BYTES} allowed")
        data = json.loads(p.read_bytes())
    except FileNotFoundError:
        raise KeptError(f"no kept-tasks file at {p} (envgym filter writes one)") from None
    except json.JSONDecodeError as exc:
        raise KeptError(
            f"{p} is truncated or not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KeptError(f"cannot read {p}: {exc}") from None
    return parse_kept(data, str(p))


def parse_kept(data: Any, where: str) -> KeptTasks:
    def bad(what: str) -> KeptError:
        return KeptError(f"{where} is not a valid kept-tasks file: {what}")

    if not isinstance(data, dict):
        raise bad("the top level is not an object")
    if data.get("format") != FORMAT:
        raise bad(f"'format' is {_short(data.get('format'))}, not {FORMAT!r}")
    if data.get("version") != VERSION:
        raise bad(f"'version' is {_short(data.get('version'))}; this envgym reads {VERSION}")
    settings = data.get("settings")
    if not isinstance(settings, dict) or not all(
        isinstance(k, str) and _scalar(v) for k, v in settings.items()
    ):
        raise bad("'settings' must be an object of strings, numbers, booleans and nulls")
    rows = data.get("bundles")
    if not isinstance(rows, list):
        raise bad("'bundles' must be a list")
    bundles: dict[str, KeptBundle] = {}
    for i, row in enumerate(rows):
        b = _bundle(row, i, bad)
        if b.content_hash in bundles:
            raise bad(f"bundles[{i}].content_hash {b.content_hash!r} is listed twice")
        bundles[b.content_hash] = b
    return KeptTasks(dict(settings), bundles)


def _bundle(row: Any, i: int, bad: Any) -> KeptBundle:
    if not isinstance(row, dict):
        raise bad(f"bundles[{i}] is not an object")
    for key, kind in {"path": str, "content_hash": str, "tasks": int}.items():
        value = row.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise bad(f"bundles[{i}].{key} must be a {kind.__name__}")
    if row["tasks"] < 0:
        raise bad(f"bundles[{i}].tasks must be ≥ 0")
    kept = row.get("kept")
    if not isinstance(kept, list) or not all(isinstance(t, str) for t in kept):
        raise bad(f"bundles[{i}].kept must be a list of task ids")
    if len(set(kept)) != len(kept) or len(kept) > row["tasks"]:
        raise bad(f"bundles[{i}].kept repeats a task or lists more than the bundle's tasks")
    filtered = row.get("filtered", True)
    if not isinstance(filtered, bool) or (not filtered and kept):
        raise bad(
            f"bundles[{i}].filtered must be a boolean, and an unfiltered bundle keeps nothing"
        )
    rates = row.get("pass_rates")
    if not isinstance(rates, dict) or not all(
        isinstance(k, str)
        and isinstance(v, (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
        and 0.0 <= v <= 1.0
        for k, v in rates.items()
    ):
        raise bad(f"bundles[{i}].pass_rates must map task ids to numbers in [0, 1]")
    return KeptBundle(
        row["path"], row["content_hash"], row["tasks"], tuple(kept),
        {k: float(v) for k, v in rates.items()}, filtered,
    )  # fmt: skip


def _scalar(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, (str, int, bool))


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
