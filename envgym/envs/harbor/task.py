"""A Harbor task directory, read into memory: ``load_task(path) -> HarborTask``.

Harbor's layout (laude-institute/harbor, ``harbor.models.task``)::

    task.toml          [metadata], [verifier] timeout_sec/env, [agent] timeout_sec,
                       [environment] build_timeout_sec/cpus/memory_mb/storage_mb/workdir/...,
                       [solution] env, optional [task] name = "org/name"
    instruction.md     what the agent reads
    environment/       the Dockerfile and the files it COPYs
    tests/test.sh      the verifier: writes a number to /logs/verifier/reward.txt
    solution/solve.sh  the oracle

An imported task directory is hostile.  Nothing here runs any of it: files are read relative to
directory descriptors without following a link at any level (a link is refused, not read), only
regular files, each size, the total, the entry count and the depth bounded before reading
(``envgym.bundle_limits``), TOML and text decoded strictly, every value type-checked, and the
task id validated.  The whole task is held in memory, so a later change on disk cannot swap what
was checked for something else.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from envgym.bundle_limits import (
    MIB,
    BundleError,
    BundleLimits,
    json_depth,
    open_file,
    read_fd,
    read_tree,
)

__all__ = [
    "HarborTask",
    "HarborTaskError",
    "TaskFiles",
    "TaskLimits",
    "TASK_ID",
    "is_task_dir",
    "load_task",
    "load_tasks",
]

TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_TEXT = 1 * MIB  # task.toml, instruction.md, the Dockerfile
MAX_TREE = 64 * MIB  # each of environment/, tests/, solution/: held in memory
MAX_TASKS = 10_000  # task directories in one dataset directory
_LIMITS = BundleLimits(file_bytes=MAX_TREE, state_bytes=MAX_TREE, entries=10_000, dir_depth=16)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class HarborTaskError(ValueError):
    """A task directory that cannot be imported; the message names the file and what is wrong."""

    def __init__(self, where: str | Path, message: str) -> None:
        self.where = str(where)
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class TaskLimits:
    """task.toml's time and resource limits (seconds, MiB); None: not set."""

    agent_timeout_s: float | None = None
    verifier_timeout_s: float = 600.0
    build_timeout_s: float = 600.0
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None


@dataclass(frozen=True)
class TaskFiles:
    """A directory's files in memory: ``rel -> (bytes, permission bits)``; ``dirs``: its folders."""

    files: Mapping[str, tuple[bytes, int]] = field(default_factory=lambda: MappingProxyType({}))
    dirs: tuple[str, ...] = ()

    def text(self, rel: str) -> str | None:
        found = self.files.get(rel)
        return None if found is None else found[0].decode("utf-8", errors="replace")


@dataclass(frozen=True)
class HarborTask:
    """One Harbor task, validated and held in memory."""

    id: str
    root: Path
    instruction: str
    limits: TaskLimits
    metadata: Mapping[str, Any]
    dockerfile: str | None
    docker_image: str | None
    workdir: str | None  # [environment].workdir: overrides the Dockerfile's WORKDIR
    network: bool  # [environment] asks for network access
    env: Mapping[str, str]  # [environment].env
    verifier_env: Mapping[str, str]
    solution_env: Mapping[str, str]
    environment: TaskFiles
    tests: TaskFiles
    solution: TaskFiles
    toml_text: str = ""

    @property
    def has_solution(self) -> bool:
        return "solve.sh" in self.solution.files


def is_task_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a task.toml (a regular file, not a link): a task, not a dataset."""
    try:
        return (
            os.stat(Path(path) / "task.toml", follow_symlinks=False).st_mode & 0o170000 == 0o100000
        )
    except OSError:
        return False


def load_tasks(path: str | os.PathLike[str]) -> list[HarborTask]:
    """The task at ``path``, or every task directory directly under a dataset directory
    (sorted by name; an entry that is a link is refused, entries without task.toml skipped)."""
    root = Path(path)
    if is_task_dir(root):
        return [load_task(root)]
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        raise HarborTaskError(root, f"not a task or dataset directory ({exc.strerror})") from None
    tasks: list[HarborTask] = []
    for name in names:
        entry = root / name
        st = os.stat(entry, follow_symlinks=False)
        if (st.st_mode & 0o170000) == 0o120000:
            raise HarborTaskError(entry, "is a symbolic link; links in a dataset are not followed")
        if (st.st_mode & 0o170000) == 0o040000 and is_task_dir(entry):
            tasks.append(load_task(entry))
            if len(tasks) > MAX_TASKS:
                raise HarborTaskError(root, f"more than {MAX_TASKS} tasks")
    if not tasks:
        raise HarborTaskError(root, "holds no task directory (no task.toml here or one level down)")
    ids = [t.id for t in tasks]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise HarborTaskError(root, f"task ids occur twice: {', '.join(dup)}")
    return tasks


def load_task(path: str | os.PathLike[str]) -> HarborTask:
    """Read and validate the Harbor task directory ``path`` (see the module docstring)."""
    root = Path(path)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise HarborTaskError(
            root, f"cannot open the task directory ({exc.strerror}; links are not followed)"
        ) from None
    try:
        toml_text = _read_text(fd, root, "task.toml", required=True) or ""
        instruction = _read_text(fd, root, "instruction.md", required=True) or ""
        dockerfile = _read_text(fd, root, "environment/Dockerfile", required=False)
    finally:
        os.close(fd)
    if json_depth(toml_text, stop_above=32) > 32:  # tomllib recurses on nested arrays
        raise HarborTaskError(root / "task.toml", "nested too deeply")
    try:
        data = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError as exc:
        raise HarborTaskError(root / "task.toml", f"not valid TOML: {exc}") from None
    where = root / "task.toml"
    if data.get("steps"):
        raise HarborTaskError(where, "multi-step tasks ([[steps]]) are not supported")
    task_id = _task_id(root, data, where)
    env_table = _table(data, "environment", where)
    if str(env_table.get("os", "linux")).lower() != "linux":
        raise HarborTaskError(where, "[environment].os: only linux tasks are supported")
    tests = _tree(root, "tests")
    if "test.sh" not in tests.files:
        raise HarborTaskError(root / "tests", "has no test.sh (the verifier)")
    return HarborTask(
        id=task_id,
        root=root,
        instruction=_strip_canary(instruction),
        limits=_limits(data, where),
        metadata=MappingProxyType(dict(_table(data, "metadata", where))),
        dockerfile=dockerfile,
        docker_image=_opt_str(env_table, "docker_image", where),
        workdir=_workdir(env_table, where),
        network=_network(env_table),
        env=_env(env_table, "environment", where),
        verifier_env=_env(_table(data, "verifier", where), "verifier", where),
        solution_env=_env(_table(data, "solution", where), "solution", where),
        environment=_tree(root, "environment"),
        tests=tests,
        solution=_tree(root, "solution"),
        toml_text=toml_text,
    )


# -- pieces ------------------------------------------------------------------------------------


def _read_text(fd: int, root: Path, rel: str, *, required: bool) -> str | None:
    try:
        handle = open_file(fd, rel, rel)
    except BundleError as exc:
        if "No such file" in str(exc):
            if required:
                raise HarborTaskError(root / rel, "is missing") from None
            return None
        raise HarborTaskError(root, str(exc)) from None
    try:
        data = read_fd(handle, rel, BundleLimits(file_bytes=MAX_TEXT), "file_bytes")
    except BundleError as exc:
        raise HarborTaskError(root, str(exc)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarborTaskError(
            root / rel, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


def _tree(root: Path, name: str) -> TaskFiles:
    path = root / name
    if not os.path.lexists(path):
        return TaskFiles()
    try:
        entries = read_tree(path, _LIMITS, where=name)
    except BundleError as exc:
        raise HarborTaskError(root, str(exc)) from None
    # an installed copy's byte-compiled .py files (pip writes __pycache__ beside every .py of a
    # wheel, data included) are not the task's: a tree the solution counts must not grow them
    entries = [e for e in entries if "__pycache__" not in e[0].split("/")]
    files = {rel: (data, mode) for rel, data, mode in entries if data is not None}
    dirs = tuple(rel for rel, data, _ in entries if data is None)
    return TaskFiles(MappingProxyType(files), dirs)


def _table(data: Mapping[str, Any], name: str, where: Path) -> Mapping[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise HarborTaskError(where, f"[{name}] is not a table")
    return value


def _task_id(root: Path, data: Mapping[str, Any], where: Path) -> str:
    task = _table(data, "task", where)
    name = task.get("name")
    if name is None:
        candidate = root.resolve().name
    elif isinstance(name, str) and name.count("/") == 1:
        candidate = name.split("/")[1]
    else:
        raise HarborTaskError(where, f"[task].name must be 'org/name', got {name!r}")
    if not TASK_ID.match(candidate) or ".." in candidate:
        raise HarborTaskError(
            where, f"task id {candidate!r} is not a plain name (letters, digits, '.', '_', '-')"
        )
    return candidate


def _number(table: Mapping[str, Any], key: str, where: Path, section: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise HarborTaskError(where, f"[{section}].{key} must be a positive number, got {value!r}")
    return float(value)


def _limits(data: Mapping[str, Any], where: Path) -> TaskLimits:
    agent, verifier, env = (_table(data, n, where) for n in ("agent", "verifier", "environment"))
    memory = _number(env, "memory_mb", where, "environment")
    storage = _number(env, "storage_mb", where, "environment")
    gpus = env.get("gpus")
    if gpus not in (None, 0):
        raise HarborTaskError(where, f"[environment].gpus = {gpus!r}: GPU tasks are not supported")
    return TaskLimits(
        agent_timeout_s=_number(agent, "timeout_sec", where, "agent"),
        verifier_timeout_s=_number(verifier, "timeout_sec", where, "verifier") or 600.0,
        build_timeout_s=_number(env, "build_timeout_sec", where, "environment") or 600.0,
        cpus=_number(env, "cpus", where, "environment"),
        memory_mb=None if memory is None else int(memory),
        storage_mb=None if storage is None else int(storage),
    )


def _opt_str(table: Mapping[str, Any], key: str, where: Path) -> str | None:
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise HarborTaskError(where, f"{key} must be a string, got {value!r}")
    return value


def _workdir(env: Mapping[str, Any], where: Path) -> str | None:
    value = _opt_str(env, "workdir", where)
    if value is not None and (not value.startswith("/") or "\0" in value or "\n" in value):
        raise HarborTaskError(
            where, f"[environment].workdir must be an absolute path, got {value!r}"
        )
    return value


def _network(env: Mapping[str, Any]) -> bool:
    mode = env.get("network_mode")
    if mode is not None:
        return str(mode).lower() not in ("no_network", "no-network", "none")
    return bool(env.get("allow_internet", False))


def _env(table: Mapping[str, Any], section: str, where: Path) -> Mapping[str, str]:
    value = table.get("env", {})
    if not isinstance(value, dict):
        raise HarborTaskError(where, f"[{section}].env is not a table")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not _ENV_NAME.match(key) or not isinstance(item, str) or "\0" in item:
            raise HarborTaskError(
                where, f'[{section}].env: {key!r} = {item!r} is not a NAME = "text" pair'
            )
        out[key] = item
    return MappingProxyType(out)


_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


def _strip_canary(text: str) -> str:
    """The instruction without leading canary comment lines (provenance markers, as Harbor
    strips them before an agent sees the text)."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and _CANARY.match(lines[start].strip()):
        start += 1
    while start < len(lines) and not lines[start].strip():
        start += 1
    return "\n".join(lines[start:])
