"""Where bundle code runs: ``open_sandbox(bundle_dir, backend)``.  Threat model: docs/SANDBOX.md.

Backends: ``"bwrap"`` (default; bubblewrap namespaces), ``"docker"`` (a container per worker)
and ``"inprocess"`` (no isolation: trusted built-in bundles and benchmarks only).
"""

from __future__ import annotations

from pathlib import Path

from envgym.sandbox.base import (
    CallError,
    CallOutcome,
    Limits,
    Sandbox,
    SandboxUnavailable,
    SolveOutcome,
    ToolSpec,
)

BACKENDS = ("bwrap", "docker", "inprocess")

__all__ = [
    "BACKENDS",
    "CallError",
    "CallOutcome",
    "Limits",
    "Sandbox",
    "SandboxUnavailable",
    "SolveOutcome",
    "ToolSpec",
    "open_sandbox",
]


def open_sandbox(
    bundle_dir: Path | str, backend: str = "bwrap", limits: Limits | None = None
) -> Sandbox:
    """A sandbox for ``bundle_dir``; raises :class:`SandboxUnavailable` if the backend cannot run."""
    # Backends are imported on demand: docker_backend needs the docker SDK, and nothing here
    # should slow down importing envgym.
    if backend == "bwrap":
        from envgym.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(Path(bundle_dir), limits)
    if backend == "docker":
        from envgym.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(Path(bundle_dir), limits)
    if backend == "inprocess":
        from envgym.sandbox.inprocess import InProcessSandbox

        return InProcessSandbox(Path(bundle_dir), limits)
    raise ValueError(f"unknown sandbox backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
