"""The Harbor agent's tools: a shell and two file tools, all run inside the episode's jail.

Harbor gives an agent a terminal in the task's container; here each call is one fresh jail over
the episode's directories (``runtime.Episode``): ``bash`` runs the command, ``read_file`` and
``write_file`` run a tiny stdlib script there, so the host never opens a path the agent names
(a link the agent planted resolves inside the jail, to what the jail can see).  A call never
raises on agent input: every mistake is an ``Error: ...`` reply.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from envgym.dispatch import ToolTable
from envgym.envs.harbor.runtime import Episode, TaskRuntime
from envgym.envs.swe.agent_tools import cap
from envgym.tool_schema import function_schema

SUBMIT = "submit"
MAX_WRITE_CHARS = 100_000  # one argv string (Linux caps a single argument at 128 KiB)
OUTPUT_CHARS = 12_000

_READ = r"""
import sys
path, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, encoding="utf-8", errors="replace") as fh:
    lines = fh.read(4_000_000).splitlines()
end = len(lines) if end < 0 else min(end, len(lines))
for n in range(max(start, 1), end + 1):
    print(f"{n:6}\t{lines[n - 1]}")
"""
_WRITE = r"""
import os, sys
path = sys.argv[1]
os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
with open(path, "w", encoding="utf-8") as fh:
    fh.write(sys.argv[2])
print(f"wrote {len(sys.argv[2])} characters to {path}")
"""


def bash(command: str) -> str:
    """Run a shell command (bash) in the task's environment, without network access. Each call is a fresh shell started in the working directory (`cd` and variables do not carry over; files do); commands are stopped after a time limit.

    Args:
        command: the command line, e.g. "ls -la && head -n 20 data.csv".
    """
    raise NotImplementedError


def read_file(path: str, start_line: int | None = None, end_line: int | None = None) -> str:
    """Show a text file with line numbers.

    Args:
        path: absolute, or relative to the working directory.
        start_line: first line to show (from 1).
        end_line: last line to show; -1 for the end of the file.
    """
    raise NotImplementedError


def write_file(path: str, content: str) -> str:
    """Create a file (or overwrite it) with the given content; missing directories are made.

    Args:
        path: absolute, or relative to the working directory.
        content: the whole new content of the file.
    """
    raise NotImplementedError


def submit() -> str:
    """Declare the task done: the episode ends and the task's tests judge the environment as it is now."""
    raise NotImplementedError


def tool_table() -> ToolTable:
    return ToolTable([function_schema(fn) for fn in (bash, read_file, write_file, submit)])


@dataclass(frozen=True)
class Reply:
    content: str
    error: str | None = None


class HarborTools:
    """Runs one episode's calls (``runtime`` and ``episode``: where and how)."""

    def __init__(self, runtime: TaskRuntime, episode: Episode, *, timeout_s: float = 120.0) -> None:
        self.runtime = runtime
        self.episode = episode
        self.timeout_s = timeout_s
        self.table = tool_table()

    def call(self, name: str, arguments: Any, *, time_left_s: float | None = None) -> Reply:
        problem = self.table.check(name, arguments)
        if problem is not None:
            return Reply(
                f"Error: {problem}",
                "unknown_tool" if name not in self.table.specs else "bad_arguments",
            )
        if name == SUBMIT:
            return Reply("Submitted. The task's tests will now judge the environment.")
        timeout = (
            self.timeout_s if time_left_s is None else max(min(self.timeout_s, time_left_s), 1.0)
        )
        try:
            if name == "bash":
                if not arguments["command"].strip():
                    return Reply("Error: the command is empty", "bad_arguments")
                return self._shell(arguments["command"], timeout)
            if name == "read_file":
                start = arguments.get("start_line") or 1
                end = arguments.get("end_line")
                script = f"python3 -c {shlex.quote(_READ)} {shlex.quote(arguments['path'])} {int(start)} {-1 if end is None else int(end)}"
                return self._shell(script, timeout, show_exit=False)
            content = arguments["content"]
            if len(content) > MAX_WRITE_CHARS:
                return Reply(
                    f"Error: content is over {MAX_WRITE_CHARS} characters; write it in parts (bash >>)",
                    "bad_arguments",
                )
            script = f"python3 -c {shlex.quote(_WRITE)} {shlex.quote(arguments['path'])} {shlex.quote(content)}"
            return self._shell(script, timeout, show_exit=False)
        except Exception as err:  # noqa: BLE001 - a tool bug must not end the episode; counted
            return Reply(
                f"Error: {name} could not be run ({type(err).__name__}: {err})", "internal_error"
            )

    def _shell(self, command: str, timeout: float, *, show_exit: bool = True) -> Reply:
        result = self.runtime.run(self.episode, command, timeout_s=timeout)
        text = result.stdout
        if result.stderr:
            text += ("" if not text or text.endswith("\n") else "\n") + result.stderr
        text = cap(text, OUTPUT_CHARS)
        if result.timed_out:
            return Reply(f"{text}\n[killed: the command ran over {timeout:g} s]", "timeout")
        if result.returncode is None:
            return Reply(f"Error: the command could not run: {result.error}", "tool_error")
        if not show_exit:
            if result.returncode != 0:
                last = (result.stderr.strip().splitlines() or ["failed"])[-1]
                return Reply(f"Error: {last}", "tool_error")
            return Reply(text)
        return Reply(f"{text}\n[exit code {result.returncode}]".lstrip("\n"))
