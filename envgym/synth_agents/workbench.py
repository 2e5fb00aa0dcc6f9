"""The LLM agent's sandbox: a private workspace, a bash tool and file tools, all in bubblewrap.

DeepSeek-V3.2 §3.2.3 gives the synthesis agent "a sandbox equipped with a bash and a search
tool" to generate or retrieve data and store it in the sandbox database.  Here the workspace is
a host directory mounted as the sandbox's only writable path; the tools are bundle tools of a
small built-in *workbench bundle* run by envgym's own sandbox (same isolation, limits, timeouts
and crash recovery as any bundle code): ``bash`` runs ``/bin/bash -c`` in the workspace with no
network, ``write_file``/``read_file``/``list_files`` stay inside it.  The search tool is not
here: it reads host-side corpora (:mod:`envgym.synth_agents.search`) and runs in the agent.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from envgym.sandbox import CallOutcome, Limits, Sandbox, ToolSpec, open_sandbox

TOOLS_SOURCE = '''"""Workbench tools: the synthesis agent's shell and files, inside its workspace."""

import os
import subprocess

from envgym.runtime import state_dir

_MAX = 6000


def _inside(path: str) -> str:
    root = os.path.realpath(str(state_dir()))
    full = os.path.realpath(os.path.join(root, path))
    if full != root and not full.startswith(root + os.sep):
        raise ValueError(f"{path!r} is outside the workspace")
    return full


def bash(command: str, timeout_s: int = 20) -> dict:
    """Run a bash command in the workspace (no network); returns exit code, stdout and stderr.

    Args:
        command: The command line, e.g. "python3 make_db.py" or "sqlite3 db.sqlite .tables".
        timeout_s: Seconds before the command is stopped (at most 25).
    """
    try:
        done = subprocess.run(["/bin/bash", "-c", command], cwd=str(state_dir()), capture_output=True,
                              text=True, timeout=max(1, min(int(timeout_s), 25)),
                              env={"PATH": "/usr/bin:/bin", "HOME": str(state_dir()), "LANG": "C.UTF-8"})
    except subprocess.TimeoutExpired:
        return {"exit_code": -1, "stdout": "", "stderr": f"timed out after {timeout_s} s"}
    return {"exit_code": done.returncode, "stdout": done.stdout[-_MAX:], "stderr": done.stderr[-_MAX:]}


def write_file(path: str, content: str) -> str:
    """Write a text file in the workspace (creating folders).

    Args:
        path: Relative path, e.g. "make_db.py".
        content: The whole file.
    """
    full = _inside(path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as fh:
        fh.write(content)
    return f"wrote {len(content)} characters to {path}"


def read_file(path: str) -> str:
    """Read a text file of the workspace (the first 6000 characters).

    Args:
        path: Relative path.
    """
    with open(_inside(path), encoding="utf-8", errors="replace") as fh:
        return fh.read(_MAX)


def list_files() -> list:
    """Every file in the workspace, with its size in bytes."""
    root = str(state_dir())
    out = []
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            full = os.path.join(folder, name)
            out.append({"path": os.path.relpath(full, root), "bytes": os.path.getsize(full)})
    return out
'''


class Workbench:
    """A workspace directory and the sandbox whose tools act on it.  Close it when done."""

    def __init__(
        self, workspace: Path, *, sandbox: str = "bwrap", call_timeout_s: float = 30.0
    ) -> None:
        self.workspace = Path(workspace)
        self.workspace.mkdir(parents=True, exist_ok=True)
        # bwrap enters it as root without CAP_DAC_OVERRIDE before dropping to the worker's uid.
        self.workspace.chmod(0o755)
        self._code = Path(tempfile.mkdtemp(prefix="envgym-workbench-"))
        (self._code / "tools.py").write_text(TOOLS_SOURCE)
        self.box: Sandbox = open_sandbox(
            self._code, backend=sandbox, limits=Limits(call_timeout_s=call_timeout_s)
        )
        self.specs: list[ToolSpec] = self.box.describe_tools()
        self.box.reset(self.workspace)

    def call(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        return self.box.call_tool(name, arguments)

    def run_python(self, source: str, filename: str = "make_data.py") -> CallOutcome:
        """Write ``source`` into the workspace and run it with the sandbox's python3."""
        written = self.call("write_file", {"path": filename, "content": source})
        if not written.ok:
            return written
        return self.call("bash", {"command": f"python3 {filename}", "timeout_s": 25})

    def close(self) -> None:
        self.box.close()
        shutil.rmtree(self._code, ignore_errors=True)

    def __enter__(self) -> Workbench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
