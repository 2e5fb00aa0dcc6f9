"""The SWE agent's tools: their schemas and how each call runs.

``bash`` runs in a fresh jail per call (``command_jail.run_command``: no network, the repository
mounted writable at ``/repo``, the project's venv first on ``PATH``, a wall-clock limit); the
file tools run on the host over the workspace (file_tools.py, confined there); ``run_tests``
runs the repository's visible tests through ``validation.run_tests``; ``submit`` only ends the
episode (the env grades).  :meth:`SweTools.call` never raises on agent input: every mistake is
an ``Error: ...`` text the agent reads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from envgym.dispatch import ToolTable
from envgym.envs.swe.file_tools import JAIL_ROOT, FileToolError, Workspace
from envgym.envs.swe.pyenv import DOCKER_IMAGE, JAIL_REPO, JAIL_VENV, PythonEnv, command_env
from envgym.sandbox.command_jail import CommandLimits, Mount, run_command
from envgym.tool_schema import function_schema

assert JAIL_ROOT == JAIL_REPO  # the file tools name paths as bash sees them

MAX_TEST_IDS = 200


@dataclass(frozen=True)
class ToolLimits:
    bash_timeout_s: float = 120.0
    test_timeout_s: float = 900.0
    output_chars: int = 12_000  # what one bash/run_tests reply shows (head and tail kept)
    bash_memory_bytes: int = 4 * 1024**3


@dataclass(frozen=True)
class Reply:
    """One call's text for the agent and, when it went wrong, the error kind for ``info``."""

    content: str
    error: str | None = None


# -- the schemas: plain functions whose hints and docstrings become the tool descriptions ------
def bash(command: str) -> str:
    """Run a shell command (bash) in the repository at /repo, without network access. Each call is a fresh shell (`cd` and variables do not carry over); the project's Python environment is first on PATH; commands are stopped after a time limit.

    Args:
        command: the command line, e.g. "grep -rn 'def parse' src | head".
    """
    raise NotImplementedError


def view(path: str, start_line: int | None = None, end_line: int | None = None) -> str:
    """Show a file with line numbers, or list a directory (two levels).

    Args:
        path: relative to the repository root (or absolute under /repo).
        start_line: first line to show (from 1).
        end_line: last line to show; -1 for the end of the file.
    """
    raise NotImplementedError


def search(pattern: str, path: str | None = None) -> str:
    """Find lines matching a regular expression (RE2 syntax) in the repository's files.

    Args:
        pattern: the regular expression, e.g. "def parse_\\w+".
        path: a file or directory to search in (default: the whole repository).
    """
    raise NotImplementedError


def str_replace(path: str, old: str, new: str) -> str:
    """Replace the one exact occurrence of `old` in a file by `new` (`old` must match exactly, whitespace included, and occur once).

    Args:
        path: the file to edit.
        old: the exact text to replace, with enough context to be unique.
        new: the replacement text.
    """
    raise NotImplementedError


def create(path: str, content: str) -> str:
    """Create a file (or overwrite it) with the given content; missing directories are made.

    Args:
        path: the file to write.
        content: the whole new content of the file.
    """
    raise NotImplementedError


def run_tests(paths_or_ids: list[str] | None = None) -> str:
    """Run the repository's tests with pytest and summarize the outcomes.

    Args:
        paths_or_ids: test files or pytest node ids ("tests/test_x.py::test_y"); default all.
    """
    raise NotImplementedError


def submit() -> str:
    """Submit the repository as it is now: the episode ends and your change is evaluated."""
    raise NotImplementedError


SCHEMA_FUNCTIONS = (bash, view, search, str_replace, create, run_tests, submit)
SUBMIT = "submit"


def tool_table() -> ToolTable:
    return ToolTable([function_schema(fn) for fn in SCHEMA_FUNCTIONS])


class SweTools:
    """Runs the agent's calls against one episode's workspace and Python environment."""

    def __init__(
        self, workspace: Workspace, python_env: PythonEnv, *, limits: ToolLimits | None = None
    ) -> None:
        self.workspace = workspace
        self.python_env = python_env
        self.limits = limits or ToolLimits()
        self.table = tool_table()

    def call(self, name: str, arguments: Any) -> Reply:
        problem = self.table.check(name, arguments)
        if problem is not None:
            return Reply(
                f"Error: {problem}",
                "unknown_tool" if name not in self.table.specs else "bad_arguments",
            )
        try:
            if name == "bash":
                return self.bash(arguments["command"])
            if name == "run_tests":
                return self.run_tests(arguments.get("paths_or_ids"))
            if name == SUBMIT:
                return Reply("Submitted. Your change will now be evaluated.")
            method = getattr(self.workspace, name)
            return Reply(method(**arguments))
        except FileToolError as err:
            return Reply(f"Error: {err}", "tool_error")
        except Exception as err:  # noqa: BLE001 - a tool bug must not end the episode; counted
            return Reply(f"Error: {name} could not be run ({type(err).__name__})", "internal_error")

    def bash(self, command: str) -> Reply:
        if not command.strip():
            return Reply("Error: the command is empty", "bad_arguments")
        result = run_command(["bash", "-c", command], mounts=self.mounts(), workdir=JAIL_ROOT,
                             env=command_env(self.python_env.recipe), network=False, backend=self.python_env.backend,
                             image=(self.python_env.image or DOCKER_IMAGE) if self.python_env.backend == "docker" else None,
                             limits=CommandLimits(timeout_s=self.limits.bash_timeout_s,
                                                  memory_bytes=self.limits.bash_memory_bytes,
                                                  output_bytes=4 * self.limits.output_chars))  # fmt: skip
        parts = [result.stdout]
        if result.stderr:
            parts.append(
                ("" if result.stdout.endswith("\n") or not result.stdout else "\n") + result.stderr
            )
        text = cap("".join(parts), self.limits.output_chars)
        if result.timed_out:
            return Reply(
                f"{text}\n[killed: the command ran over {self.limits.bash_timeout_s:g} s]",
                "timeout",
            )
        if result.returncode is None:
            return Reply(f"Error: the command could not run: {result.error}", "tool_error")
        note = "\n[some output was dropped: only its end was kept]" if result.truncated else ""
        return Reply(f"{text}{note}\n[exit code {result.returncode}]".lstrip("\n"))

    def mounts(self) -> list[Mount]:
        """pyenv.py's layout: the workspace at /repo (writable), the venv at /venv (read-only:
        the agent cannot change the environment the grader will use)."""
        return [
            Mount(self.workspace.root, JAIL_REPO, writable=True),
            Mount(self.python_env.venv, JAIL_VENV),
        ]

    def run_tests(self, ids: list[str] | None) -> Reply:
        from envgym.envs.swe.validation import run_tests

        ids = list(ids or ())
        bad = [i for i in ids if not i.strip() or i.startswith("-")]
        if bad or len(ids) > MAX_TEST_IDS:
            why = (
                f"{bad[0]!r} is not a test path or id (options are not accepted)"
                if bad
                else f"more than {MAX_TEST_IDS} ids"
            )
            return Reply(f"Error: {why}", "bad_arguments")
        run = run_tests(
            self.workspace.root, self.python_env, ids, timeout_s=self.limits.test_timeout_s
        )
        return Reply(summarize(run, self.limits.output_chars))


def summarize(run: Any, limit: int) -> str:
    """A test run as the agent reads it: counts, what did not pass, and the runner's detail."""
    counts = Counter(run.outcomes.values())
    lines = [f"status: {run.status} ({run.duration_s:.1f} s)",
             "outcomes: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no tests ran")]  # fmt: skip
    bad = sorted(t for t, o in run.outcomes.items() if o in ("failed", "error"))
    lines += [f"  {run.outcomes[t]}: {t}" for t in bad[:50]]
    if len(bad) > 50:
        lines.append(f"  ... and {len(bad) - 50} more")
    if run.detail:
        lines += ["", run.detail]
    return cap("\n".join(lines), limit)


def cap(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: its head and tail, with a note of what was cut."""
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"
