"""The bundle: one environment (state + tools) and its tasks, on disk.  Format: docs/BUNDLE.md.

Loading validates everything that can be checked *without executing* bundle code: files
present, manifest and tasks against the published JSON schemas, the content hash, that
``tools.py``/``solution.py``/``verifier.py`` parse, that every tool's parameters carry type hints
and that every task names functions that exist.  Each failure is a :class:`BundleError` naming
the file (and the field or line) that is wrong.
"""

from __future__ import annotations

import ast
import hashlib
import gc
import json
import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
TASKS = "tasks.jsonl"
CODE_FILES = ("tools.py", "solution.py", "verifier.py")
STATE_DIR = "state"


class BundleError(ValueError):
    """A malformed bundle.  ``file`` is relative to the bundle root."""

    def __init__(self, file: str, message: str, *, field: str | None = None) -> None:
        self.file = file
        self.field = field
        where = f"{file}: {field}: " if field else f"{file}: "
        super().__init__(where + message)


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
    """A submission that violates exactly one verifier rule (issue 9, shared contract)."""

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


def bundle_files(root: Path) -> list[str]:
    """Every regular file of a bundle (relative POSIX paths, sorted), never following links.

    A bundle travels as an archive, so a link in it can point anywhere on the host: hashing or
    loading through ``state/notes -> /etc/shadow`` would read a host file (issue 8 item 10).
    Links and special files (a FIFO would block the reader) are refused, naming the path.
    """
    root = Path(root)
    found: list[str] = []
    for directory, dirs, files in os.walk(root, followlinks=False):
        base = Path(directory)
        for name in [*dirs, *files]:
            path = base / name
            rel = path.relative_to(root).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise BundleError(rel, f"is a symbolic link (to {os.readlink(path)!r}); bundles may not contain links")
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise BundleError(rel, "is not a regular file or directory (a FIFO, socket or device)")
            if stat.S_ISREG(mode):
                found.append(rel)
        dirs[:] = [d for d in dirs if d != "__pycache__"]  # bytecode caches are not content
    return sorted(found)


def hash_bundle(root: Path) -> str:
    """SHA-256 over every file but the manifest, in sorted relative-path order (no links)."""
    root = Path(root)
    digest = hashlib.sha256()
    for rel in bundle_files(root):
        if rel == MANIFEST:
            continue
        data = _read_nofollow(root, rel)
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)
    return "sha256:" + digest.hexdigest()


def _read_nofollow(root: Path, rel: str) -> bytes:
    """The bytes of ``root/rel``; a link swapped in after the walk fails (ELOOP) instead of being followed."""
    try:
        fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BundleError(rel, f"cannot be read without following links: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


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
    prov.setdefault("created_at", datetime.now(timezone.utc).isoformat(timespec="seconds"))
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


def load_bundle(root: Path | str, *, verify_hash: bool = True) -> Bundle:
    """Load and validate a bundle directory.  Raises :class:`BundleError`."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise BundleError(".", f"bundle directory {root} does not exist")
    for name in (MANIFEST, TASKS, *CODE_FILES):
        if not (root / name).is_file():
            raise BundleError(name, "required file is missing")
    if not (root / STATE_DIR).is_dir():
        raise BundleError(STATE_DIR, "required directory is missing")

    bundle_files(root)  # refuses links and special files, also when the hash is not checked
    manifest = _manifest(_load_json(root / MANIFEST))
    if verify_hash:
        actual = hash_bundle(root)
        if actual != manifest.content_hash:
            raise BundleError(
                MANIFEST,
                f"content hash {manifest.content_hash} does not match the files ({actual}); "
                "re-hash with envgym.bundle.write_manifest after editing",
                field="content_hash",
            )
    functions = {name: _defined_functions(root, name) for name in CODE_FILES}
    tasks = _load_tasks(root / TASKS, functions)
    return Bundle(root=root, manifest=manifest, tasks=tasks)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(path.name, f"not valid JSON: {exc}") from None


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


_AST_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<bundle>") -> ast.Module:
    """``ast.parse`` that is safe while other threads parse too (issue 8 item 9a).

    CPython 3.11.7 keeps the counter that ``ast.parse`` uses while it converts its C tree into
    Python objects in interpreter-wide state.  A garbage collection during that conversion can
    run finalizers (``__del__``, weakref callbacks), i.e. bytecode, so the GIL may pass to
    another thread; if that thread parses too, both share the counter and one of them fails with
    ``SystemError: AST constructor recursion depth mismatch``.  A lock alone serializes only the
    parses that take it (in-process tools, verifiers and synthesis code parse on their own), so
    the collector is also paused for the parse: no finalizer runs, nothing hands the GIL over,
    and this parse cannot be interleaved with any other.
    """
    with _AST_LOCK:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return ast.parse(source, filename=filename)
        finally:
            if enabled:
                gc.enable()


def _defined_functions(root: Path, file: str) -> dict[str, ast.FunctionDef]:
    """Top-level functions of a bundle module, parsed (never executed) on the host."""
    try:
        source = _read_nofollow(root, file).decode()
        tree = parse_python(source, filename=file)
    except SyntaxError as exc:
        raise BundleError(file, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise BundleError(file, f"not UTF-8 text: {exc}") from None
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if file == "tools.py":
        for name, node in funcs.items():
            if name.startswith("_"):
                continue
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if arg.annotation is None:
                    raise BundleError(
                        file,
                        f"tool {name!r} (line {node.lineno}): parameter {arg.arg!r} has no type hint",
                        field=name,
                    )
            if args.vararg or args.kwarg:
                raise BundleError(file, f"tool {name!r}: *args/**kwargs cannot be described to a model", field=name)
    return funcs


def _load_tasks(path: Path, functions: Mapping[str, Mapping[str, ast.FunctionDef]]) -> tuple[Task, ...]:
    tasks: list[Task] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BundleError(TASKS, f"not valid JSON: {exc}", field=where) from None
        try:
            _validate(data, "task", TASKS)
        except BundleError as exc:
            raise BundleError(TASKS, str(exc).split(": ", 2)[-1], field=f"{where}.{exc.field}") from None
        task = Task(
            id=data["id"],
            prompt=data["prompt"],
            solution=data["solution"],
            verifier=data["verifier"],
            difficulty=data.get("difficulty", 1),
            submit_tool=data.get("submit_tool", "submit_result"),
            system_prompt=data.get("system_prompt"),
            metadata=data.get("metadata", {}),
            witnesses=tuple(Witness(w["rule"], w["submission"], w.get("note", ""))
                            for w in data.get("witnesses", ())),
            baseline=data.get("baseline"),
        )
        if task.id in seen:
            raise BundleError(TASKS, f"duplicate task id {task.id!r}", field=f"{where}.id")
        seen.add(task.id)
        for key, file in (("solution", "solution.py"), ("verifier", "verifier.py"), ("baseline", "solution.py")):
            fn = getattr(task, key)
            if fn is not None and fn not in functions[file]:
                raise BundleError(TASKS, f"{file} defines no function {fn!r}", field=f"{where}.{key}")
        if task.submit_tool is not None and task.submit_tool not in functions["tools.py"]:
            raise BundleError(TASKS, f"tools.py defines no tool {task.submit_tool!r}", field=f"{where}.submit_tool")
        tasks.append(task)
    if not tasks:
        raise BundleError(TASKS, "the bundle has no tasks")
    return tuple(tasks)
