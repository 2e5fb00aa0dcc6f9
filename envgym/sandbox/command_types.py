"""What a jailed command is given and what it gives back, shared by both command backends.

:func:`envgym.sandbox.command_jail.run_command` takes :class:`Mount` s and
:class:`CommandLimits`, and hands the Docker runs to ``command_docker``; both backends build their
:class:`CommandResult` with :func:`finish`.  These live here, not in ``command_jail``, so that
``command_docker`` never imports the module that imports it.
"""

from __future__ import annotations

import math
import os
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path

from envgym.sandbox.command_io import Capture


@dataclass(frozen=True)
class Mount:
    host: Path  # a host directory or file
    target: str  # absolute path inside the jail
    writable: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "host", Path(self.host))
        if (
            not self.target.startswith("/")
            or posixpath.normpath(self.target) != self.target
            or self.target == "/"
        ):
            raise ValueError(
                f"Mount.target must be a normalized absolute path other than /, got {self.target!r}"
            )


@dataclass(frozen=True)
class CommandLimits:
    timeout_s: float = 600.0  # wall clock for the whole command; then the tree is killed
    memory_bytes: int = 4 * 1024**3  # RLIMIT_AS per process
    max_processes: int = 256  # RLIMIT_NPROC on the jail's own uid (bwrap) / pids_limit (docker)
    max_file_bytes: int = 1024**3  # RLIMIT_FSIZE
    tmp_bytes: int = 1024**3  # the private /tmp tmpfs
    output_bytes: int = 1024**2  # stdout and stderr each kept to this many bytes (tail kept)
    # All the jail's processes together (a cgroup where the host has one: cgroup.py); the
    # per-process RLIMIT_AS alone let a jail hold max_processes x memory_bytes.
    total_memory_bytes: int = 4 * 1024**3

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            raise ValueError(f"CommandLimits.timeout_s must be positive, got {self.timeout_s!r}")
        for name in (
            "memory_bytes",
            "max_processes",
            "max_file_bytes",
            "tmp_bytes",
            "output_bytes",
            "total_memory_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"CommandLimits.{name} must be a positive int, got {value!r}")

    def rlimits(self) -> dict[str, int]:
        """Per-process limits BOOT sets (NPROC is the backend's business)."""
        # RLIMIT_CPU is only a backstop behind the wall clock: threads add up, so a process may
        # legitimately burn timeout × cores of CPU time before the wall timeout hits.
        cpu = math.ceil(self.timeout_s) * (os.cpu_count() or 1) + 1
        return {"AS": self.memory_bytes, "CPU": cpu, "FSIZE": self.max_file_bytes, "CORE": 0}


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when killed (timeout) or never started
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    truncated: bool  # some output was dropped
    error: str | None = None  # why it did not run / was killed, in words

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def finish(
    argv: tuple[str, ...],
    code: int | None,
    status: str,
    outputs: tuple[Capture, Capture],
    started: float,
    timeout_s: float | None,
    problem: str | None = None,
) -> CommandResult:
    """The result from what the backend saw: the exit code, the BOOT status text ("" = BOOT
    never ran, "R" = the command was exec'd, "R<message>" = it could not be), a timeout."""
    (stdout, cut_out), (stderr, cut_err) = outputs[0].tail(), outputs[1].tail()
    error = problem
    if timeout_s is not None:
        code, error = None, f"timeout after {timeout_s:g} s"
    elif not status.startswith("R"):
        code = None
        error = error or f"the jail did not start: {stderr.strip()[-500:] or 'no diagnostics'}"
    elif len(status) > 1:
        code, error = None, status[1:]
    return CommandResult(
        argv,
        code,
        stdout,
        stderr,
        timeout_s is not None,
        time.monotonic() - started,
        cut_out or cut_err,
        error,
    )
