"""The bundle: one environment (state + tools) and its tasks, on disk.  Format: docs/BUNDLE.md.

Loading validates everything that can be checked *without executing* bundle code: files
present, manifest and tasks against the published JSON schemas, the content hash, that
``tools.py``/``solution.py``/``verifier.py`` parse, that every tool's parameters carry type hints
and that every task names functions that exist.  Each failure is a :class:`BundleError` naming
the file (and the field or line) that is wrong.  Every read is bounded first (sizes, line
counts, JSON and Python nesting: :mod:`envgym.bundle_limits`, docs/BUNDLE.md "Limits").
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from envgym.bundle_code import defined_functions, parse_python
from envgym.bundle_limits import (
    BundleError,
    BundleLimits,
    hash_fd,
    knob,
    open_file,
    parse_json,
    read_fd,
    walk,
)
from envgym.runtime import CODE_DATA, CODE_FILES  # defined where the sandbox worker can import it

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
TASKS = "tasks.jsonl"
STATE_DIR = "state"


__all__ = [
    "Bundle",
    "BundleError",
    "BundleLimits",
    "Manifest",
    "Provenance",
    "Task",
    "Witness",
    "bundle_files",
    "hash_bundle",
    "load_bundle",
    "parse_python",
    "schema",
    "write_manifest",
]


@dataclass(frozen=True)
class Provenance:
    agent: str
    created_at: str
    model: str | None = None
    seed: int | None = None


@dataclass(frozen=True)
class Manifest:
    name: str
    category: str
    content_hash: str
    provenance: Provenance
    description: str = ""
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True)
class Witness:
    """A submission that violates exactly one verifier rule (docs/CHECK.md)."""

    rule: str
    submission: Mapping[str, Any]
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "submission": dict(self.submission), "note": self.note}


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    solution: str
    verifier: str
    difficulty: int = 1
    submit_tool: str | None = "submit_result"
    system_prompt: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Host-side only (never sent into the sandbox): per-rule witnesses for `envgym check` and
    # the name of a greedy baseline solver in solution.py (docs/BUNDLE.md, docs/CHECK.md).
    witnesses: tuple[Witness, ...] = ()
    baseline: str | None = None

    def to_line(self) -> dict[str, Any]:
        """The tasks.jsonl form: :meth:`to_dict` plus the host-side witnesses and baseline."""
        line = self.to_dict()
        if self.witnesses:
            line["witnesses"] = [w.to_dict() for w in self.witnesses]
        if self.baseline is not None:
            line["baseline"] = self.baseline
        return line

    def to_dict(self) -> dict[str, Any]:
        """The JSON form passed to solutions and verifiers (no witnesses: the sandbox never sees them)."""
        return {
            "id": self.id,
            "prompt": self.prompt,
            "solution": self.solution,
            "verifier": self.verifier,
            "difficulty": self.difficulty,
            "submit_tool": self.submit_tool,
            "system_prompt": self.system_prompt,
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True)
class Bundle:
    root: Path
    manifest: Manifest
    tasks: tuple[Task, ...]

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    def task(self, key: str | int) -> Task:
        if isinstance(key, int):
            if not 0 <= key < len(self.tasks):
                raise KeyError(f"task index {key} out of range (bundle has {len(self.tasks)})")
            return self.tasks[key]
        for task in self.tasks:
            if task.id == key:
                return task
        known = ", ".join(t.id for t in self.tasks[:10])
        raise KeyError(f"no task {key!r} in bundle {self.manifest.name!r} (tasks: {known}…)")


@cache
def schema(name: str) -> dict[str, Any]:
    """A published JSON schema: ``"manifest"`` or ``"task"``."""
    text = resources.files("envgym.schemas").joinpath(f"{name}.schema.json").read_text()
    return json.loads(text)


def _root_fd(root: Path) -> int:
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        message = f"bundle directory {root} cannot be opened: {exc.strerror}"
        raise BundleError(".", message) from None


def bundle_files(root: Path, limits: BundleLimits | None = None) -> list[str]:
    """Every regular file of a bundle (relative POSIX paths, sorted), never following links.

    A bundle travels as an archive, so a link in it can point anywhere on the host: hashing or
    loading through ``state/notes -> /etc/shadow`` would read a host file.  Links and special
    files (a FIFO would block the reader) are refused, naming the path, and so is every file,
    count, depth or total over ``limits`` (default :meth:`BundleLimits.from_env`), before any
    byte of it is read.
    """
    limits = BundleLimits.from_env() if limits is None else limits
    named = {MANIFEST: "manifest_bytes", TASKS: "tasks_bytes"}
    named.update({c: "code_bytes" for c in (*CODE_FILES, *CODE_DATA)})
    found: list[str] = []
    total = state = 0
    fd = _root_fd(Path(root))
    try:
        # bytecode caches are not content: listed (a link named __pycache__ is refused), not entered
        for entry in walk(
            fd, limits, lambda rel: named.get(rel, "file_bytes"), skip=frozenset({"__pycache__"})
        ):
            if entry.is_dir:
                continue
            total += entry.size
            if total > limits.bundle_bytes:
                raise BundleError(
                    entry.rel,
                    f"the bundle's files add up to too many bytes {knob(limits, 'bundle_bytes')}",
                )
            if entry.rel.startswith(STATE_DIR + "/"):
                state += entry.size
                if state > limits.state_bytes:
                    raise BundleError(
                        entry.rel,
                        f"{STATE_DIR}/ holds too many bytes {knob(limits, 'state_bytes')}",
                    )
            found.append(entry.rel)
    finally:
        os.close(fd)
    return sorted(found)


def hash_bundle(root: Path, limits: BundleLimits | None = None) -> str:
    """SHA-256 over every file but the manifest, in sorted relative-path order (no links).

    Each file is streamed (``path \0 size \0 bytes``), so hashing holds one chunk in memory.
    """
    root = Path(root)
    digest = hashlib.sha256()
    files = bundle_files(root, limits)
    fd = _root_fd(root)
    try:
        for rel in files:
            if rel != MANIFEST:
                hash_fd(open_file(fd, rel, rel), rel, digest.update)
    finally:
        os.close(fd)
    return "sha256:" + digest.hexdigest()


def _read(root: Path, rel: str, limits: BundleLimits, what: str) -> bytes:
    """The bytes of ``root/rel``, at most ``limits.<what>``; a link swapped in after the walk
    fails (ELOOP) instead of being followed."""
    fd = _root_fd(root)
    try:
        return read_fd(open_file(fd, rel, rel), rel, limits, what)
    finally:
        os.close(fd)


def write_manifest(
    root: Path,
    *,
    name: str,
    category: str,
    provenance: Mapping[str, Any],
    description: str = "",
) -> Manifest:
    """(Re)write ``manifest.json`` with the current content hash; returns the manifest."""
    root = Path(root)
    prov = {"model": None, "seed": None, **provenance}
    prov.setdefault("created_at", datetime.now(UTC).isoformat(timespec="seconds"))
    data = {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "category": category,
        "description": description,
        "content_hash": hash_bundle(root),
        "provenance": prov,
    }
    _validate(data, "manifest", MANIFEST)
    (root / MANIFEST).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return _manifest(data)


def load_bundle(
    root: Path | str, *, verify_hash: bool = True, limits: BundleLimits | None = None
) -> Bundle:
    """Load and validate a bundle directory.  Raises :class:`BundleError`.

    ``limits`` (default :meth:`BundleLimits.from_env`) bound what is read: docs/BUNDLE.md.
    """
    limits = BundleLimits.from_env() if limits is None else limits
    root = Path(root).resolve()
    if not root.is_dir():
        raise BundleError(".", f"bundle directory {root} does not exist")
    for name in (MANIFEST, TASKS, *CODE_FILES):
        if not (root / name).is_file():
            raise BundleError(name, "required file is missing")
    if not (root / STATE_DIR).is_dir():
        raise BundleError(STATE_DIR, "required directory is missing")

    bundle_files(root, limits)  # refuses links, special files and sizes over limits, hash or not
    manifest = _manifest(_load_json(root, MANIFEST, limits))
    if verify_hash:
        actual = hash_bundle(root, limits)
        if actual != manifest.content_hash:
            raise BundleError(
                MANIFEST,
                f"content hash {manifest.content_hash} does not match the files ({actual}); "
                "re-hash with envgym.bundle.write_manifest after editing",
                field="content_hash",
            )
    functions = {
        name: defined_functions(_read(root, name, limits, "code_bytes"), name)
        for name in CODE_FILES
    }
    tasks = _load_tasks(root, functions, limits)
    return Bundle(root=root, manifest=manifest, tasks=tasks)


def _load_json(root: Path, rel: str, limits: BundleLimits) -> Any:
    data = _read(root, rel, limits, "manifest_bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(rel, f"not valid JSON: not UTF-8 text: {exc}") from None
    return parse_json(text, rel, limits)


def _validate(data: Any, schema_name: str, file: str) -> None:
    validator = jsonschema.Draft202012Validator(schema(schema_name))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if not errors:
        return
    err = errors[0]
    path = ".".join(str(p) for p in err.absolute_path) or "(root)"
    message = err.message
    if schema_name == "manifest" and path == "schema_version":
        message = f"unsupported schema version {err.instance!r}; this envgym reads version {SCHEMA_VERSION}"
    raise BundleError(file, message, field=path)


def _manifest(data: Any) -> Manifest:
    _validate(data, "manifest", MANIFEST)
    prov = data["provenance"]
    return Manifest(
        name=data["name"],
        category=data["category"],
        description=data.get("description", ""),
        content_hash=data["content_hash"],
        provenance=Provenance(
            agent=prov["agent"],
            created_at=prov["created_at"],
            model=prov.get("model"),
            seed=prov.get("seed"),
        ),
        schema_version=data["schema_version"],
    )


def _task_lines(root: Path, limits: BundleLimits) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of tasks.jsonl, each line read only if within the limits."""
    fd = _root_fd(root)
    try:
        task_fd = open_file(fd, TASKS, TASKS)
    finally:
        os.close(fd)
    with os.fdopen(task_fd, "rb") as fh:
        size = os.fstat(task_fd).st_size
        if size > limits.tasks_bytes:
            raise BundleError(TASKS, f"is too big: {size} bytes {knob(limits, 'tasks_bytes')}")
        lineno = total = 0
        while raw := fh.readline(limits.task_line_bytes + 1):
            lineno += 1
            total += len(raw)
            where = f"line {lineno}"
            if lineno > limits.task_lines:
                message = f"too many lines {knob(limits, 'task_lines')}"
                raise BundleError(TASKS, message, field=where)
            if len(raw) > limits.task_line_bytes:
                message = f"line too long {knob(limits, 'task_line_bytes')}"
                raise BundleError(TASKS, message, field=where)
            if total > limits.tasks_bytes:
                message = f"grew too big while read {knob(limits, 'tasks_bytes')}"
                raise BundleError(TASKS, message, field=where)
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BundleError(TASKS, f"not UTF-8 text: {exc}", field=where) from None


def _load_tasks(
    root: Path, functions: Mapping[str, Mapping[str, ast.FunctionDef]], limits: BundleLimits
) -> tuple[Task, ...]:
    tasks: list[Task] = []
    seen: set[str] = set()
    for lineno, line in _task_lines(root, limits):
        if not line.strip():
            continue
        where = f"line {lineno}"
        data = parse_json(line, TASKS, limits, field=where)
        try:
            _validate(data, "task", TASKS)
        except BundleError as exc:
            raise BundleError(
                TASKS, str(exc).split(": ", 2)[-1], field=f"{where}.{exc.field}"
            ) from None
        task = Task(
            id=data["id"],
            prompt=data["prompt"],
            solution=data["solution"],
            verifier=data["verifier"],
            difficulty=data.get("difficulty", 1),
            submit_tool=data.get("submit_tool", "submit_result"),
            system_prompt=data.get("system_prompt"),
            metadata=data.get("metadata", {}),
            witnesses=tuple(
                Witness(w["rule"], w["submission"], w.get("note", ""))
                for w in data.get("witnesses", ())
            ),
            baseline=data.get("baseline"),
        )
        if task.id in seen:
            raise BundleError(TASKS, f"duplicate task id {task.id!r}", field=f"{where}.id")
        seen.add(task.id)
        for key, file in (
            ("solution", "solution.py"),
            ("verifier", "verifier.py"),
            ("baseline", "solution.py"),
        ):
            fn = getattr(task, key)
            if fn is not None and fn not in functions[file]:
                raise BundleError(
                    TASKS, f"{file} defines no function {fn!r}", field=f"{where}.{key}"
                )
        if task.submit_tool is not None and task.submit_tool not in functions["tools.py"]:
            raise BundleError(
                TASKS,
                f"tools.py defines no tool {task.submit_tool!r}",
                field=f"{where}.submit_tool",
            )
        tasks.append(task)
    if not tasks:
        raise BundleError(TASKS, "the bundle has no tasks")
    return tuple(tasks)
