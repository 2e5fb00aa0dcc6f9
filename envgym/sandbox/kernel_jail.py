"""A bubblewrap jail for long-lived interpreters that need the venv: Jupyter kernels.

The bundle worker (``bwrap.py``) runs ``python -I -S`` with the standard library only; a code
interpreter needs numpy, pandas, sympy and ipykernel, so this jail additionally mounts the
venv (``sys.prefix``) read-only.  Everything else is the bwrap backend's recipe, reused from
``bwrap.py`` (namespaces, system mounts, ancestor directories, uid allocation, the probe, the
launcher thread for ``--die-with-parent``):

* no network (empty netns), own pid/ipc/uts namespaces, read-only root;
* writable: ``/workspace`` (the episode's working directory, a host directory), ``/tmp`` (a
  size-capped tmpfs private to the jail) and ``/run/kernel`` (the kernel's IPC sockets);
* rlimits: address space, CPU seconds, file size, no core dumps, and ``RLIMIT_NPROC`` on a
  dedicated uid when the host is root (see bwrap.py: NPROC is never enforced for uid 0), so a
  fork bomb stops at ``max_processes``;
* fds 1/2 of the jailed program are /dev/null: nothing it prints can fill a host file.

The jailed program is started through :data:`BOOT`, which drops privileges, ignores SIGXFSZ
(a write over the file-size limit fails with EFBIG instead of killing the kernel), records a
startup traceback in the IPC directory for the host, and then runs the given module.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from envgym.sandbox.base import SandboxUnavailable
from envgym.sandbox.bwrap import _spawn, probe
from envgym.sandbox.cgroup import JailCgroup, open_cgroup
from envgym.sandbox.jail import SEAL_SOURCE, Bind, JailSpec, Only, Tmpfs, build_argv, plan_identity

JAIL_WORKSPACE = "/workspace"
JAIL_IPC = "/run/kernel"
BOOT_ERROR = "boot-error.txt"  # written into the IPC directory when the program fails to start

# Runs as ``python -I -c BOOT UID GID MODULE ARGS...`` inside the jail.  Stdlib only.
# SEAL_SOURCE first (jail.py): a new session keyring, no capabilities, key syscalls refused.
_LAUNCHER = r"""
import os, signal, sys, traceback
uid, gid, module = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
try:
    if uid >= 0:
        os.setgroups([]); os.setgid(gid); os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise SystemExit("jail: failed to drop privileges")
    seal(uid if uid >= 0 else None, gid if uid >= 0 else None)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.argv = [module] + sys.argv[4:]
    import runpy
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit:
    raise
except BaseException:
    with open(os.path.join(os.environ["JAIL_IPC"], "boot-error.txt"), "w") as fh:
        traceback.print_exc(file=fh)
    raise
"""
BOOT = SEAL_SOURCE + _LAUNCHER


@dataclass(frozen=True)
class JailLimits:
    """Resource limits of one jailed interpreter (a kernel lives for a whole episode)."""

    memory_bytes: int = 4 * 1024**3  # RLIMIT_AS: ipykernel + numpy/pandas need ~1 GiB of it
    cpu_seconds: int = 3600  # RLIMIT_CPU over the kernel's life; wall timeouts are per cell
    max_processes: int = 64  # RLIMIT_NPROC on the jail's own uid (threads count too)
    max_file_bytes: int = 256 * 1024**2  # RLIMIT_FSIZE
    tmp_bytes: int = 256 * 1024**2  # size of the private /tmp tmpfs
    workspace_bytes: int = 256 * 1024**2  # size of /workspace (its own tmpfs: quota.BoundedDir)
    # The jail's processes together (a cgroup, where the host has one for us: cgroup.py); the
    # per-process RLIMIT_AS alone let one kernel hold processes x memory_bytes.
    total_memory_bytes: int = 4 * 1024**3

    def __post_init__(self) -> None:
        for name in (
            "memory_bytes",
            "cpu_seconds",
            "max_processes",
            "max_file_bytes",
            "tmp_bytes",
            "workspace_bytes",
            "total_memory_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"JailLimits.{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class JailDirs:
    """Host directories bound into one jail."""

    workspace: Path  # -> /workspace (read-write, the working directory)
    ipc: Path  # -> /run/kernel (read-write: the program creates its sockets there)


class JailedProcess:
    """One program running in the jail, as the host sees it."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        stderr: IO[bytes],  # a tempfile.TemporaryFile (a plain file object on Linux)
        uid: int | None,
        group: JailCgroup | None = None,
    ) -> None:
        self.proc = proc
        self.uid = uid
        self.group = group  # the jail's cgroup (total memory, pids), None: rlimits only
        self._stderr = stderr
        self.main_pid: int | None = None  # the jailed program itself (host pid), once known
        self._baseline: int | None = None  # processes in the jail when it was idle at start

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_reason(self) -> str:
        """Why the jail ended, in words for an agent (call after it ended)."""
        code = self.proc.poll()
        if code is None:
            return "it is still running"
        if code > 128:  # bwrap reports a program killed by a signal as 128 + signo
            return f"killed by {_signal_name(code - 128)}"
        if code < 0:
            return f"killed by {_signal_name(-code)}"
        return f"exited with status {code}"

    def find_main(self) -> int | None:
        """The jailed program's host pid: the end of the bwrap → init → program chain."""
        pid = self.proc.pid
        for _ in range(4):
            kids = children(pid)
            if len(kids) != 1:
                break
            pid = kids[0]
        self.main_pid = pid if pid != self.proc.pid else None
        self._baseline = self._jail_pids()
        return self.main_pid

    def _jail_pids(self) -> int | None:
        """How many processes the jail's own /proc shows (its pid namespace), or None."""
        init = children(self.proc.pid)
        try:
            return (
                sum(name.isdigit() for name in os.listdir(f"/proc/{init[0]}/root/proc"))
                if init
                else None
            )
        except OSError:
            return None

    def has_strays(self) -> bool:
        """Cheap check (~20 µs: the jail's /proc lists only its pid namespace) before the
        full walk of :meth:`strays` (~170 µs)."""
        count = self._jail_pids()
        if count is not None and self._baseline is not None:
            return count > self._baseline
        return bool(self.strays())

    def strays(self) -> list[int]:
        """Processes in the jail other than bwrap, its init and the program itself."""
        if self.main_pid is None:
            return []  # not identified yet: nothing is safe to kill
        chain = _ancestors_within(self.main_pid, self.proc.pid)
        out: list[int] = []
        todo = [self.proc.pid]
        while todo:
            pid = todo.pop()
            for kid in children(pid):
                if kid not in chain:
                    out.append(kid)
                todo.append(kid)
        return out

    def reap_strays(self, settle_s: float = 1.0) -> int:
        """SIGKILL every live stray and wait (up to ``settle_s``) until they are dead; returns
        how many there were.  Zombies are left to their parent (the kernel reaps its own)."""
        victims = [pid for pid in self.strays() if _state(pid) not in ("Z", "X", "")]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + settle_s
        dying = victims
        while dying and time.monotonic() < deadline:
            time.sleep(0.005)
            dying = [pid for pid in dying if _state(pid) not in ("Z", "X", "")]
        return len(victims)

    def kill(self) -> None:
        """Kill the jail and everything in it (idempotent)."""
        if self.proc.poll() is None:
            try:
                # bwrap's init has PDEATHSIG; when it dies the kernel kills the whole pid namespace.
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck bwrap
            self.proc.kill()
        if self.group is not None:
            self.group.remove()  # kills what is left in it (nothing, normally) and removes it
        self._stderr.close()

    def diagnostics(self, ipc: Path) -> str:
        """Host-side details for a failed start: the boot traceback, else bwrap's stderr."""
        boot = ipc / BOOT_ERROR
        if boot.is_file():
            return boot.read_text(errors="replace")[-3000:]
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-3000:].decode(errors="replace").strip()
        except ValueError:
            return ""


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads), from /proc/PID/task/*/children."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except OSError:
            pass
    return out


def _state(pid: int) -> str:
    """The process state letter (R, S, Z, ...), or "" when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _ancestors_within(pid: int, top: int) -> set[int]:
    chain = {pid}
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        chain.add(ppid)
        if ppid in (top, 0, 1):
            break
        pid = ppid
    return chain


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def hand_over(path: Path, uid: int | None) -> None:
    """Give ``path`` (and what it holds) to the jail's uid, never following links and never
    handing over a hard-linked file (it could be a host file smuggled in)."""
    if uid is None:
        return
    os.chown(path, uid, uid, follow_symlinks=False)
    for directory, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(directory, name)
            st = os.lstat(full)
            if st.st_nlink == 1 or os.path.isdir(full):
                os.chown(full, uid, uid, follow_symlinks=False)


def venv_python() -> Path:
    """The venv's interpreter path: run through it, Python finds the venv's site-packages."""
    candidate = Path(sys.prefix) / "bin" / "python3"
    return candidate if candidate.exists() else Path(sys.executable)


def launch(
    module: str,
    args: list[str],
    dirs: JailDirs,
    *,
    limits: JailLimits,
    env: dict[str, str] | None = None,
    site_dir: Path | None = None,
    site_names: Sequence[str] = (),
) -> JailedProcess:
    """Start ``python -m module args...`` in a fresh jail.  Raises SandboxUnavailable when
    bubblewrap cannot run here.  Must be called off the event loop (it forks).

    With ``site_dir`` (a site-packages directory), the jail sees only the entries
    ``site_names`` of it: an empty read-only tmpfs hides the rest (generator packages
    must not be importable by the code being judged)."""
    root = os.geteuid() == 0
    probe(root)
    rlimits = {
        "AS": limits.memory_bytes,
        "CPU": limits.cpu_seconds,
        "FSIZE": limits.max_file_bytes,
        "CORE": 0,
    }
    identity = plan_identity(root, rlimits, limits.max_processes)
    uid = identity.uid
    for path in (dirs.workspace, dirs.ipc):
        hand_over(path, uid)
    venv = Path(sys.prefix).resolve()
    # The private /tmp comes before the binds: a checkout (and its venv) under /tmp must be
    # bound on top of it, not hidden by it.  World-writable (sticky) so the dropped uid can
    # use it; its size is capped by the tmpfs.
    mounts: list[Bind | Tmpfs | Only] = [Tmpfs("/tmp", size=limits.tmp_bytes)]
    if not venv.is_relative_to(Path(sys.base_prefix).resolve()):
        mounts.append(Bind(str(venv), str(venv)))
    if site_dir is not None:
        mounts.append(Only(str(site_dir), tuple(site_names)))
    mounts += [
        Bind(str(dirs.ipc), JAIL_IPC, writable=True),
        Bind(str(dirs.workspace), JAIL_WORKSPACE, writable=True),
    ]
    argv = build_argv(JailSpec(root=root, mounts=tuple(mounts), chdir=JAIL_WORKSPACE))
    ids = (str(uid), str(uid)) if uid is not None else ("-1", "-1")
    argv += [str(venv_python()), "-I", "-B", "-c", BOOT, *ids, module, *args]
    full_env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "JAIL_IPC": JAIL_IPC}
    full_env.update(env or {})
    # The jail's total memory and process count (rlimits bound each process only); joined in
    # the child before exec, so nothing the jail runs starts outside it.
    group = open_cgroup(limits.total_memory_bytes, limits.max_processes)
    resolved = {
        getattr(resource, "RLIMIT_" + name): value for name, value in identity.rlimits.items()
    }

    def set_limits() -> None:  # in the child, between fork and exec
        if group is not None:
            group.join_self()
        for which, value in resolved.items():
            resource.setrlimit(which, (value, value))

    stderr = tempfile.TemporaryFile()
    try:
        proc = _spawn(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
            preexec_fn=set_limits,
            env=full_env,
        )
    except OSError as exc:
        stderr.close()
        if group is not None:
            group.remove()
        raise SandboxUnavailable(f"cannot start bubblewrap: {exc}") from None
    return JailedProcess(proc, stderr, uid, group)
