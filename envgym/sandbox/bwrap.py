"""Bubblewrap backend: the worker in fresh namespaces with a minimal read-only filesystem.

Inside the sandbox the worker sees only: /usr (and the /lib, /lib64, /bin, /sbin links or
binds), the base Python prefix, the worker's own envgym modules at /opt/envgym/envgym
(worker_stage.py), the bundle's code at /bundle (read-only), the episode state at /state (the
only writable path), a fresh /proc and /dev, and a read-only empty /tmp.  No network (empty
netns), no IPC, own pid and uts namespace.

Resource limits are rlimits set before exec.  ``RLIMIT_NPROC`` is never enforced for uid 0 —
not even uid 0 inside a user namespace that maps to host root — so when the host runs as root
we do *not* create a user namespace: bwrap runs as real root, keeps only CAP_SETUID/CAP_SETGID
for the worker, and the worker drops to a dedicated uid/gid (unique per worker, so the limit
counts only its own processes) before touching bundle code.  As a non-root host we use a user
namespace and set NPROC to the user's current process count plus the limit.

The argv and the uid/rlimit plan come from ``jail.py``, the one builder every envgym jail uses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from envgym.runtime import BYTECODE_DIR
from envgym.sandbox.base import CallError, Limits, SandboxUnavailable
from envgym.sandbox.cgroup import JailCgroup, open_cgroup
from envgym.sandbox.fdwait import wait_readable
from envgym.sandbox.fork import ENV_SWITCH, fork_requested, fork_server, launch_forked
from envgym.sandbox.jail import (
    BWRAP,
    UID_BASE,  # noqa: F401 - re-exported: callers import it from here
    Bind,
    JailSpec,
    Tmpfs,
    allocate_uid,  # noqa: F401 - re-exported (docker backends)
    build_argv,
    count_processes,
    isolation,
    parents,
    plan_identity,
    python_executable,
    system_mounts,
)
from envgym.sandbox.process import (
    SANDBOX_BUNDLE,
    SANDBOX_STATE,
    ProcessSandbox,
    WorkerHandle,
    signal_death,
)
from envgym.sandbox.worker_stage import WORKER_SCRIPT, worker_package
from envgym.state import chown_tree

SANDBOX_PACKAGE = "/opt/envgym/envgym"
WORKER = f"{SANDBOX_PACKAGE}/sandbox/worker.py"  # the worker script (Docker runs the source)
# bwrap mounts only the worker's modules, compiled once per host process (worker_stage.py).
WORKER_PYC = f"{SANDBOX_PACKAGE}/{WORKER_SCRIPT}"
DEATH_WAIT_S = 5.0  # how long kill() waits for the sandbox's processes to be gone
# glibc grows its brk heap for requests below ``mmap_threshold`` (128 KiB, raised as big blocks
# are freed).  The big temporary buffers of compiling and importing grew the heap, and their
# freed chunks, pinned between live objects, stayed dirty: 1.1 MiB free in the 3.3 MiB heap of
# an idle worker.  At 16 KiB a request the heap cannot serve gets its own mapping, unmapped when
# freed: 0.8 MiB less private memory for ~10% more page faults (8 KiB: 1.05 MiB for ~20%).
# Not secret: bundle code may read it.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=16384"
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "GLIBC_TUNABLES": MALLOC_TUNABLES}
_spawner: list[Any] = [None, None]  # [pid, ThreadPoolExecutor] of the launcher thread
_spawner_lock = threading.Lock()
_probed: dict[bool, str | None] = {}  # probe verdict per mode: None = usable, else why not

# The recipe's parts live in jail.py (one builder for every jail); these names stay for callers.
_mounts = system_mounts
_parents = parents
_count_processes = count_processes


def _isolation(root: bool) -> list[str]:
    return isolation(root)


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _children(pid: int) -> list[int]:
    """Child pids of ``pid``'s main thread (``/proc/PID/task/PID/children``)."""
    return [int(p) for p in _read(f"/proc/{pid}/task/{pid}/children").split()]


class TreeWatch:
    """Looks at a sandbox from the host: its init and the worker, by their host pids.

    The three /proc files stay open and are re-read with ``pread`` at offset 0 (seq files
    regenerate then), which keeps the per-call check to three syscalls.
    """

    def __init__(self, init: int, worker: int) -> None:
        self.init, self.worker = init, worker
        self._worker_b = str(worker).encode()
        self._fds: list[int] = []
        try:
            for path in (
                f"/proc/{worker}/stat",
                f"/proc/{worker}/task/{worker}/children",
                f"/proc/{init}/task/{init}/children",
            ):
                self._fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            self.close()
            raise

    def quiet(self) -> bool:
        """The worker is one thread, has no child, and is init's only child.

        Read in this order (threads, the worker's children, init's children), a process
        that moves between the lists meanwhile (an orphan reparented to init) is still seen;
        with one thread, nothing else in the worker can start a new one during the reads.
        """
        try:
            stat_fd, mine, inits = self._fds
            stat = os.pread(stat_fd, 4096, 0)
            if int(stat[stat.rindex(b")") + 2 :].split()[17]) != 1:  # field 20, num_threads
                return False
            return not os.pread(mine, 4096, 0).strip() and os.pread(inits, 4096, 0).split() == [
                self._worker_b
            ]
        except (OSError, ValueError, IndexError):
            return False  # gone, closed or unreadable: not known to be quiet

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


def tree_quiet(init: int, worker: int) -> bool:
    """One-off :meth:`TreeWatch.quiet` (opens and closes the files)."""
    try:
        watch = TreeWatch(init, worker)
    except OSError:
        return False
    try:
        return watch.quiet()
    finally:
        watch.close()


def probe(root: bool) -> None:
    """Raise :class:`SandboxUnavailable` when bwrap is missing or cannot create the namespaces
    we need.  Probed once per process (a tiny sandboxed ``python -c``); the verdict is cached."""
    if root not in _probed:
        _probed[root] = _probe(root)
    problem = _probed[root]
    if problem is not None:
        raise SandboxUnavailable(problem)


def _probe(root: bool) -> str | None:
    if not os.access(BWRAP, os.X_OK):
        return f"bubblewrap not found at {BWRAP} (apt-get install bubblewrap)"
    python = python_executable()
    argv = [BWRAP, *_isolation(root), *_mounts(python), "--proc", "/proc", "--dev", "/dev"]
    argv += [str(python), "-I", "-S", "-c", "import sqlite3, socket"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, env=_ENV)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap failed to run: {exc}"
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()[-800:]
        return (
            f"bubblewrap cannot create a sandbox here (exit {done.returncode}): {err}. "
            "It needs user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces>0) or root; use backend='docker' otherwise."
        )
    return None


def _spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``Popen`` from a thread that lives as long as the process.

    ``--die-with-parent`` is PR_SET_PDEATHSIG, which fires when the *thread* that forked bwrap
    exits: a sandbox created from a short-lived thread (a thread pool, ``asyncio.to_thread``)
    would be killed under the caller's feet.
    """
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(argv, **kwargs)
    with _spawner_lock:
        pid, executor = _spawner
        if pid != os.getpid() or executor is None:  # none yet, or inherited across fork()
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="envgym-bwrap-spawner")
            _spawner[:] = [os.getpid(), executor]
    return executor.submit(subprocess.Popen, argv, **kwargs).result()


def _watch_init(init: int) -> TreeWatch | None:
    """A watch of a sandbox's init and its one child, the worker; None until it has one."""
    try:
        (worker,) = _children(init)
        return TreeWatch(init, worker)
    except (OSError, ValueError):
        return None


class BwrapWorker(WorkerHandle):
    def __init__(
        self, argv: list[str], uid: int | None = None, group: JailCgroup | None = None
    ) -> None:
        self.group = group  # the worker's cgroup (total memory, pids); None: rlimits only
        self._stderr = tempfile.TemporaryFile()
        try:
            # No preexec_fn (the worker sets its own rlimits before it drops root): without one
            # Popen can vfork, which costs ~1 ms instead of ~8 ms from a large host process.
            self.proc = _spawn(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                start_new_session=True,  # its own process group, killed as one
                env=_ENV,
                bufsize=0,
            )
        except OSError as exc:
            self._stderr.close()
            raise SandboxUnavailable(f"cannot start bubblewrap: {exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.read_fd = self.proc.stdout.fileno()
        self.write_fd = self.proc.stdin.fileno()
        self._killed = False
        self.uid = uid
        # Host pids of the sandbox's pid-1 (bwrap's init) and of the worker, with a pidfd on
        # the init: found once the worker has answered (see _locate).
        self._watch: TreeWatch | None = None
        self._init_fd: int | None = None

    def _locate(self) -> TreeWatch | None:
        if self._watch is None and not self._killed:
            try:
                (init,) = _children(self.proc.pid)
                (worker,) = _children(init)
                self._init_fd = os.pidfd_open(init)
                self._watch = TreeWatch(init, worker)
            except (OSError, ValueError):
                return None
            # The worker answered: bwrap's start-up messages, all the file is read for
            # (diagnostics), are behind us.  One host fd less per sandbox (bwrap keeps its own).
            self._stderr.close()
        return self._watch

    def quiet(self) -> bool:
        watch = self._locate()
        return watch is not None and watch.quiet()

    def kill(self) -> None:
        if self._killed:
            return
        self._locate()  # to wait for the init below
        self._killed = True
        try:
            # bwrap's pid-1 inside the sandbox has PDEATHSIG set, and when it dies the kernel
            # kills every process of the pid namespace: the whole sandbox goes with it.
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self._wait_gone()
        self._stderr.close()
        if self._watch is not None:
            self._watch.close()
        if self.group is not None:
            self.group.remove()

    def _wait_gone(self) -> None:
        """Until no process of the sandbox is left (the killed bwrap does not wait for that).

        The namespace's init exits only after the kernel has reaped every other process of
        the namespace, so its pidfd turning readable means the sandbox is empty.  Without a
        pidfd (killed before it answered) fall back to looking for the sandbox's uid.
        """
        deadline = time.monotonic() + DEATH_WAIT_S
        if self._init_fd is not None:
            try:
                wait_readable(self._init_fd, DEATH_WAIT_S)
            finally:
                os.close(self._init_fd)
                self._init_fd = None
            return
        if self.uid is None:
            return
        while _count_processes(self.uid) and time.monotonic() < deadline:
            time.sleep(0.002)

    def death(self) -> tuple[CallError, str]:
        try:
            code = self.proc.wait(timeout=1.0)  # bwrap exits right after the worker
        except subprocess.TimeoutExpired:
            return CallError.CRASH, "the sandbox closed its reply channel and was restarted"
        if code > 128:  # bwrap reports a worker killed by a signal as 128 + signo
            return signal_death(code - 128)
        if code < 0:
            return signal_death(-code)
        return CallError.CRASH, f"the sandbox process exited (status {code}) and was restarted"

    def diagnostics(self) -> str:
        if self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].decode(errors="replace").strip()


class BwrapSandbox(ProcessSandbox):
    """Bundle code in a bubblewrap sandbox (the default backend)."""

    backend = "bwrap"
    loads_bytecode = True  # the worker runs this host's interpreter (bytecode.py)

    def __init__(
        self, bundle_dir: Path, limits: Limits | None = None, *, fork: bool | None = None
    ) -> None:
        self.root = os.geteuid() == 0
        probe(self.root)
        # Forked workers (fork.py, zygote.py): the default on root hosts, which they need.
        self.fork = fork_requested(self.root) if fork is None else fork
        if self.fork and not self.root:
            raise SandboxUnavailable(
                f"forked bwrap workers ({ENV_SWITCH}=1) need a root host (they mount and "
                "drop to a fresh uid per episode); unset it to start each worker with bwrap"
            )
        super().__init__(bundle_dir, limits)
        self.uid: int | None = None

    def _prepare_state(self, state: Path) -> None:
        # Runs only while no worker of this sandbox is alive (a fresh state, or a restart after
        # kill() waited for the old sandbox to be empty); chown_tree follows no links anyway.
        if self.root and self.uid is not None:
            chown_tree(state, self.uid, self.uid)

    def _launch(self, state: Path | None) -> WorkerHandle:
        limits = self.limits
        rlimits = {
            "AS": limits.memory_bytes,
            "CPU": limits.cpu_seconds,
            "FSIZE": limits.max_file_bytes,
            "CORE": 0,
        }
        # A fresh uid per launch: processes of a killed worker may take a moment to vanish and
        # must not count against the next worker's NPROC.
        identity = plan_identity(self.root, rlimits, limits.max_processes)
        # seal: a fresh keyring, no capabilities, the drop checked (seal.py)
        extra: dict[str, object] = {"reap_strays": True, "seal": True}
        if self.bytecode:
            extra["bytecode"] = f"{SANDBOX_BUNDLE}/{BYTECODE_DIR}"
        if self._load is not None and self._load.get("ok"):
            # The bundle's three files imported in an earlier worker (describe_tools reported
            # on all of them): later workers import the gold solution at its first use, as
            # episodes never run it (trip-planning: 19M of a start's 283M instructions).
            extra["defer"] = ["solution.py"]
        if identity.uid is not None:
            self.uid = identity.uid
            extra.update(uid=self.uid, gid=self.uid)
            if state is not None:
                self._prepare_state(state)
        extra["rlimits"] = {name: [value, value] for name, value in identity.rlimits.items()}
        try:
            package = worker_package(SANDBOX_PACKAGE)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot stage the sandbox worker's code: {exc}") from None
        if self.fork:  # the same worker, forked by this process's fork server (fork.py)
            return launch_forked(
                server=fork_server(package, SANDBOX_PACKAGE, _ENV, _spawn),
                config=json.loads(self.worker_config(**extra)),
                stage=self.stage,
                state=state,
                limits=limits,
                uid=self.uid,
                watch=_watch_init,
            )
        mounts: list[Bind | Tmpfs] = [
            Bind(str(package), SANDBOX_PACKAGE),
            Bind(str(self.stage), SANDBOX_BUNDLE),
        ]
        if state is not None:
            mounts.append(Bind(str(state), SANDBOX_STATE, writable=True))
        mounts.append(Tmpfs("/tmp", mode="0755", readonly=True))
        spec = JailSpec(
            root=self.root, mounts=tuple(mounts), chdir=SANDBOX_STATE if state is not None else "/"
        )
        argv = build_argv(spec) + [
            str(python_executable()),
            "-I",
            "-S",
            "-B",
            WORKER_PYC,
            self.worker_config(**extra),
        ]
        # The worker's processes together: a cgroup where the host has one (cgroup.py), joined
        # by a shell that execs bwrap (no preexec_fn: Popen keeps its cheap vfork).
        group = open_cgroup(limits.memory_bytes, limits.max_processes)
        if group is not None:
            argv = group.join_argv(argv)
        try:
            return BwrapWorker(argv, self.uid if self.root else None, group)
        except BaseException:
            if group is not None:
                group.remove()
            raise


def bwrap_available() -> bool:
    try:
        probe(os.geteuid() == 0)
    except SandboxUnavailable:
        return False
    return True
