"""The sandbox contract: where bundle code (tools, solutions, verifiers) runs.

Bundle code is untrusted.  A sandbox owns one persistent worker per environment instance,
reused across steps and episodes.  The worker imports the bundle's modules, so the host
process never executes bundle code (except with the explicit ``inprocess`` backend for
trusted bundles).

Every call returns a :class:`CallOutcome`; nothing the bundle code does (raise, hang, crash,
exhaust memory, print without end) raises in the host.  After a hang, crash or OOM the worker
is restarted transparently and the *next* call works again; the episode state directory is
kept (it lives on the host).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple


class SandboxUnavailable(RuntimeError):
    """The chosen backend cannot run on this machine (message says what to install)."""


class CallError(str, enum.Enum):  # noqa: UP042 - str() of a member must stay "CallError.X", which StrEnum would change
    """Why a sandboxed call did not return a value."""

    EXCEPTION = "exception"  # bundle code raised; message has a shortened traceback
    TIMEOUT = "timeout"  # wall-clock limit hit; worker was killed and restarted
    CRASH = "crash"  # worker died (segfault, os._exit, killed); restarted
    MEMORY = "memory"  # MemoryError or the address-space limit; restarted if needed
    OUTPUT_TOO_LARGE = "output_too_large"  # reply bigger than Limits.max_reply_bytes
    NOT_FOUND = "not_found"  # no such module/function in the bundle
    PROTOCOL = "protocol"  # the worker replied garbage (e.g. hostile code wrote to the pipe)


@dataclass(frozen=True)
class Limits:
    """Resource limits for one worker; defaults suit tool calls over a small database."""

    call_timeout_s: float = 10.0
    memory_bytes: int = 2 * 1024**3  # RLIMIT_AS
    cpu_seconds: int = 600  # RLIMIT_CPU over the worker's life (wall timeouts are per call)
    max_processes: int = 64  # RLIMIT_NPROC, per worker
    max_file_bytes: int = 256 * 1024**2  # RLIMIT_FSIZE
    max_reply_bytes: int = 4 * 1024**2
    max_stdout_bytes: int = 64 * 1024  # printed output kept per call (the rest is dropped)
    solve_timeout_s: float = 120.0  # a gold solution makes many tool calls in one op
    # How long a launched worker may take to greet (interpreter start + namespaces/container
    # creation, under load), counted from its launch: it bounds the start, not the caller.
    startup_timeout_s: float = 60.0


class CallOutcome(NamedTuple):
    """Result of one call into bundle code.

    A named tuple rather than a frozen dataclass: one is built per tool call, and a frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` per field) cost ~0.6 µs more here, a
    twentieth of a whole in-process step.  Immutable all the same.
    """

    ok: bool
    value: Any = None  # the JSON-compatible return value when ok
    error: CallError | None = None
    message: str = ""  # readable by an agent: what went wrong, no host paths
    stdout: str = ""  # what the call printed (capped)
    duration_s: float = 0.0
    # ``value`` already serialized (JSON, non-ASCII kept) by a backend that had to check it
    # anyway, so the env need not serialize it again; None when not available.
    rendered: str | None = None


@dataclass(frozen=True)
class ToolSpec:
    """A tool as described by the worker: its OpenAI function schema."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments object

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class SolveOutcome:
    """What a gold solution did: the tool calls it made and the submission it produced."""

    outcome: CallOutcome
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    submission: dict[str, Any] | None = None  # arguments of the submit-tool call


def call_limit(own: float, requested: float | None) -> float:
    """The wall-clock limit of one call: its sandbox's (or tool's) ``own`` limit, lowered to
    what the caller ``requested`` (None: no request)."""
    return own if requested is None or requested >= own else requested


class Sandbox(abc.ABC):
    """One worker bound to one bundle.  Not thread-safe: one call at a time."""

    backend: str = "abstract"

    def __init__(self, bundle_dir: Path, limits: Limits | None = None) -> None:
        self.bundle_dir = Path(bundle_dir).resolve()
        self.limits = limits or Limits()

    @abc.abstractmethod
    def describe_tools(self) -> list[ToolSpec]:
        """Import ``tools.py`` in the worker and return the schema of every public tool.

        Raises ``BundleError`` (envgym.bundle) naming tools.py when it does not import or a
        tool lacks type hints — this is a malformed bundle, not an agent mistake.
        """

    @abc.abstractmethod
    def reset(self, state_dir: Path) -> None:
        """Start an episode on ``state_dir`` (already populated).

        Process backends start a fresh worker for it (the old one is dead when this returns),
        so nothing of an earlier episode runs in this one; see docs/SANDBOX.md."""

    @abc.abstractmethod
    def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> CallOutcome:
        """Call ``tools.<name>(**arguments)``; arguments were validated by the host.

        ``timeout_s`` bounds this call only (an episode's time left): the wall-clock limit is
        ``call_limit(self.limits.call_timeout_s, timeout_s)``.  Limits travel with the call,
        never as state set on a sandbox a wrapper may have copied (the in-process backend
        enforces no wall-clock limit at all)."""

    @abc.abstractmethod
    def solve(self, function: str, task: dict[str, Any], submit_tool: str | None) -> SolveOutcome:
        """Run ``solution.<function>(tools, task)``; ``tools`` exposes only the tool functions."""

    @abc.abstractmethod
    def verify(
        self, function: str, submission: dict[str, Any], task: dict[str, Any]
    ) -> CallOutcome:
        """Run ``verifier.<function>(submission, task)``; value is the verifier's report dict."""

    def start_pool(self, lease: Callable[[], tuple[Path, Callable[[], None]]]) -> bool:
        """Keep a pre-started worker ready for the next episode (sandbox/pool.py).

        ``lease()`` makes a fresh episode directory holding the pristine state and returns it
        with the function that removes it.  False when this backend has no pool (then every
        episode starts its worker in :meth:`reset`, as always).
        """
        return False

    def take_pooled(self) -> tuple[Path, Callable[[], None]] | None:
        """Start the next episode on the pre-started worker: ``(state dir, release)``; the
        caller releases that directory once the episode after it has begun.  None when no
        spare is ready (then refill a directory and :meth:`reset` onto it)."""
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Stop the worker and release every resource (idempotent)."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
