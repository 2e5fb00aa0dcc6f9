"""Reading a suite: ``DIR/suite.json``, the manifest ``envgym synth --categories`` writes.

A suite is a directory of validated bundles from many categories plus one manifest that lists
each bundle (its path relative to the suite, category, content hash, task count and split) and
splits the categories into ``train``, ``validation`` (for choices made during training:
when to stop, which checkpoint; often empty) and ``held_out``.  This module only *reads* one (the
trainer's config and ``envgym eval`` expand a suite into its bundles); the writer lives in
``envgym.synth_agents.suite``.  It sits in the core because ``envgym eval`` may import nothing else.

A manifest is untrusted input: its size is bounded, every field is type-checked, a bundle path
must stay inside the suite directory, and anything wrong is a :class:`SuiteError` naming the
file and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST = "suite.json"
FORMAT = "envgym-suite"
VERSION = 1
SPLITS = ("train", "validation", "held_out")
REQUIRED_SPLITS = ("train", "held_out")  # suites written before the validation split lack it
SPLIT_CHOICES = (*SPLITS, "all")
MAX_MANIFEST_BYTES = 64 * 1024 * 1024  # ~100k bundles; anything larger is not ours


class SuiteError(ValueError):
    """The suite (its directory, manifest or a requested split) cannot be used."""


@dataclass(frozen=True)
class SuiteBundle:
    path: str  # relative to the suite directory, POSIX separators
    category: str
    content_hash: str
    tasks: int
    split: str


@dataclass(frozen=True)
class Suite:
    root: Path
    version: int
    bundles: tuple[SuiteBundle, ...]
    splits: dict[str, tuple[str, ...]]  # split -> category names
    raw: dict[str, Any]

    def select(self, split: str) -> list[SuiteBundle]:
        """The bundles of one split (``all``: every bundle); a bad split name is a SuiteError."""
        if split not in SPLIT_CHOICES:
            raise SuiteError(
                f"unknown split {split!r} of the suite {self.root} (choose one of "
                f"{', '.join(SPLIT_CHOICES)})"
            )
        return [b for b in self.bundles if split == "all" or b.split == split]

    def bundle_dirs(self, split: str) -> list[Path]:
        chosen = self.select(split)
        if not chosen:
            raise SuiteError(f"the {split!r} split of the suite {self.root} has no bundles")
        return [self.root / b.path for b in chosen]


def is_suite(target: str | Path) -> bool:
    """Whether ``target`` names a suite: a directory holding suite.json, or the file itself."""
    p = Path(target)
    return (p.is_dir() and (p / MANIFEST).is_file()) or (p.name == MANIFEST and p.is_file())


def split_dirs(target: str | Path, split: str | None, default: str) -> list[Path] | None:
    """The bundle directories of ``split`` (``default`` when None) of the suite at ``target``;
    None when ``target`` names no suite and no split was asked for (an env id or a bundle).
    A split asked of something that is not a suite is a :class:`SuiteError`, as is a damaged
    suite."""
    if split is None and not is_suite(target):
        return None
    return load_suite(target).bundle_dirs(split or default)


def load_suite(target: str | Path) -> Suite:
    """Read and check the suite at ``target`` (its directory or its suite.json)."""
    p = Path(target)
    path = p if p.name == MANIFEST and not p.is_dir() else p / MANIFEST
    root = path.parent
    if not path.is_file():
        raise SuiteError(f"{target} is not a suite: {path} does not exist")
    try:
        size = path.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise SuiteError(f"{path} is {size} bytes, over the {MAX_MANIFEST_BYTES} allowed")
        data = json.loads(path.read_bytes())
    except json.JSONDecodeError as exc:
        raise SuiteError(
            f"{path} is truncated or not JSON ({exc.msg} at line {exc.lineno} column "
            f"{exc.colno}); rerun the same `envgym synth --categories` command to rewrite it"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"cannot read {path}: {exc}") from None
    return parse_manifest(data, root, str(path))


def parse_manifest(data: Any, root: Path, where: str) -> Suite:
    def bad(what: str) -> SuiteError:
        return SuiteError(f"{where} is not a valid suite manifest: {what}")

    if not isinstance(data, dict):
        raise bad("the top level is not an object")
    if data.get("format") != FORMAT:
        raise bad(f"'format' is {data.get('format')!r}, not {FORMAT!r}")
    version = data.get("version")
    if version != VERSION:
        raise bad(f"'version' is {version!r}; this envgym reads version {VERSION}")
    splits_raw = data.get("splits")
    if (
        not isinstance(splits_raw, dict)
        or not set(REQUIRED_SPLITS) <= set(splits_raw)
        or not set(splits_raw) <= set(SPLITS)
    ):
        raise bad(
            f"'splits' must be an object with the keys {list(REQUIRED_SPLITS)} "
            f"(and optionally 'validation'), not {sorted(splits_raw) if isinstance(splits_raw, dict) else splits_raw!r}"
        )
    splits: dict[str, tuple[str, ...]] = {}
    split_of: dict[str, str] = {}
    for name in SPLITS:
        names = splits_raw.get(name, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise bad(f"'splits.{name}' must be a list of category names")
        splits[name] = tuple(names)
        for category in names:
            if category in split_of:
                raise bad(f"category {category!r} is in both {split_of[category]!r} and {name!r}")
            split_of[category] = name
    rows = data.get("bundles")
    if not isinstance(rows, list):
        raise bad("'bundles' must be a list")
    bundles = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        bundles.append(_bundle(row, i, split_of, bad))
        if bundles[-1].path in seen:
            raise bad(f"bundles[{i}].path {bundles[-1].path!r} is listed twice")
        seen.add(bundles[-1].path)
    return Suite(root, VERSION, tuple(bundles), splits, data)


def _bundle(row: Any, i: int, split_of: dict[str, str], bad: Any) -> SuiteBundle:
    if not isinstance(row, dict):
        raise bad(f"bundles[{i}] is not an object")
    fields = {"path": str, "category": str, "content_hash": str, "tasks": int, "split": str}
    for key, kind in fields.items():
        if not isinstance(row.get(key), kind) or isinstance(row.get(key), bool):
            raise bad(f"bundles[{i}].{key} must be a {kind.__name__}")
    rel = PurePosixPath(row["path"])
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or "\\" in row["path"]:
        raise bad(f"bundles[{i}].path {row['path']!r} must be a relative path inside the suite")
    if split_of.get(row["category"]) != row["split"]:
        raise bad(
            f"bundles[{i}] (category {row['category']!r}) says split {row['split']!r}, "
            f"but 'splits' puts that category in {split_of.get(row['category'])!r}"
        )
    return SuiteBundle(
        rel.as_posix(), row["category"], row["content_hash"], row["tasks"], row["split"]
    )
