"""One jail builder: the bubblewrap argv and the uid/rlimit plan of every envgym jail.

The bundle worker (``bwrap.py``), the kernel jail (``kernel_jail.py``), the command jail
(``command_jail.py``) and the MCP suite's servers (``jail_exec.py``) all describe their jail as
a :class:`JailSpec` — mounts, network yes/no, working directory — and get the same guarantees
from :func:`build_argv`:

* own pid, ipc, uts (and, unless ``network``, net) namespaces, ``--die-with-parent``, a new
  session (no TIOCSTI into the host's terminal);
* a read-only root holding only the system directories, the interpreter's prefix and the
  spec's mounts; the spec's writable binds and tmpfs are the only writable places;
* as root: no user namespace (``RLIMIT_NPROC`` is never enforced for uid 0, not even uid 0 in
  a user namespace), every capability dropped except CAP_SETUID/CAP_SETGID, which the jail's
  first program uses to drop to the uid of :func:`plan_identity` before anything untrusted
  runs; as a user: a user namespace that may not create further ones.

Stdlib only: ``jail_exec.py`` loads it without the envgym package.
"""

from __future__ import annotations

import fcntl
import os
import posixpath
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

BWRAP = "/usr/bin/bwrap"
UID_BASE = 1 << 20  # far above login users and the usual /etc/subuid ranges
UID_SLOTS = 1 << 30  # jail uids are UID_BASE + slot
# Jail uids are claimed machine-wide with a one-byte lock per slot in this file (fcntl locks:
# released by the kernel when the claiming process exits, however it exits).
UID_REGISTRY = "envgym-jail-uids"
_REGISTRY_DIRS = ("/run", "/dev/shm", "/tmp")


class _UidRegistry:
    """The slots this process claimed, and the machine-wide registry that keeps other host
    processes off them.  A uid is never handed out twice by one process, nor while another
    process holds it: before, a packed (pid, counter % 1024) wrapped after 1024 launches, so a
    long episode shared its uid (its RLIMIT_NPROC, its per-uid kernel accounting) with a newer
    one, and host processes whose pids were equal modulo 2**20 drew the same uids."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._start_over()

    def _start_over(self) -> None:
        self._lock = threading.Lock()
        self._claimed: set[int] = set()
        self._next = int.from_bytes(os.urandom(4), "little") % UID_SLOTS

    def claim(self) -> int:
        with self._lock:
            fd = self._open()
            for _ in range(1 << 16):
                slot, self._next = self._next, (self._next + 1) % UID_SLOTS
                if slot in self._claimed:
                    continue
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot, os.SEEK_SET)
                except OSError:  # another host process holds it
                    continue
                self._claimed.add(slot)
                return UID_BASE + slot
        raise OSError("no free jail uid in 65536 tries (other envgym processes hold them)")

    def _open(self) -> int:
        if self._fd is None:
            folder = next((d for d in _REGISTRY_DIRS if os.path.isdir(d)), "/tmp")
            # Never closed: closing any fd of the file would drop every lock this process holds.
            self._fd = os.open(
                os.path.join(folder, UID_REGISTRY), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600
            )
        return self._fd

    def after_fork(self) -> None:
        """A forked child holds none of its parent's locks: it starts over elsewhere."""
        self._start_over()


_uids = _UidRegistry()
os.register_at_fork(after_in_child=_uids.after_fork)


# -- the parts every jail shares -------------------------------------------------------------


def allocate_uid() -> int:
    """A uid no other live jail on this machine uses (this process never hands it out again;
    other host processes skip it until this one exits): :class:`_UidRegistry`."""
    return _uids.claim()


def is_jail_uid(uid: int) -> bool:
    return uid >= UID_BASE


def python_executable() -> Path:
    """The base interpreter (not the venv's): jails mount its prefix and nothing else."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidate = Path(sys.base_prefix) / "bin" / version
    return candidate if candidate.exists() else Path(os.path.realpath(sys.executable))


# The fork server's jail (sandbox/zygote.py, root hosts only): no pid namespace of its own, so
# the pids it reports are the host's, and the capabilities each forked episode needs to make its
# own namespaces and mounts and to drop to its uid.  The server runs only envgym's trusted worker
# modules; every episode process drops these (bounding set included) before bundle code runs.
# CAP_NET_ADMIN brings each episode's loopback up (zygote._loopback_up); the server, with
# CAP_SYS_ADMIN in the host's pid namespace, could reach the host's network anyway.
FORK_SERVER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN", "CAP_SETPCAP", "CAP_NET_ADMIN")


def isolation(root: bool, network: bool = False, fork_server: bool = False) -> list[str]:
    """Namespaces and privileges (see the module docstring)."""
    if fork_server and not root:
        raise ValueError("the fork server's jail needs a root host")
    args = ["--unshare-ipc"] + ([] if fork_server else ["--unshare-pid"])
    args += [] if network else ["--unshare-net"]
    args += [
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "envgym",
    ]
    if root:
        caps = FORK_SERVER_CAPS if fork_server else ("CAP_SETUID", "CAP_SETGID")
        return args + ["--cap-drop", "ALL"] + [a for cap in caps for a in ("--cap-add", cap)]
    return args + ["--unshare-user", "--disable-userns"]


def system_mounts(python: Path) -> list[str]:
    """bwrap arguments for the system and Python directories, read-only."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("/lib", "/lib64", "/bin", "/sbin"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    prefix = Path(sys.base_prefix).resolve()
    if not prefix.is_relative_to("/usr") and python.is_relative_to(prefix):
        args += parents(prefix) + ["--ro-bind", str(prefix), str(prefix)]
    return args


def parents(path: Path) -> list[str]:
    """Create ``path``'s ancestors world-searchable.

    Left to bwrap, the directories on the way to a bind mount came out with the host's modes
    (/root: 0700), so once the jail dropped root it could not reach what was bound below them.
    """
    args: list[str] = []
    for parent in reversed(Path(path).parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


# -- the spec ---------------------------------------------------------------------------------


def _check_target(target: str) -> None:
    if not target.startswith("/") or posixpath.normpath(target) != target or target == "/":
        raise ValueError(
            f"a jail mount target must be a normalized absolute path other than /, got {target!r}"
        )


@dataclass(frozen=True)
class Bind:
    """A host path seen at ``target`` (read-only unless ``writable``); ancestors made 0755."""

    host: str
    target: str
    writable: bool = False

    def __post_init__(self) -> None:
        _check_target(self.target)

    def argv(self) -> list[str]:
        return parents(Path(self.target)) + [
            "--bind" if self.writable else "--ro-bind",
            str(self.host),
            self.target,
        ]


@dataclass(frozen=True)
class Tmpfs:
    """A fresh tmpfs at ``target`` (``size`` bytes; ``readonly`` remounts it read-only)."""

    target: str
    size: int | None = None
    mode: str = "01777"
    readonly: bool = False

    def __post_init__(self) -> None:
        _check_target(self.target)

    def argv(self) -> list[str]:
        args = ["--perms", self.mode] + (
            ["--size", str(self.size)] if self.size is not None else []
        )
        return (
            args
            + ["--tmpfs", self.target]
            + (["--remount-ro", self.target] if self.readonly else [])
        )


@dataclass(frozen=True)
class Dir:
    """An empty directory (in the root tmpfs, read-only once the root is remounted)."""

    target: str

    def __post_init__(self) -> None:
        _check_target(self.target)

    def argv(self) -> list[str]:
        return ["--dir", self.target]


@dataclass(frozen=True)
class Only:
    """``directory`` replaced by a read-only view of ``names`` in it (the rest hidden)."""

    directory: str
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        for name in self.names:
            if "/" in name or name in ("", ".", ".."):
                raise ValueError(
                    f"site_names must be plain names in {self.directory}, got {name!r}"
                )

    def argv(self) -> list[str]:
        site = Path(self.directory).resolve()
        args = ["--perms", "0755", "--tmpfs", str(site)]
        for name in self.names:
            path = site / name
            if path.exists():
                args += ["--ro-bind", str(path), str(path)]
        return args + ["--remount-ro", str(site)]


JailMount = Bind | Tmpfs | Dir | Only


@dataclass(frozen=True)
class JailSpec:
    """What one jail sees.  ``after_dev`` (a ``/dev/shm``) applies right after ``/proc`` and
    ``/dev``, then ``mounts`` in order (so a bind below a tmpfs comes after it)."""

    root: bool  # the host runs as root (see isolation)
    mounts: tuple[JailMount, ...] = ()
    network: bool = False
    chdir: str = "/"
    after_dev: tuple[JailMount, ...] = ()
    python: Path | None = None  # whose prefix to show (default: python_executable())
    fork_server: bool = False  # the zygote's jail (see FORK_SERVER_CAPS)

    def __post_init__(self) -> None:
        if not self.chdir.startswith("/"):
            raise ValueError(f"JailSpec.chdir must be absolute, got {self.chdir!r}")


def build_argv(spec: JailSpec) -> list[str]:
    """bwrap and its options, up to (not including) the program to run."""
    argv = [
        BWRAP,
        *isolation(spec.root, spec.network, spec.fork_server),
        *system_mounts(spec.python or python_executable()),
    ]
    # /proc and /dev first: a later --dev would hide a bind below /dev (episode states live
    # in /dev/shm, and the MCP servers see theirs at the host's path).
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for mount in (*spec.after_dev, *spec.mounts):
        argv += mount.argv()
    # The root tmpfs bwrap builds is owned by the jail's user in a user namespace (the non-root
    # host case): freeze it, so the spec's writable mounts really are the only writable places.
    return argv + ["--remount-ro", "/", "--chdir", spec.chdir]


# -- the uid and rlimit plan ----------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """Who the jail's programs run as, and their rlimits (names as in ``resource.RLIMIT_*``)."""

    uid: int | None  # None: keep the host's (non-root host, inside a user namespace)
    rlimits: dict[str, int]


def count_processes(uid: int) -> int:
    """Processes (not threads) of ``uid`` on this machine."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                pass
    return count


def plan_identity(
    root: bool, rlimits: dict[str, int], max_processes: int, uid: int | None = None
) -> Identity:
    """A fresh uid (or ``uid``) as root, and ``RLIMIT_NPROC``: as root it counts that uid's
    processes only; as a user (in a user namespace) it counts all of the user's, so add what
    already runs."""
    limits = dict(rlimits)
    if root:
        limits["NPROC"] = max_processes
        return Identity(uid if uid is not None else allocate_uid(), limits)
    limits["NPROC"] = count_processes(os.getuid()) + max_processes
    return Identity(None, limits)


def write_identity(scratch: Path, uid: int, gid: int) -> tuple[Path, Path]:
    """A passwd and group naming the jail's uid: getpass.getuser(), ``id`` and ``whoami``
    work, and the host's account list is not shown."""
    passwd, group = scratch / "passwd", scratch / "group"
    passwd.write_text(f"root:x:0:0:root:/root:/bin/sh\njail:x:{uid}:{gid}:jail:/tmp:/bin/sh\n")
    group.write_text(f"root:x:0:\njail:x:{gid}:\n")
    for path in (passwd, group):
        path.chmod(0o644)
    return passwd, group


# ``python -I -S -c BOOT SPEC ARGV...``; SPEC is JSON: uid/gid (-1: keep), cwd, rlimits, and
# where to report: status_fd (bwrap), io (Docker: a directory with stdout, stderr and status
# files) or neither (the MCP servers: stdio is the protocol, nothing else may be written).
# The seal (seal.py: a new session keyring, no capability in any set, the key syscalls refused,
# the drop checked) is the same code the bundle worker runs: its source heads every launcher,
# and a launch with "seal" in its SPEC (bwrap jails; Docker has its own) calls it after setuid.
SEAL_SOURCE = (Path(__file__).parent / "seal.py").read_text()
_LAUNCHER = r"""
import json, os, resource, signal, sys
spec = json.loads(sys.argv[1]); argv = sys.argv[2:]
def report(text):
    if spec.get("status_fd") is not None:
        os.write(spec["status_fd"], text.encode(errors="replace"))
    elif spec.get("io"):
        with open(spec["io"] + "/status", "a") as fh:
            fh.write(text)
    elif text != "R":
        os.write(2, ("jail: " + text + "\n").encode(errors="replace"))
report("R")
try:
    if spec.get("status_fd") is not None:
        os.set_inheritable(spec["status_fd"], False)  # closed by exec: the command never has it
    if spec.get("io"):
        for fd, name in ((1, "stdout"), (2, "stderr")):
            out = os.open(spec["io"] + "/" + name, os.O_WRONLY | os.O_APPEND)
            os.dup2(out, fd); os.close(out)
    for name, value in spec["rlimits"].items():
        which = getattr(resource, "RLIMIT_" + name)
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)  # raising a hard limit needs a capability we dropped
        resource.setrlimit(which, (value, value))
    if spec["uid"] >= 0:
        os.setgroups([]); os.setgid(spec["gid"]); os.setuid(spec["uid"])
        if os.getuid() != spec["uid"] or os.geteuid() != spec["uid"]:
            raise OSError("failed to drop privileges")
    if spec.get("seal"):
        try:
            seal(spec["uid"] if spec["uid"] >= 0 else None, spec["gid"] if spec["uid"] >= 0 else None)
        except SystemExit as exc:
            raise OSError(str(exc)) from None
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    os.chdir(spec["cwd"])
except OSError as exc:
    report("cannot prepare the command (working directory %s): %s" % (spec["cwd"], exc))
    os._exit(126)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    report("cannot run %r: %s" % (argv[0], exc.strerror or exc))
    os._exit(127)
"""
BOOT = SEAL_SOURCE + _LAUNCHER
