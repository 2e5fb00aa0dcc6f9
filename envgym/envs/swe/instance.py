"""One SWE task (`SweInstance`) and its SWE-bench JSONL form, read and written strictly.

A JSONL file is data somebody else made, so reading checks every line and stops at the first
problem with an `InstanceError` naming the line and the field: a half-read file is never handed
back as if it were whole.  Field names are SWE-bench's; columns this module does not know are kept
in `metadata` and written back flat beside the known ones, so a SWE-bench file round-trips.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

_HEX40 = re.compile(r"[0-9a-fA-F]{40}")
# An instance id names a directory, a git branch and a comment line of exported scripts: ASCII
# letters, digits and "_.+-" only (SWE-bench's "owner__repo-123", SWE-smith's dotted ids), never
# only dots.  No whitespace, quotes, slashes or controls: a newline in an id once became a line
# of an exported test.sh.
ID_PATTERN = re.compile(r"[A-Za-z0-9_.+-]{1,200}")

REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch")
OPTIONAL_TEXT = ("version", "environment_setup_commit", "created_at", "hints_text", "repo_url")
TEST_LISTS = {"FAIL_TO_PASS": "fail_to_pass", "PASS_TO_PASS": "pass_to_pass"}
KNOWN = frozenset(REQUIRED + OPTIONAL_TEXT + tuple(TEST_LISTS))


class InstanceError(ValueError):
    """Bad instance data; `where` is "line N" or a file name, `field` the offending key."""

    def __init__(self, message: str, *, where: str = "", field: str = "") -> None:
        self.where = where
        self.field = field
        prefix = ", ".join(p for p in (where, f"field {field!r}" if field else "") if p)
        super().__init__(f"{prefix}: {message}" if prefix else message)


def _frozen_metadata(value: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True)
class SweInstance:
    instance_id: str  # "<owner>__<repo>-<n>" style, unique within a file
    repo: str  # local path or clone URL (or "owner/name" with repo_url set)
    base_commit: str  # 40-hex sha
    problem_statement: str
    patch: str  # gold patch (source only)
    test_patch: str  # tests only
    fail_to_pass: tuple[str, ...] = ()  # pytest node ids relative to the repo root
    pass_to_pass: tuple[str, ...] = ()
    version: str = ""  # groups instances that share one environment
    environment_setup_commit: str = ""
    created_at: str = ""
    hints_text: str = ""
    repo_url: str = ""  # where to clone from when `repo` is "owner/name"
    metadata: Mapping[str, Any] = field(default_factory=_frozen_metadata)

    def __post_init__(self) -> None:
        check_instance_id(self.instance_id, where=repr(self.instance_id)[:80])
        # Callers pass lists and dicts; the instance keeps immutable copies so that sharing one
        # between threads, or keeping it as a cache key's witness, is safe.
        object.__setattr__(self, "fail_to_pass", tuple(self.fail_to_pass))
        object.__setattr__(self, "pass_to_pass", tuple(self.pass_to_pass))
        if not isinstance(self.metadata, MappingProxyType):
            object.__setattr__(self, "metadata", _frozen_metadata(self.metadata))

    def __hash__(self) -> int:  # metadata is a mapping; the id is what identifies an instance
        return hash((self.instance_id, self.repo, self.base_commit))


def check_instance_id(value: Any, *, where: str = "") -> str:
    """`value` if it is a valid instance id (`ID_PATTERN`), else `InstanceError` saying why."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value) or not value.strip("."):
        raise InstanceError(
            f"{str(value)[:80]!r} is not an instance id: 1-200 of the ASCII "
            "letters, digits and _.+- (not only dots)",
            where=where,
            field="instance_id",
        )
    return value


def to_record(instance: SweInstance) -> dict[str, Any]:
    """The SWE-bench JSON object of `instance` (metadata keys flat beside the known fields)."""
    clash = KNOWN.intersection(instance.metadata)
    if clash:
        raise InstanceError(
            f"metadata keys {sorted(clash)} shadow SWE-bench fields",
            where=instance.instance_id,
            field="metadata",
        )
    record: dict[str, Any] = {
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "base_commit": instance.base_commit,
        "problem_statement": instance.problem_statement,
        "patch": instance.patch,
        "test_patch": instance.test_patch,
        "FAIL_TO_PASS": list(instance.fail_to_pass),
        "PASS_TO_PASS": list(instance.pass_to_pass),
    }
    for name in OPTIONAL_TEXT:
        record[name] = getattr(instance, name)
    record.update(instance.metadata)
    return record


def from_record(record: Any, *, where: str = "") -> SweInstance:
    """A `SweInstance` from one decoded JSON object; `InstanceError` naming `where` and the field."""
    if not isinstance(record, dict):
        raise InstanceError(f"expected a JSON object, got {type(record).__name__}", where=where)
    values: dict[str, Any] = {}
    for name in REQUIRED:
        if name not in record:
            raise InstanceError("required field missing", where=where, field=name)
        if not isinstance(record[name], str):
            raise InstanceError(
                f"must be a string, got {type(record[name]).__name__}", where=where, field=name
            )
        values[name] = record[name]
    if not values["instance_id"].strip():
        raise InstanceError("must not be empty", where=where, field="instance_id")
    check_instance_id(values["instance_id"], where=where)
    try:  # a lone surrogate ("\\ud800" in JSON) is not text: it could not be written back out
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InstanceError(
            "holds a lone surrogate (\\ud800-\\udfff): not valid Unicode text", where=where
        ) from None
    if not _HEX40.fullmatch(values["base_commit"]):
        raise InstanceError(
            f"must be a 40-hex commit sha, got {values['base_commit'][:60]!r}",
            where=where,
            field="base_commit",
        )
    for name in OPTIONAL_TEXT:
        value = record.get(name)
        if value is None:  # SWE-bench derivatives write null for "not known"
            value = ""
        if not isinstance(value, str):
            raise InstanceError(
                f"must be a string, got {type(value).__name__}", where=where, field=name
            )
        values[name] = value
    for column, attr in TEST_LISTS.items():
        values[attr] = _test_ids(record.get(column), where=where, column=column)
    metadata = {k: v for k, v in record.items() if k not in KNOWN}
    return SweInstance(**values, metadata=metadata)


def _test_ids(value: Any, *, where: str, column: str) -> tuple[str, ...]:
    """A list of test ids, given as a JSON list or (SWE-bench on the Hub) a JSON-encoded string."""
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            raise InstanceError(
                f"a string that is not a JSON list ({exc.msg})", where=where, field=column
            ) from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InstanceError("must be a list of test id strings", where=where, field=column)
    return tuple(value)


def read_instances(path: str | os.PathLike[str]) -> list[SweInstance]:
    """Every instance of a SWE-bench JSONL file; blank lines are skipped.

    Raises `InstanceError` (line number and field) on bad JSON, a missing or mistyped field, a
    base commit that is not 40 hex digits, or an instance id seen on an earlier line.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InstanceError("no such file", where=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InstanceError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start})", where=str(path)
        ) from None
    instances: list[SweInstance] = []
    first_line: dict[str, int] = {}
    # Only "\n" ends a JSONL line: str.splitlines would also split inside a string that holds
    # U+0085 or U+2028, which JSON writers (ours included) leave unescaped.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InstanceError(
                f"not valid JSON ({exc.msg} at column {exc.colno})", where=where
            ) from None
        except RecursionError:
            raise InstanceError("JSON nested too deeply", where=where) from None
        instance = from_record(record, where=where)
        if instance.instance_id in first_line:
            raise InstanceError(
                f"duplicate instance id {instance.instance_id!r} (first on line "
                f"{first_line[instance.instance_id]})",
                where=where,
                field="instance_id",
            )
        first_line[instance.instance_id] = number
        instances.append(instance)
    return instances


def write_instances(path: str | os.PathLike[str], instances: Iterable[SweInstance]) -> Path:
    """Write `instances` as SWE-bench JSONL, atomically (a reader never sees half a file)."""
    path = Path(path)
    records = [to_record(i) for i in instances]
    ids = [r["instance_id"] for r in records]
    duplicates = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    if duplicates:
        raise InstanceError(f"duplicate instance ids {duplicates}", field="instance_id")
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
