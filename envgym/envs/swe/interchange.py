"""SWE-bench JSONL and Harbor task directories, both ways.

JSONL is `instance.py`'s format; the functions here are its public names for interchange.

A Harbor task (laude-institute/harbor, read by NeMo-Gym, rLLM, SkyRL, OpenEnv) is a directory::

    task.toml               version, [metadata], [verifier]/[agent] timeouts, [environment] resources
    instruction.md          what the agent reads: the problem statement, verbatim
    environment/Dockerfile  the repository at the base commit in /testbed, installed
    environment/repo.tar    (local repositories) a `git archive` snapshot of the base commit
    solution/solve.sh       the gold patch, embedded as a quoted heredoc, applied with git apply
    tests/test.sh           restores the test files, applies tests/test.patch, runs the
                            fail-to-pass and pass-to-pass tests, writes 1/0 to
                            /logs/verifier/reward.txt
    tests/test.patch        the hidden test patch
    tests/config.json       the whole instance as SWE-bench JSON (what Harbor's SWE-bench adapter
                            keeps there too), so that import is lossless

Harbor copies `tests/` into the container only for verification, so the agent never sees the
hidden tests or the instance record.  The container repository's base is tagged `envgym-base`
(a bundled snapshot gets a new commit; a fetched one keeps its sha), which is what test.sh
restores test files from.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from envgym.envs.swe.harbor_text import (
    WORKDIR,
    check_exportable,
    dockerfile,
    solve_sh,
    task_toml,
    test_sh,
)
from envgym.envs.swe.harbor_text import toml_value as _toml_value
from envgym.envs.swe.instance import (
    InstanceError,
    SweInstance,
    from_record,
    read_instances,
    to_record,
    write_instances,
)
from envgym.envs.swe.repo import git, open_source
from envgym.envs.swe.task_files import list_dirs, open_dir, read_text

__all__ = [
    "CONFIG",
    "WORKDIR",
    "HarborOptions",
    "_toml_value",
    "export_harbor",
    "export_harbor_task",
    "export_jsonl",
    "import_harbor",
    "import_harbor_dir",
    "import_jsonl",
    "task_name",
]

CONFIG = "tests/config.json"
MAX_TOML = 1024 * 1024


def import_jsonl(path: str | os.PathLike[str]) -> list[SweInstance]:
    """Instances of a SWE-bench JSONL file (see `instance.read_instances`)."""
    return read_instances(path)


def export_jsonl(path: str | os.PathLike[str], instances: Iterable[SweInstance]) -> Path:
    """Write instances as SWE-bench JSONL (see `instance.write_instances`)."""
    return write_instances(path, instances)


@dataclass(frozen=True)
class HarborOptions:
    python_image: str = "python:3.11-slim"  # metadata["recipe"]["python"] picks python:<v>-slim
    agent_timeout_s: float = 3600.0
    verifier_timeout_s: float = 1800.0
    build_timeout_s: float = 1800.0
    cpus: int = 2
    memory_mb: int = 4096
    storage_mb: int = 10240
    bundle_repo: bool | None = None  # None: bundle local repositories, fetch URLs in the build


def task_name(instance_id: str) -> str:
    """A directory name for an instance id (path separators and odd characters replaced)."""
    return re.sub(r"[^\w.-]", "_", instance_id).strip(".") or "task"


def export_harbor(
    instances: Iterable[SweInstance],
    out_dir: str | os.PathLike[str],
    *,
    options: HarborOptions | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """One Harbor task directory per instance under `out_dir`; their paths, in order."""
    return [
        export_harbor_task(
            i, Path(out_dir) / task_name(i.instance_id), options=options, overwrite=overwrite
        )
        for i in instances
    ]


def export_harbor_task(
    instance: SweInstance,
    task_dir: str | os.PathLike[str],
    *,
    options: HarborOptions | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `instance` as the Harbor task directory `task_dir` (built aside, then renamed in)."""
    options = options or HarborOptions()
    task_dir = Path(task_dir).resolve()  # git archive -o runs in the source's view
    if task_dir.exists() and not overwrite:
        raise FileExistsError(f"{task_dir} exists (pass overwrite=True to replace it)")
    record = to_record(instance)  # raises early on metadata that would not round-trip
    check_exportable(instance)
    task_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{task_dir.name}.", dir=task_dir.parent))
    try:
        for sub in ("environment", "solution", "tests"):
            (scratch / sub).mkdir()
        bundled = _wants_bundle(instance, options)
        docker = dockerfile(instance, options.python_image, bundled)  # refusals before git runs
        if bundled:
            # In a view of ours: the source's config (a smudge filter `git archive` would run)
            # is never read, and the view's attributes keep the tree's bytes (no export-ignore).
            with open_source(instance) as view:
                git(
                    [
                        "archive",
                        "--format=tar",
                        "-o",
                        str(scratch / "environment" / "repo.tar"),
                        "--end-of-options",
                        instance.base_commit,
                    ],
                    cwd=view,
                )
        _write(scratch / "task.toml", _task_toml(instance, options))
        _write(scratch / "instruction.md", instance.problem_statement)
        _write(scratch / "environment" / "Dockerfile", docker)
        _write(scratch / "solution" / "solve.sh", solve_sh(instance.patch), executable=True)
        _write(scratch / "tests" / "test.sh", test_sh(instance), executable=True)
        _write(scratch / "tests" / "test.patch", instance.test_patch)
        _write(scratch / CONFIG, json.dumps(record, ensure_ascii=False, indent=1) + "\n")
        if task_dir.exists():
            shutil.rmtree(task_dir)
        os.rename(scratch, task_dir)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    task_dir.chmod(0o755)
    return task_dir


def _write(path: Path, text: str, *, executable: bool = False) -> None:
    path.write_text(text, encoding="utf-8", newline="")
    if executable:
        path.chmod(0o755)


def _is_local(instance: SweInstance) -> bool:
    repo = instance.repo_url or instance.repo
    return repo.startswith("file://") or (not instance.repo_url and Path(instance.repo).exists())


def _wants_bundle(instance: SweInstance, options: HarborOptions) -> bool:
    return _is_local(instance) if options.bundle_repo is None else options.bundle_repo


def _task_toml(instance: SweInstance, options: HarborOptions) -> str:
    return task_toml(
        instance,
        {
            "verifier": {"timeout_sec": float(options.verifier_timeout_s)},
            "agent": {"timeout_sec": float(options.agent_timeout_s)},
            "environment": {
                "build_timeout_sec": float(options.build_timeout_s),
                "cpus": options.cpus,
                "memory_mb": options.memory_mb,
                "storage_mb": options.storage_mb,
            },
        },
    )


def import_harbor(task_dir: str | os.PathLike[str]) -> SweInstance:
    """The instance a Harbor task directory describes.

    Our own exports (and SWE-bench adapters' tasks) carry ``tests/config.json``, read losslessly.
    Without it the instance is pieced together from ``task.toml`` ``[metadata]`` (repo,
    base_commit, instance_id), ``instruction.md``, the heredoc of ``solution/solve.sh`` and
    ``tests/test.patch``; what is missing raises `InstanceError` naming the file.  Files are read
    without following links, only regular ones, bounded (`envgym/envs/swe/task_files.py`).
    """
    task_dir = Path(task_dir)
    with open_dir(task_dir) as fd:
        return _import_task(fd, task_dir)


def _import_task(fd: int, task_dir: Path) -> SweInstance:
    instruction = read_text(fd, "instruction.md", where=task_dir)
    config_text = read_text(fd, CONFIG, where=task_dir)
    if config_text is not None:
        config = task_dir / CONFIG
        try:
            record = json.loads(config_text)
        except json.JSONDecodeError as exc:
            raise InstanceError(f"not valid JSON: {exc}", where=str(config)) from None
        except RecursionError:
            raise InstanceError("not valid JSON: nested too deeply", where=str(config)) from None
        if (
            isinstance(record, dict)
            and "problem_statement" not in record
            and instruction is not None
        ):
            record["problem_statement"] = instruction
        return from_record(record, where=str(config))
    return _import_foreign(fd, task_dir, instruction)


def _import_foreign(fd: int, task_dir: Path, instruction: str | None) -> SweInstance:
    toml_path = task_dir / "task.toml"
    toml_text = read_text(fd, "task.toml", where=task_dir, limit=MAX_TOML)
    for name, text in (("task.toml", toml_text), ("instruction.md", instruction)):
        if text is None:
            raise InstanceError(
                f"missing {name} (and no {CONFIG})", where=str(task_dir), field=name
            )
    try:
        meta = tomllib.loads(toml_text or "").get("metadata", {})
    except tomllib.TOMLDecodeError as exc:
        raise InstanceError(f"not valid TOML: {exc}", where=str(toml_path)) from None
    except RecursionError:
        raise InstanceError("not valid TOML: nested too deeply", where=str(toml_path)) from None
    if not isinstance(meta, dict):
        raise InstanceError("[metadata] is not a table", where=str(toml_path), field="metadata")
    missing = [k for k in ("repo", "base_commit") if not isinstance(meta.get(k), str)]
    if missing:
        raise InstanceError(
            f"missing {CONFIG}, and task.toml [metadata] lacks {missing}",
            where=str(task_dir),
            field=missing[0],
        )
    solve = read_text(fd, "solution/solve.sh", where=task_dir)
    patch = ""
    if solve is not None:
        found = re.search(r"<<'(\w+)'\n(.*?\n)\1\n", solve, re.DOTALL)
        patch = found.group(2) if found else ""
    test_patch = read_text(fd, "tests/test.patch", where=task_dir)
    record = {
        "instance_id": meta.get("instance_id") or task_dir.name,
        "repo": meta["repo"],
        "base_commit": meta["base_commit"],
        "problem_statement": instruction,
        "patch": patch,
        "test_patch": test_patch or "",
        "FAIL_TO_PASS": meta.get("FAIL_TO_PASS"),
        "PASS_TO_PASS": meta.get("PASS_TO_PASS"),
    }
    return from_record(record, where=str(toml_path))


def import_harbor_dir(root: str | os.PathLike[str]) -> list[SweInstance]:
    """Every task directory directly under `root` (those with a task.toml), sorted by name; an
    entry of `root` that is a link is refused, not followed."""
    root = Path(root)
    if not root.is_dir():
        raise InstanceError("no such directory", where=str(root))
    found: list[SweInstance] = []
    with open_dir(root) as root_fd:
        for name in list_dirs(root_fd, where=root):
            with open_dir(root / name, parent_fd=root_fd) as fd:
                if read_text(fd, "task.toml", where=root / name, limit=MAX_TOML) is not None:
                    found.append(_import_task(fd, root / name))
    return found
