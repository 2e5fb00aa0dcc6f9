"""Copy-on-reset of a bundle's ``state/`` into a fresh, size-limited episode directory.

The episode directory is a :class:`~envgym.sandbox.quota.BoundedDir` (its
own tmpfs with a size limit, so a tool cannot fill host RAM).  A refill never walks what the
last episode left: it mounts a *fresh* tmpfs on the same path (``BoundedDir.wipe``) and writes
the pristine files into it with ``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to directory fds.
A worker of the last episode that is still running keeps only the old, detached tmpfs; the
sandbox sees that the directory is a new filesystem and starts a fresh worker for it
(docs/SANDBOX.md, "Episodes").  Without mount rights the directory is renamed away and
recreated instead (a new inode; no size limit: ``EpisodeDirs.bounded`` is False).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envgym.bundle_limits import read_tree
from envgym.sandbox.quota import DEFAULT_QUOTA_BYTES, BoundedDir

QUOTA_ENV = "ENVGYM_STATE_QUOTA_BYTES"  # overrides the default episode quota


class StateRefreshError(OSError):
    """The episode directory could not be refilled safely."""


@dataclass(frozen=True)
class _Entry:
    rel: str
    data: bytes | None  # None for a directory
    mode: int


def default_workdir_root() -> Path | None:
    """Where episode directories go: ``$ENVGYM_WORKDIR``, else tmpfs (/dev/shm) when writable.

    tmpfs makes copy-on-reset of a small SQLite state ~3x faster than a disk-backed /tmp.
    """
    env = os.environ.get("ENVGYM_WORKDIR")
    if env:
        return Path(env)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


class PristineState:
    """The bundle's initial state, read once into memory, written out on every reset."""

    def __init__(self, source: Path) -> None:
        # Bounded before anything is read (sizes, entries, depth) and never through a link:
        # this copy lives in memory and in every episode's tmpfs (envgym.bundle_limits).
        self.entries = tuple(_Entry(rel, data, mode) for rel, data, mode in read_tree(source))

    def write_into(self, dest: Path) -> None:
        """Make ``dest`` (which must exist) hold exactly the pristine state."""
        root_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            _clear(root_fd)
            for entry in self.entries:
                parent, _, name = entry.rel.rpartition("/")
                dir_fd = _open_dir(root_fd, parent) if parent else root_fd
                try:
                    if entry.data is None:
                        os.mkdir(name, entry.mode | 0o700, dir_fd=dir_fd)
                    else:
                        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                        fd = os.open(name, flags, entry.mode | 0o600, dir_fd=dir_fd)
                        try:
                            view = memoryview(entry.data)
                            while view:
                                view = view[os.write(fd, view) :]
                        finally:
                            os.close(fd)
                except FileExistsError as exc:
                    raise StateRefreshError(
                        f"{entry.rel} reappeared while the state was refilled"
                    ) from exc
                finally:
                    if dir_fd != root_fd:
                        os.close(dir_fd)
        finally:
            os.close(root_fd)


def _open_dir(root_fd: int, rel: str) -> int:
    fd = os.dup(root_fd)
    for part in rel.split("/"):
        try:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _clear(dir_fd: int) -> None:
    """Remove everything inside the directory ``dir_fd`` without following links."""
    for entry in os.scandir(dir_fd):
        info = os.stat(entry.name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                _clear(sub)
            finally:
                os.close(sub)
            os.rmdir(entry.name, dir_fd=dir_fd)
        else:
            os.unlink(entry.name, dir_fd=dir_fd)


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Hand every directory and single-link regular file under ``root`` to ``uid:gid``.

    Walks with directory fds (``O_NOFOLLOW`` at every step, ``fchown`` on what was opened), so
    a symlink, or a directory swapped for a symlink mid-walk, is never followed to a host file
    (``os.walk`` + ``chown`` lost that race).  Hard-linked files are skipped (a
    host file smuggled in on a shared filesystem); entries that vanish mid-walk are skipped.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _chown_fd_tree(fd, uid, gid)
    finally:
        os.close(fd)


_GONE = (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.EACCES)


def _chown_fd_tree(dir_fd: int, uid: int, gid: int) -> None:
    os.fchown(dir_fd, uid, gid)
    for entry in os.scandir(dir_fd):
        try:
            info = os.stat(entry.name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                sub = os.open(
                    entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd
                )
                try:
                    _chown_fd_tree(sub, uid, gid)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                # O_NONBLOCK: a file swapped for a FIFO must not hang the host.
                fd = os.open(
                    entry.name,
                    os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY,
                    dir_fd=dir_fd,
                )
                try:
                    now = os.fstat(fd)
                    if stat.S_ISREG(now.st_mode) and now.st_nlink == 1:
                        os.fchown(fd, uid, gid)
                finally:
                    os.close(fd)
        except OSError as exc:
            if exc.errno not in _GONE:
                raise


def quota_from_env(default: int = DEFAULT_QUOTA_BYTES) -> int:
    raw = os.environ.get(QUOTA_ENV)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${QUOTA_ENV} must be a number of bytes, got {raw!r}") from None
    if value < 4096:
        raise ValueError(f"${QUOTA_ENV} must be at least 4096 bytes, got {value}")
    return value


class EpisodeDirs:
    """The private directories of one environment instance: the episode state (and scratch).

    ``quota_bytes`` (default ``$ENVGYM_STATE_QUOTA_BYTES`` or 256 MiB) is what an episode may
    add to the pristine state: each directory's tmpfs holds the pristine bytes plus the quota.
    """

    def __init__(self, source: Path, quota_bytes: int | None = None) -> None:
        self.pristine = PristineState(source)
        quota = quota_from_env() if quota_bytes is None else quota_bytes
        if not isinstance(quota, int) or isinstance(quota, bool) or quota < 4096:
            raise ValueError(f"quota_bytes must be an int of at least 4096, got {quota_bytes!r}")
        pristine_bytes = sum(len(e.data or b"") + 4096 for e in self.pristine.entries)
        self.size_bytes = quota + pristine_bytes
        # Directly under the work base (not in a private subdirectory), so that the first
        # BoundedDir of a later process sweeps the mounts a killed process left there.
        self.root = default_workdir_root() or Path(tempfile.gettempdir())
        self._boxes: dict[str, BoundedDir] = {}
        self.current = self._box("state").path
        self.bounded = self._boxes["state"].bounded

    def _box(self, name: str) -> BoundedDir:
        box = self._boxes.get(name)
        if box is None:
            box = self._boxes[name] = BoundedDir(
                self.size_bytes, base=self.root, prefix=f"envgym-{name}-", mode=0o755
            )
        return box

    def refill(self, *, fresh_filesystem: bool = True) -> Path:
        """A pristine state at the episode path: on a fresh filesystem (see the module doc), or
        with ``fresh_filesystem=False`` on the same tmpfs, emptied in place (no links followed)
        and refilled: the same size limit, without an unmount per episode.  Only for a backend
        where nothing of the last episode can still be writing there (the in-process one)."""
        return self._refill("state", fresh_filesystem)

    def _refill(self, name: str, fresh_filesystem: bool = True) -> Path:
        box = self._box(name)
        if fresh_filesystem:
            box.wipe()
        self.pristine.write_into(box.path)  # empties the directory first
        return box.path

    def lease(self) -> tuple[Path, Callable[[], None]]:
        """A new directory on its own fresh tmpfs holding the pristine state, and the function
        that unmounts and removes it: the state a pre-started worker is started on before its
        episode exists (sandbox/pool.py).  Thread-safe; the caller owns the directory."""
        box = BoundedDir(self.size_bytes, base=self.root, prefix="envgym-state-", mode=0o755)
        try:
            self.pristine.write_into(box.path)
        except BaseException:
            box.close()
            raise
        return box.path, box.close

    def scratch(self, name: str) -> Path:
        """A separate pristine copy (e.g. for running a gold solution beside the episode)."""
        if name == "state" or "/" in name or name in ("", ".", ".."):
            raise ValueError(f"scratch name must be a plain name other than 'state', got {name!r}")
        return self._refill(name)

    def cleanup(self) -> None:
        for box in self._boxes.values():
            box.close()
        self._boxes.clear()
