"""Reading files out of a directory somebody else wrote (a Harbor task to import), safely.

The directory is input: any of its entries may be a link to a host file (`/etc/shadow`,
`/proc/self/environ`), a FIFO that would block a reader, or a huge file.  Everything below the
directory is opened relative to directory descriptors with ``O_NOFOLLOW`` (a link is refused,
never followed, at every level), only regular files are read, and each read is bounded.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from envgym.envs.swe.instance import InstanceError

__all__ = ["MAX_TASK_FILE", "list_dirs", "open_dir", "read_text"]

MAX_TASK_FILE = 32 * 1024 * 1024
MAX_ENTRIES = 100_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _is_link(name: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _refusal(err: OSError, where: str, *, link: bool = False) -> InstanceError:
    if link or err.errno in (errno.ELOOP, errno.EMLINK):
        return InstanceError(
            "is a symbolic link; links in a task directory are not followed", where=where
        )
    if err.errno == errno.ENOTDIR:
        return InstanceError(
            "is not a directory (or a link to one, which is not followed)", where=where
        )
    return InstanceError(f"cannot open: {err.strerror}", where=where)


@contextmanager
def open_dir(path: Path, *, parent_fd: int | None = None) -> Iterator[int]:
    """A descriptor of the directory `path`; relative to `parent_fd` (then never a link)."""
    try:
        if parent_fd is None:  # the directory the user named: theirs to point anywhere
            fd = os.open(path, _DIR_FLAGS)
        else:
            fd = os.open(path.name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
    except FileNotFoundError:
        raise InstanceError("no such task directory", where=str(path)) from None
    except OSError as err:
        link = parent_fd is not None and _is_link(path.name, parent_fd)
        raise _refusal(err, str(path), link=link) from None
    try:
        yield fd
    finally:
        os.close(fd)


def read_text(dir_fd: int, relpath: str, *, where: Path, limit: int = MAX_TASK_FILE) -> str | None:
    """The UTF-8 text of `relpath` below `dir_fd`, or None when it does not exist.

    `InstanceError` naming the file for a link at any level, a non-regular file, a file over
    `limit` bytes or one that is not UTF-8.
    """
    parts = PurePosixPath(relpath).parts
    label = str(where / relpath)
    fds: list[int] = []
    try:
        current = dir_fd
        for part in parts[:-1]:
            try:
                current = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=current)
            except FileNotFoundError:
                return None
            except OSError as err:
                raise _refusal(err, str(where / part), link=_is_link(part, current)) from None
            fds.append(current)
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=current)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise _refusal(err, label) from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise InstanceError("is not a regular file", where=label)
            if info.st_size > limit:
                raise InstanceError(f"is larger than {limit} bytes", where=label)
            data = handle.read(limit + 1)
    finally:
        for opened in fds:
            os.close(opened)
    if len(data) > limit:
        raise InstanceError(f"is larger than {limit} bytes", where=label)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InstanceError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start})", where=label
        ) from None


def list_dirs(dir_fd: int, *, where: Path) -> list[str]:
    """Names of the directories directly below `dir_fd`, sorted; a link there is refused (a task
    directory that is a link could lead anywhere on the host)."""
    names: list[str] = []
    with os.scandir(dir_fd) as entries:
        for count, entry in enumerate(entries):
            if count >= MAX_ENTRIES:
                raise InstanceError(f"more than {MAX_ENTRIES} entries", where=str(where))
            if entry.is_symlink():
                raise InstanceError(
                    "is a symbolic link; links in a task directory are not followed",
                    where=str(where / entry.name),
                )
            if entry.is_dir(follow_symlinks=False):
                names.append(entry.name)
    return sorted(names)
