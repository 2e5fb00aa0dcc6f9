"""A general-agent bundle's tasks as Harbor task directories, one per task.

Layout of one exported task (Harbor's task format; docs/HARBOR.md, "Export")::

    task.toml                 version, [metadata] (ids, bundle hash, difficulty), timeouts
    instruction.md            the task's system prompt and prompt, then how to use envgym-tool
    environment/Dockerfile    python:3.11-slim + the tool CLI at /envgym, the state at /app
    environment/envgym/       what the Dockerfile copies to /envgym: bin/envgym-tool,
                              lib/envgym/ (the sandbox worker's stdlib-only modules), bundle/
                              (tools.py, tools.json), task.json (id and submit tool only)
    environment/app/          the bundle's state/ (the episode's files, the working directory)
    solution/solve.sh         runs solution.py's gold function through the same tools
    solution/{solution.py,task.json}
    tests/test.sh             runs the verifier on the recorded submission, writes
                              /logs/verifier/reward.txt (1 passed, 0 not) and report.json
    tests/{verifier.py,task.json}

Injection-safe by construction: no id, prompt or other value of the bundle is written into
shell or Dockerfile text at all — those files are fixed texts; values travel in JSON files
(task.json) read by envgym-tool, in instruction.md as plain text, and in task.toml through
`quoting.toml_value`.  The verifier, the task's metadata (which may hold the answer) and the
gold solution are only in tests/ and solution/, which Harbor copies into the container for the
verifier and the oracle, never for the agent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.bundle import Bundle, load_bundle
from envgym.envs.harbor_export.quoting import dir_name, toml_document
from envgym.sandbox.worker_stage import PACKAGE_DIR  # the installed envgym package

__all__ = ["HarborTaskOptions", "export_bundle", "instruction_text"]

# The sandbox worker's modules (envgym/sandbox/worker_stage.py), minus the worker scripts, plus
# verdict.py (sandbox/base.py imports it; envgym-tool scores reports with it).  All stdlib-only.
LIB_MODULES = ("runtime.py", "tool_schema.py", "verdict.py", "sandbox/base.py", "sandbox/runner.py")
_CLI = Path(__file__).with_name("task_cli.py")
_HASH = re.compile(r"sha256:[0-9a-f]{64}")
# Categories whose tools' stand-ins or gold code import more than the standard library.
_PIP = {"code interpreter": ("numpy", "pandas", "sympy")}


@dataclass(frozen=True)
class HarborTaskOptions:
    agent_timeout_s: float = 1800.0
    verifier_timeout_s: float = 300.0
    build_timeout_s: float = 900.0
    cpus: int = 1
    memory_mb: int = 2048
    storage_mb: int = 4096


SOLVE_SH = """#!/bin/bash
# The bundle's gold solution, replayed through the task's tools (envgym-tool).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 /envgym/bin/envgym-tool _solve "$here/solution.py" "$here/task.json"
"""

TEST_SH = """#!/bin/bash
# The bundle's verifier on the submission the agent made; 1 when every check passes, else 0.
set -uo pipefail
mkdir -p /logs/verifier
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if python3 /envgym/bin/envgym-tool _verify "$here/verifier.py" "$here/task.json" \\
    /logs/verifier/report.json; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def dockerfile(category: str) -> str:
    lines = [
        "# An envgym bundle task: the tools as envgym-tool, the episode state in /app.",
        "FROM python:3.11-slim",
    ]
    packages = _PIP.get(category)
    if packages:
        lines.append("RUN pip install --no-cache-dir " + " ".join(packages))
    lines += [
        "COPY envgym/ /envgym/",
        "COPY app/ /app/",
        "RUN chmod 755 /envgym/bin/envgym-tool && mkdir -p /envgym/run",
        "ENV PATH=/envgym/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ENVGYM_HOME=/envgym ENVGYM_STATE=/app",
        "WORKDIR /app",
        "",
    ]
    return "\n".join(lines)


def instruction_text(task: dict[str, Any]) -> str:
    """What the agent reads: the system prompt, the prompt, then how to act and submit."""
    parts = []
    if task.get("system_prompt"):
        parts.append(str(task["system_prompt"]).strip())
    parts.append(str(task["prompt"]).strip())
    how = [
        "## Tools",
        "",
        "This task's tools are a command line, `envgym-tool`, in the container:",
        "",
        "- `envgym-tool list` prints every tool with its description and JSON parameters;",
        '- `envgym-tool call NAME \'{"parameter": "value"}\'` calls one tool (arguments: one '
        "JSON object; `-` reads it from standard input) and prints its result.",
        "",
        "The files in the working directory (`/app`) are the environment's state; use the tools "
        "to work with it.",
    ]
    submit = task.get("submit_tool")
    if submit:
        how.append(
            f"Finish by calling the `{submit}` tool once: its arguments are your submission, "
            "and no tool can be called after it."
        )
    else:
        how.append(
            "Finish with `envgym-tool answer 'YOUR FINAL ANSWER'`: that text is graded, once."
        )
    parts.append("\n".join(how))
    return "\n\n".join(parts) + "\n"


def _task_toml(bundle: Bundle, task: dict[str, Any], options: HarborTaskOptions) -> str:
    manifest = bundle.manifest
    metadata = {
        "author_name": "envgym",
        "category": manifest.category,
        "tags": ["envgym", manifest.name],
        "difficulty": int(task.get("difficulty", 1)),
        "envgym_task_id": str(task["id"]),
        "envgym_bundle": manifest.name,
        "envgym_bundle_hash": manifest.content_hash,
    }
    return toml_document(
        {"version": "1.0"},
        {
            "metadata": metadata,
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


def _write(path: Path, text: str, *, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="")
    path.chmod(0o755 if executable else 0o644)


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target, follow_symlinks=False)
    target.chmod(0o644)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1) + "\n"


def _copy_state(bundle: Bundle, target: Path) -> None:
    """The bundle's state/ files (regular files and folders only: load_bundle refused the rest)."""
    target.mkdir(parents=True)
    source = bundle.state_dir
    if not source.is_dir():
        return
    for path in sorted(source.rglob("*")):
        if path.is_symlink():  # checked at load; a link planted since is not followed
            raise ValueError(f"{path}: a symbolic link in the bundle's state")
        rel = path.relative_to(source)
        if path.is_dir():
            (target / rel).mkdir(parents=True, exist_ok=True)
        else:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target / rel, follow_symlinks=False)


def _environment(bundle: Bundle, task: dict[str, Any], root: Path) -> None:
    env = root / "environment"
    _write(env / "Dockerfile", dockerfile(bundle.manifest.category))
    home = env / "envgym"
    _write(home / "bin" / "envgym-tool", _CLI.read_text(encoding="utf-8"), executable=True)
    for rel in LIB_MODULES:
        _write(home / "lib" / "envgym" / rel, (PACKAGE_DIR / rel).read_text(encoding="utf-8"))
    for name in ("tools.py", "tools.json"):
        if (bundle.root / name).is_file():
            _copy(bundle.root / name, home / "bundle" / name)
    _write(home / "task.json", _json({"id": task["id"], "submit_tool": task.get("submit_tool")}))
    _copy_state(bundle, env / "app")


def export_task(
    bundle: Bundle, task: dict[str, Any], task_dir: Path, options: HarborTaskOptions
) -> Path:
    """Write one task directory (built aside, then renamed in place)."""
    task_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{task_dir.name}.", dir=task_dir.parent))
    try:
        _write(scratch / "task.toml", _task_toml(bundle, task, options))
        _write(scratch / "instruction.md", instruction_text(task))
        _environment(bundle, task, scratch)
        _write(scratch / "solution" / "solve.sh", SOLVE_SH, executable=True)
        _write(scratch / "solution" / "task.json", _json(task))
        _copy(bundle.root / "solution.py", scratch / "solution" / "solution.py")
        _write(scratch / "tests" / "test.sh", TEST_SH, executable=True)
        _write(scratch / "tests" / "task.json", _json(task))
        _copy(bundle.root / "verifier.py", scratch / "tests" / "verifier.py")
        if task_dir.exists():
            shutil.rmtree(task_dir)
        os.rename(scratch, task_dir)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    task_dir.chmod(0o755)
    return task_dir


def export_bundle(
    bundle_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    options: HarborTaskOptions | None = None,
    overwrite: bool = False,
    task_ids: list[str] | None = None,
) -> list[Path]:
    """One Harbor task directory per task of the bundle (or of `task_ids`) under `out_dir`."""
    options = options or HarborTaskOptions()
    bundle = load_bundle(Path(bundle_dir))  # validated, hashed, bounded (docs/BUNDLE.md)
    if not _HASH.fullmatch(bundle.manifest.content_hash):
        raise ValueError(f"{bundle.root}: the manifest's content_hash is not sha256:<64 hex>")
    tasks = [t.to_dict() for t in bundle.tasks]
    if task_ids is not None:
        known = {t["id"] for t in tasks}
        missing = [i for i in task_ids if i not in known]
        if missing:
            raise ValueError(f"{bundle.root}: no task {missing[0]!r} in the bundle")
        tasks = [t for t in tasks if t["id"] in set(task_ids)]
    out = Path(out_dir)
    targets = [out / dir_name(str(t["id"])) for t in tasks]
    if len(set(targets)) != len(targets):
        raise ValueError(f"{bundle.root}: two task ids map to one directory name")
    for target in targets:
        if target.exists() and not overwrite:
            raise FileExistsError(f"{target} exists (pass --overwrite to replace it)")
    return [export_task(bundle, t, d, options) for t, d in zip(tasks, targets)]
