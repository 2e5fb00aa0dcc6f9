"""Run one command in a jail: the SWE family's install, test and agent commands (docs/SWE.md).

The bwrap recipe is the kernel jail's (``kernel_jail.py``, ``bwrap.py``): own pid/ipc/uts (and,
unless ``network=True``, net) namespaces, ``--die-with-parent``, a read-only root holding only
the system directories and the host interpreter's prefix, a private size-capped ``/tmp``, and the
caller's :class:`Mount` s.  As root the command runs under a fresh uid (``allocate_uid``) so that
``RLIMIT_NPROC`` counts only its own processes; writable mounts are handed to that uid first.

Unlike the kernel jail, the program is any argv (``pytest``, ``pip``, ``bash -c ...``).  It is
started through ``command_io.BOOT``, a stdlib-only Python snippet that sets the rlimits, drops root,
restores the signal dispositions Python ignores (SIGPIPE, SIGXFSZ: a shell pipeline must behave
as usual), changes directory and ``exec`` s the command.  It reports on a status channel (a pipe
closed by the ``exec``) whether it got that far, so "the command exited 127" and "the command
could not be started" stay apart.

Output goes to host temp files, not pipes, so a command printing without end never blocks on a
full pipe; while it runs, the head of a large file is punched out (``fallocate``), so the host
keeps about ``output_bytes`` of disk per stream and the tail is what comes back.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from envgym.sandbox.bwrap import _spawn, probe
from envgym.sandbox.cgroup import JailCgroup, open_cgroup
from envgym.sandbox.command_io import (
    BOOT,
    PIP_CONF,
    Capture,
    hand_over,
    host_pip_config,
    jail_env,
    readonly_extras,
    write_identity,
)

# The arguments and result types live in command_types (command_docker imports them too); they
# stay importable from here, where run_command's callers look for them.
from envgym.sandbox.command_types import CommandLimits, CommandResult, Mount, finish
from envgym.sandbox.fdwait import wait_readable
from envgym.sandbox.jail import (
    Bind,
    Dir,
    JailMount,
    JailSpec,
    Tmpfs,
    build_argv,
    count_processes,
    plan_identity,
    python_executable,
)
from envgym.sandbox.kernel_jail import children

__all__ = ["CommandLimits", "CommandResult", "Mount", "finish", "run_command"]

DEATH_WAIT_S = 5.0  # how long a kill waits for the jail's processes to be gone


def run_command(
    argv: Sequence[str],
    *,
    mounts: Sequence[Mount],
    workdir: str,
    env: Mapping[str, str] | None = None,
    network: bool = False,
    limits: CommandLimits | None = None,
    backend: str = "bwrap",
    image: str | None = None,
) -> CommandResult:
    """Run ``argv`` in a fresh jail and wait for it (blocking: call it off the event loop).

    Raises ``SandboxUnavailable`` for operator problems and ``ValueError`` for bad arguments;
    everything the command does is in the result."""
    args = tuple(str(a) for a in argv)
    if not args:
        raise ValueError("argv must not be empty")
    if not workdir.startswith("/"):
        raise ValueError(f"workdir must be an absolute path in the jail, got {workdir!r}")
    for mount in mounts:
        if not mount.host.exists():
            raise ValueError(f"mount source {mount.host} does not exist")
    limits = limits or CommandLimits()
    if backend == "docker":
        from envgym.sandbox.command_docker import run_command_docker

        return run_command_docker(
            args,
            mounts=mounts,
            workdir=workdir,
            env=env,
            network=network,
            limits=limits,
            image=image,
        )
    if backend != "bwrap":
        raise ValueError(f"unknown command backend {backend!r}; valid: bwrap, docker")
    if image is not None:
        raise ValueError("image is for backend='docker' only")
    return _run_bwrap(args, mounts, workdir, env, network, limits)


# -- bubblewrap -----------------------------------------------------------------------------


@dataclass
class _Jail:
    proc: subprocess.Popen[bytes]
    uid: int | None
    group: JailCgroup | None = None  # the jail's cgroup (None: rlimits only)
    init_fd: int | None = field(default=None)

    def locate_init(self) -> None:
        """A pidfd on the namespace's init: it exits only once every process in it is gone."""
        if self.init_fd is None:
            kids = children(self.proc.pid)
            if kids:
                try:
                    self.init_fd = os.pidfd_open(kids[0])
                except OSError:
                    pass

    def kill(self) -> None:
        self.locate_init()
        try:
            # The init has PDEATHSIG: when bwrap dies the kernel kills the whole pid namespace.
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        deadline = time.monotonic() + DEATH_WAIT_S
        if self.init_fd is not None:
            wait_readable(self.init_fd, DEATH_WAIT_S)
        elif self.uid is not None:
            while count_processes(self.uid) and time.monotonic() < deadline:
                time.sleep(0.005)

    def close(self) -> None:
        if self.init_fd is not None:
            os.close(self.init_fd)
            self.init_fd = None


def _bwrap_argv(
    root: bool,
    network: bool,
    limits: CommandLimits,
    mounts: Sequence[Mount],
    scratch: Path,
    uid: int,
) -> list[str]:
    # The private /tmp first: a mount whose target is under /tmp is bound on top of it.
    ops: list[JailMount] = [Tmpfs("/tmp", size=limits.tmp_bytes)]
    passwd, group = write_identity(scratch, uid, uid)
    ops += [Dir("/etc"), Bind(str(passwd), "/etc/passwd"), Bind(str(group), "/etc/group")]
    ops += [Bind(os.path.realpath(path), str(path)) for path in readonly_extras(network)]
    if network and host_pip_config()[0]:
        conf = scratch / "pip.conf"
        conf.write_text(host_pip_config()[0])
        conf.chmod(0o644)
        ops.append(Bind(str(conf), PIP_CONF))
    for mount in sorted(mounts, key=lambda m: len(Path(m.target).parts)):  # outer before nested
        ops.append(Bind(str(mount.host), mount.target, writable=mount.writable))
    # --dev leaves /dev/shm a root-owned directory; multiprocessing's locks need a writable one.
    shm = Tmpfs("/dev/shm", size=limits.tmp_bytes)
    return build_argv(JailSpec(root=root, mounts=tuple(ops), network=network, after_dev=(shm,)))


def _run_bwrap(
    argv: tuple[str, ...],
    mounts: Sequence[Mount],
    workdir: str,
    env: Mapping[str, str] | None,
    network: bool,
    limits: CommandLimits,
) -> CommandResult:
    root = os.geteuid() == 0
    probe(root)
    identity = plan_identity(root, limits.rlimits(), limits.max_processes)
    uid, rlimits = identity.uid, identity.rlimits
    if uid is not None:
        for mount in mounts:
            if mount.writable:
                hand_over(mount.host, uid, uid)
    outputs = (Capture(limits.output_bytes), Capture(limits.output_bytes))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="envgym-cmd-") as scratch:
        os.chmod(scratch, 0o755)
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            spec = {
                "uid": uid if uid is not None else -1,
                "gid": uid if uid is not None else -1,
                "cwd": workdir,
                "rlimits": rlimits,
                "status_fd": write_end,
                "seal": True,  # a new keyring, no capabilities, key calls refused (seal.py)
            }
            full = _bwrap_argv(
                root,
                network,
                limits,
                mounts,
                Path(scratch),
                uid if uid is not None else os.getuid(),
            )
            full += [
                str(python_executable()),
                "-I",
                "-S",
                "-B",
                "-c",
                BOOT,
                json.dumps(spec),
                *argv,
            ]
            jail = _start(full, jail_env(env, network), outputs, write_end, uid, limits)
            try:
                os.close(write_end)
                write_end = -1
                timed_out = _wait(jail, outputs, started + limits.timeout_s)
                if timed_out:
                    jail.kill()
                jail.close()
                oom = jail.group.oom_kills() if jail.group is not None else 0
            finally:
                if jail.group is not None:  # also kills what is left, should the wait have raised
                    jail.group.remove()
            status = _drain(read_end)
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
    problem = None
    if oom and jail.proc.returncode != 0:
        problem = f"the jail reached its memory bound ({limits.total_memory_bytes} bytes in all): {oom} process(es) killed"
    try:
        return finish(
            argv,
            jail.proc.returncode,
            status,
            outputs,
            started,
            limits.timeout_s if timed_out else None,
            problem,
        )
    finally:
        for capture in outputs:
            capture.close()


def _start(
    argv: list[str],
    env: dict[str, str],
    outputs: tuple[Capture, Capture],
    status_fd: int,
    uid: int | None,
    limits: CommandLimits,
) -> _Jail:
    from envgym.sandbox.base import SandboxUnavailable

    # The jail's total memory and process count; joined by a shell that then execs bwrap, so
    # nothing the command runs starts outside the group (cgroup.py).  None: rlimits only.
    group = open_cgroup(limits.total_memory_bytes, limits.max_processes)
    try:
        proc = _spawn(
            group.join_argv(argv) if group is not None else argv,
            stdin=subprocess.DEVNULL,
            stdout=outputs[0].fileno(),
            stderr=outputs[1].fileno(),
            pass_fds=(status_fd,),
            start_new_session=True,  # bwrap and its init in one group: killpg reaches both
            env=env,
        )
    except OSError as exc:
        if group is not None:
            group.remove()
        raise SandboxUnavailable(f"cannot start bubblewrap: {exc}") from None
    return _Jail(proc, uid, group)


def _wait(jail: _Jail, outputs: tuple[Capture, Capture], deadline: float) -> bool:
    """Wait for bwrap to exit (True: the deadline came first), trimming the output files."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        try:
            jail.proc.wait(timeout=min(remaining, 0.25))
            return False
        except subprocess.TimeoutExpired:
            pass
        jail.locate_init()
        for capture in outputs:
            capture.trim()


def _drain(fd: int) -> str:
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError as exc:  # EAGAIN: a writer is somehow still open; take what is there
            if exc.errno != errno.EAGAIN:
                raise
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")
