"""Reading files that a jail or a hostile input wrote, on the host, without following links.

The host runs as root, so a path a test run, an agent or a repository controls must never be
opened the ordinary way: a link swapped in (``report.xml -> /root/secret``, a gold patch that
creates ``notes.txt -> /proc/self/environ``) would make the host read — and hand back — a file
the jail itself could never see.  Every component is opened relative to its parent's directory
fd with ``O_NOFOLLOW``; only a regular file is read, and only up to a bound checked on the open
file (``fstat``), so a huge or growing file costs nothing beyond the bound.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = (
    os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
)  # NONBLOCK: a FIFO never hangs us


class UnsafeFile(OSError):
    """The path is a link, not a regular file, outside its root, or over the size bound.

    ``reason`` says what is wrong without the path, for callers that show a path of their own."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class TooLarge(UnsafeFile):
    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(f"{path} is {size} bytes, over the {limit}-byte limit")
        self.size, self.limit = size, limit


def open_regular(root: Path, rel: str) -> tuple[int, int]:
    """``(fd, size)`` of the regular file ``root/rel``; no component of ``rel`` may be a link.

    ``root`` itself is trusted (the host made it).  Raises :class:`UnsafeFile` (or
    ``FileNotFoundError``) otherwise; the caller closes the fd."""
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or any(p in ("..", ".") for p in parts):
        raise UnsafeFile(f"{rel!r} is not a plain relative path")
    dir_fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as err:
                raise UnsafeFile(f"{rel}: {part} is a link or not a directory") from err
            os.close(dir_fd)
            dir_fd = nxt
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise
        except OSError as err:  # ELOOP: a link
            raise UnsafeFile(f"{rel} is a link or cannot be opened ({err.strerror})") from err
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFile(f"{rel} is not a regular file")
    return fd, info.st_size


def read_regular(root: Path, rel: str, *, max_bytes: int) -> bytes:
    """The bytes of the regular file ``root/rel`` (see :func:`open_regular`), at most ``max_bytes``
    (:class:`TooLarge` when the file is larger)."""
    fd, size = open_regular(root, rel)
    with os.fdopen(fd, "rb") as file:
        if size > max_bytes:
            raise TooLarge(rel, size, max_bytes)
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew after the fstat
        raise TooLarge(rel, len(data), max_bytes)
    return data


def read_file(path: Path, *, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` whose parent directories the caller trusts (the
    last component is opened with ``O_NOFOLLOW``), at most ``max_bytes`` (:class:`TooLarge`).

    ``FileNotFoundError`` when absent; :class:`UnsafeFile` for a link, a FIFO, a directory."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as err:  # ELOOP: a link
        reason = f"cannot be opened ({err.strerror}; links are not followed)"
        raise UnsafeFile(f"{path} {reason}", reason) from err
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{path} is not a regular file", "is not a regular file")
        if info.st_size > max_bytes:
            raise TooLarge(str(path), info.st_size, max_bytes)
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew after the fstat
        raise TooLarge(str(path), len(data), max_bytes)
    return data


def read_text_or_none(root: Path, rel: str, *, max_bytes: int) -> str | None:
    """:func:`read_regular` as UTF-8 text (errors replaced), or None when it is missing, a link,
    not a regular file or too large — for readers that treat such files as absent."""
    try:
        return read_regular(root, rel, max_bytes=max_bytes).decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None
