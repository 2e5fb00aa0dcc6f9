"""Size-limited directories: each one is its own tmpfs, so a tool cannot fill host RAM.

Episode directories used to live directly on host ``/dev/shm`` with only a
per-file limit (``RLIMIT_FSIZE``), so 40 files of 16 MiB grew host ``/dev/shm`` by 640 MiB.
A :class:`BoundedDir` mounts a fresh tmpfs with ``size=`` (bytes of data) and ``nr_inodes=``
(tmpfs inodes cost kernel memory that ``size`` does not count) on a new directory: writes past
the size fail with ``ENOSPC`` and nothing lands on the filesystem around it.

Mounting needs root (``CAP_SYS_ADMIN``).  Without it :func:`quota_supported` is False and a
:class:`BoundedDir` is a plain directory with ``bounded == False``: nothing is enforced, and
callers must say so (docs/SANDBOX.md).  ``mount(2)``/``umount2(2)`` are called through ctypes:
no subprocess on the reset path.

Mount directories are named ``<prefix><pid>.<token>.bounded``; the first BoundedDir of a
process under a base directory unmounts and removes those of dead pids, so a killed process
does not leak their RAM for longer than until the next run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import secrets
import threading
import weakref
from pathlib import Path
from types import TracebackType

DEFAULT_QUOTA_BYTES = 256 * 2**20
BYTES_PER_INODE = 16 * 1024  # nr_inodes = size / this (at least _MIN_INODES)
_MIN_INODES = 1024
_MS_NOSUID, _MS_NODEV = 0x2, 0x4
_MNT_DETACH = 0x2
_SUFFIX = ".bounded"
_NAME = re.compile(r"(\d+)\.[0-9a-f]{16}" + re.escape(_SUFFIX) + "$")

_libc: ctypes.CDLL | None = None
_swept: set[str] = set()
_lock = threading.Lock()
_supported: list[bool] = []


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]
        lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc = lib
    return _libc


def _mount_tmpfs(path: Path, options: str) -> None:
    if (
        _c().mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode())
        != 0
    ):
        err = ctypes.get_errno()
        raise OSError(err, f"cannot mount a tmpfs on {path} ({options}): {os.strerror(err)}")


def _umount(path: Path) -> bool:
    """Lazily unmount ``path``; False when nothing was mounted there."""
    if _c().umount2(os.fsencode(path), _MNT_DETACH) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOENT):  # not a mount point (any more)
        return False
    raise OSError(err, f"cannot unmount {path}: {os.strerror(err)}")


def quota_supported() -> bool:
    """True when this process can mount size-limited tmpfs directories (root/CAP_SYS_ADMIN).

    Probed once by mounting and unmounting a tiny tmpfs (euid 0 alone is not enough: a
    container without CAP_SYS_ADMIN is root but cannot mount).
    """
    with _lock:
        if not _supported:
            _supported.append(_probe())
        return _supported[0]


def _probe() -> bool:
    if os.geteuid() != 0:
        return False
    import tempfile

    probe = Path(tempfile.mkdtemp(prefix="envgym-quota-probe-"))
    try:
        _mount_tmpfs(probe, "size=65536,nr_inodes=16,mode=0700")
    except OSError:
        return False
    finally:
        try:
            _umount(probe)
        except OSError:
            pass
        probe.rmdir()
    return True


def default_base() -> Path:
    """``$ENVGYM_WORKDIR``, else ``/dev/shm`` when writable, else the temp directory."""
    env = os.environ.get("ENVGYM_WORKDIR")
    if env:
        return Path(env)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    import tempfile

    return Path(tempfile.gettempdir())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(base: Path) -> list[Path]:
    """Unmount and remove BoundedDirs under ``base`` whose owning process is gone."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        match = _NAME.search(entry.name)
        if match is None or int(match.group(1)) == os.getpid() or _alive(int(match.group(1))):
            continue
        path = Path(entry.path)
        try:
            while _umount(path):  # a crashed wipe may have stacked two mounts
                pass
            if path.is_dir() and not path.is_symlink():
                import shutil

                shutil.rmtree(path, ignore_errors=True)  # plain (unbounded) leftovers
            removed.append(path)
        except OSError:
            continue  # another process is sweeping it, or it is not ours to remove
    return removed


def _teardown(path: Path, bounded: bool) -> None:
    import shutil

    if bounded:
        try:
            while _umount(path):
                pass
        except OSError:
            return  # still mounted: leave the directory for the sweep of a later process
    shutil.rmtree(path, ignore_errors=True)


class BoundedDir:
    """A directory on its own size-limited tmpfs; writes past the size fail with ENOSPC.

    ``uid``/``gid``/``mode`` are those of the tmpfs root (so a sandbox user can own it without
    anyone chowning a tree).  Without mount rights (:func:`quota_supported` False) it is a
    plain directory and ``bounded`` is False.
    """

    def __init__(
        self,
        size_bytes: int = DEFAULT_QUOTA_BYTES,
        *,
        base: str | Path | None = None,
        prefix: str = "envgym-",
        mode: int = 0o700,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        if not isinstance(size_bytes, int) or isinstance(size_bytes, bool) or size_bytes < 4096:
            raise ValueError(
                f"size_bytes must be an int of at least 4096 bytes, got {size_bytes!r}"
            )
        if not 0 <= mode <= 0o7777:
            raise ValueError(f"mode must be a permission mode like 0o700, got {mode!r}")
        for name, value in (("uid", uid), ("gid", gid)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        self.size_bytes = size_bytes
        self.mode = mode
        self.uid, self.gid = uid, gid
        root = Path(base) if base is not None else default_base()
        if not root.is_dir():
            raise FileNotFoundError(f"base directory {root} for a BoundedDir does not exist")
        key = str(root.resolve())
        with _lock:
            first = key not in _swept
            _swept.add(key)
        if first:
            sweep_stale(root)
        self.path = root / f"{prefix}{os.getpid()}.{secrets.token_hex(8)}{_SUFFIX}"
        self.path.mkdir(mode=0o700)
        self.bounded = quota_supported()
        self._closed = False
        try:
            self._mount()
        except BaseException:
            self.path.rmdir()
            raise
        # Dropped without close() (or at interpreter exit): still unmount, or the RAM stays
        # taken until the next process sweeps it.
        self._finalizer = weakref.finalize(self, _teardown, self.path, self.bounded)

    def _options(self) -> str:
        inodes = max(_MIN_INODES, self.size_bytes // BYTES_PER_INODE)
        options = f"size={self.size_bytes},nr_inodes={inodes},mode={self.mode:04o}"
        if self.uid is not None:
            options += f",uid={self.uid}"
        if self.gid is not None:
            options += f",gid={self.gid}"
        return options

    def _mount(self) -> None:
        if self.bounded:
            _mount_tmpfs(self.path, self._options())
            return
        os.chmod(self.path, self.mode)
        if self.uid is not None or self.gid is not None:
            os.chown(
                self.path,
                -1 if self.uid is None else self.uid,
                -1 if self.gid is None else self.gid,
            )

    def wipe(self) -> None:
        """Empty it without walking it: a fresh tmpfs replaces the old one (same path).

        Whoever still has the old tmpfs open or bind-mounted (a sandbox of the last episode)
        keeps writing into the *old* one, which the kernel frees when its last user goes.
        Unbounded (plain) directories are renamed away and removed, which does not follow links.
        """
        if self._closed:
            raise RuntimeError(f"BoundedDir {self.path} is closed")
        if self.bounded:
            _umount(self.path)
            self._mount()
            return
        import shutil

        trash = self.path.with_name(self.path.name + f".old-{secrets.token_hex(4)}")
        os.rename(self.path, trash)
        self.path.mkdir(mode=0o700)
        self._mount()
        shutil.rmtree(trash, ignore_errors=True)

    def usage(self) -> int:
        """Bytes of data stored (whole tmpfs when bounded)."""
        if self.bounded:
            st = os.statvfs(self.path)
            return (st.f_blocks - st.f_bfree) * st.f_frsize
        total = 0
        for directory, _dirs, files in os.walk(self.path):
            for name in files:
                try:
                    total += os.lstat(os.path.join(directory, name)).st_size
                except OSError:
                    pass
        return total

    def close(self) -> None:
        """Unmount and remove; idempotent."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> BoundedDir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "bounded" if self.bounded else "UNBOUNDED"
        return f"BoundedDir({str(self.path)!r}, {self.size_bytes} bytes, {kind})"
