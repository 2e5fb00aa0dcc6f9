"""A cgroup per jail: a bound on the jail's total memory and process count.

``RLIMIT_AS`` bounds each process only, so a jail could hold processes x limit (one kernel cell
held ~5.5 GB under a 4 GiB per-process limit).  Where the host lets us, each jail gets its own
cgroup with a memory bound (the kernel's OOM killer acts inside the group when it is reached)
and a pids bound, and the rlimits stay as a second line.

Where: cgroup v2 when the process's own v2 cgroup delegates the ``memory`` and ``pids``
controllers to its children; else cgroup v1 when both the ``memory`` and ``pids`` hierarchies
are mounted writable (children are made under the process's own group in each).  Otherwise, or
with ``ENVGYM_JAIL_CGROUP=0``, jails have rlimits only.  ``python -m envgym.sandbox.cgroup``
says which one is active and why.

Joining: the jail's first process moves itself into its group before it execs bwrap, so
nothing the jail runs ever starts outside the group (moving bwrap's pid from the host after the
spawn would race with bwrap's own forks).  Either between fork and exec (``join_self``, for a
caller that has a ``preexec_fn`` anyway), or through a ``/bin/sh`` that writes ``0`` to each
``cgroup.procs`` and execs the rest of the argv (``join_argv``): a ``preexec_fn`` makes
``subprocess`` fork instead of vfork, which cost ~450 ms per spawn from a 2 GiB host process
on a loaded machine, against about a millisecond for the shell.
Removal (``JailCgroup.remove``) kills what is left in the group and deletes it.

Stdlib only: ``jail_exec.py`` loads it without the envgym package.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV_SWITCH = "ENVGYM_JAIL_CGROUP"  # "0": never use cgroups (rlimits only)
PREFIX = "envgym-"
REMOVE_WAIT_S = 2.0
_made = itertools.count()
# Exit 125 when a write fails: the jail then never runs (the callers report a failed start).
_JOIN = 'while [ "$1" != -- ]; do echo 0 > "$1" || exit 125; shift; done; shift; exec "$@"'
_detected: list[tuple[str, tuple[Path, ...], str]] = []  # [(kind, parent dirs, why)] once


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _own_paths() -> dict[str, str]:
    """This process's cgroup per controller name ("" for v2) from /proc/self/cgroup."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount point, root within the hierarchy, super options) of cgroup mounts."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((tail[0], fields[4], fields[3], set(tail[2].split(","))))
    return found


def _under(mount: str, root: str, path: str) -> Path:
    relative = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
    return Path(mount) / ("" if relative == "." else relative)


def _try_child(parents: tuple[Path, ...], needed: tuple[str, ...]) -> str | None:
    """None when a child group can be made (with the ``needed`` files) in every parent."""
    name = f"{PREFIX}probe-{os.getpid()}"
    made: list[Path] = []
    try:
        for parent in parents:
            child = parent / name
            child.mkdir()
            made.append(child)
        missing = [f for f in needed if not any((c / f).exists() for c in made)]
        return f"no {', '.join(missing)} in a child group" if missing else None
    except OSError as exc:
        return f"cannot create a group under {parents[len(made)] if len(made) < len(parents) else parents}: {exc}"
    finally:
        for child in made:
            try:
                child.rmdir()
            except OSError:
                pass


def _detect() -> tuple[str, tuple[Path, ...], str]:
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return "", (), f"turned off ({ENV_SWITCH}=0)"
    try:
        own, mounts = _own_paths(), _mounts()
    except (OSError, ValueError) as exc:
        return "", (), f"cannot read /proc/self/cgroup or mountinfo: {exc}"
    reasons: list[str] = []
    for fstype, point, root, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        base = _under(point, root, own[""])
        try:
            enabled = set((base / "cgroup.subtree_control").read_text().split())
        except OSError:
            continue
        if not {"memory", "pids"} <= enabled:
            reasons.append(f"cgroup v2 at {base} does not delegate memory and pids to its children")
            continue
        problem = _try_child((base,), ("memory.max", "pids.max"))
        if problem is None:
            return "v2", (base,), f"cgroup v2 under {base}"
        reasons.append(f"cgroup v2 at {base}: {problem}")
    v1: dict[str, Path] = {}
    for fstype, point, root, options in mounts:
        for controller in ("memory", "pids"):
            if (
                fstype == "cgroup"
                and controller in options
                and controller in own
                and controller not in v1
            ):
                v1[controller] = _under(point, root, own[controller])
    if set(v1) == {"memory", "pids"}:
        parents = (v1["memory"], v1["pids"])
        problem = _try_child(parents, ("memory.limit_in_bytes", "pids.max"))
        if problem is None:
            return "v1", parents, f"cgroup v1 memory under {parents[0]}, pids under {parents[1]}"
        reasons.append(f"cgroup v1: {problem}")
    else:
        reasons.append("no cgroup v1 memory and pids hierarchies")
    return "", (), "; ".join(reasons)


def support() -> tuple[str, tuple[Path, ...], str]:
    """(kind: "v2", "v1" or "" for none, the parent groups, in words) — probed once."""
    if not _detected:
        _detected.append(_detect())
    return _detected[0]


def describe() -> str:
    """Which bound a jail's total memory has here, in words for a user."""
    kind, _, why = support()
    return (
        f"jail memory bound: {why}"
        if kind
        else f"jail memory bound: rlimits only (per process): {why}"
    )


@dataclass(frozen=True)
class JailCgroup:
    """One jail's group: one directory (v2) or one per controller (v1)."""

    kind: str
    dirs: tuple[Path, ...]

    def join_self(self) -> None:
        """Move the calling process into the group (between fork and exec: see the docstring)."""
        for directory in self.dirs:
            _write(directory / "cgroup.procs", "0")

    def join_argv(self, argv: list[str]) -> list[str]:
        """``argv`` preceded by a shell that joins the group, then execs ``argv`` (see above).
        The paths are the shell's arguments, never part of its script."""
        procs = [str(directory / "cgroup.procs") for directory in self.dirs]
        return ["/bin/sh", "-c", _JOIN, "envgym-join", *procs, "--", *argv]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self.dirs:
            try:
                found.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return found

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the group's memory bound."""
        name = "memory.events" if self.kind == "v2" else "memory.oom_control"
        try:
            for line in (self.dirs[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        """Kill what is left in the group, then delete it (idempotent; never raises)."""
        deadline = time.monotonic() + REMOVE_WAIT_S
        for directory in self.dirs:
            while directory.exists():
                for pid in self.pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                try:
                    directory.rmdir()
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left behind; swept by a later open_cgroup of this machine
                    time.sleep(0.01)


def _sweep(parents: tuple[Path, ...]) -> None:
    """Delete empty groups of envgym processes that are gone (killed before their cleanup)."""
    for parent in parents:
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for entry in entries:
            owner = entry.name[len(PREFIX) :].split("-")[0] if entry.name.startswith(PREFIX) else ""
            if (
                owner.isdigit()
                and int(owner) != os.getpid()
                and not Path(f"/proc/{owner}").exists()
            ):
                try:
                    entry.rmdir()
                except OSError:
                    pass


def open_cgroup(memory_bytes: int, max_pids: int) -> JailCgroup | None:
    """A fresh group bounding memory (bytes, swap included where the host accounts it) and
    process count, or None where the host gives us none (rlimits only)."""
    kind, parents, _ = support()
    if not kind:
        return None
    if next(_made) % 64 == 0:
        _sweep(parents)
    name = f"{PREFIX}{os.getpid()}-{time.monotonic_ns()}"
    group = JailCgroup(kind, tuple(parent / name for parent in parents))
    try:
        for directory in group.dirs:
            directory.mkdir()
        if kind == "v2":
            _write(group.dirs[0] / "memory.max", str(memory_bytes))
            if (group.dirs[0] / "memory.swap.max").exists():
                _write(group.dirs[0] / "memory.swap.max", "0")
            _write(group.dirs[0] / "pids.max", str(max_pids))
        else:
            _write(group.dirs[0] / "memory.limit_in_bytes", str(memory_bytes))
            if (group.dirs[0] / "memory.memsw.limit_in_bytes").exists():  # swap counted too
                _write(group.dirs[0] / "memory.memsw.limit_in_bytes", str(memory_bytes))
            _write(group.dirs[1] / "pids.max", str(max_pids))
    except OSError:
        group.remove()
        return None
    return group


if __name__ == "__main__":
    print(describe())
    sys.exit(0)
