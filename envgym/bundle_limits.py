"""Bounded reading of a bundle: every size, count and depth the host reads is capped first.

Whoever wrote a bundle (a synthesis model, a download) chooses its sizes, and the host reads
``manifest.json``, ``tasks.jsonl`` and the three code files to validate them, hashes every file,
and holds ``state/`` in memory to copy it into every episode's tmpfs.  Unbounded, a sparse 2 GiB
state file costs 2 GiB of RAM at ``make`` and of tmpfs per episode, and a 100k-deep JSON line or
Python expression ends a command in a RecursionError.  So each read is checked against
:class:`BundleLimits` *before* it happens (sizes by ``fstat``: the apparent size and the blocks
really allocated), the directory walk never follows a link and uses one directory fd at a time,
JSON nesting is measured by a linear scan before ``json.loads`` can recurse, and every failure is
a :class:`BundleError` naming the file (and line) and the limit.
Limits and their variables: docs/BUNDLE.md, "Limits".
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from itertools import accumulate
from pathlib import Path
from typing import Any

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
ENV_PREFIX = "ENVGYM_BUNDLE_MAX_"
_CHUNK = 1 << 20


class BundleError(ValueError):
    """A malformed bundle.  ``file`` is relative to the bundle root."""

    def __init__(self, file: str, message: str, *, field: str | None = None) -> None:
        self.file = file
        self.field = field
        where = f"{file}: {field}: " if field else f"{file}: "
        super().__init__(where + message)


@dataclass(frozen=True)
class BundleLimits:
    """What the host accepts from a bundle.  Each field can be raised with the environment
    variable ``ENVGYM_BUNDLE_MAX_<FIELD>`` (e.g. ``ENVGYM_BUNDLE_MAX_STATE_BYTES``)."""

    manifest_bytes: int = 64 * KIB
    code_bytes: int = 4 * MIB  # each of tools.py, solution.py, verifier.py (parsed on the host)
    tasks_bytes: int = 256 * MIB
    task_line_bytes: int = 8 * MIB
    task_lines: int = 100_000
    json_depth: int = 64  # nesting of arrays/objects in the manifest and in each task line
    file_bytes: int = 128 * MIB  # any other file, state/ included (apparent and allocated size)
    state_bytes: int = 256 * MIB  # all of state/: held in memory, copied into every episode
    bundle_bytes: int = 1 * GIB  # every file of the bundle together (all are hashed)
    entries: int = 100_000  # files and directories in the bundle
    dir_depth: int = 32

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"bundle limit {f.name} must be a positive int, got {value!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BundleLimits:
        """The defaults, with every ``ENVGYM_BUNDLE_MAX_<FIELD>`` that is set applied."""
        env = os.environ if environ is None else environ
        given: dict[str, int] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None or not raw.strip():
                continue
            try:
                given[f.name] = int(raw)
            except ValueError:
                given[f.name] = 0
            if given[f.name] < 1:
                raise ValueError(
                    f"${ENV_PREFIX}{f.name.upper()} must be a whole number of at least 1, "
                    f"got {raw!r}"
                )
        return cls(**given)


def knob(limits: BundleLimits, name: str) -> str:
    """Which limit was passed, and how to raise it: ``(limit NAME = VALUE; raise it with $VAR)``."""
    return f"(limit {name} = {getattr(limits, name)}; raise it with ${ENV_PREFIX}{name.upper()})"


@dataclass(frozen=True)
class Entry:
    """One file or directory found by :func:`walk` (``rel`` relative to the walked root)."""

    rel: str
    is_dir: bool
    size: int  # max(apparent size, allocated blocks): what reading or copying it may cost
    mode: int


def _unreadable(where: str, exc: OSError) -> BundleError:
    """An OSError met while reading a bundle (a permission, a file that vanished or was swapped
    for a link mid-read) as the BundleError that names the path."""
    if exc.errno == errno.ELOOP:
        return BundleError(where, "is a symbolic link (it appeared while the bundle was read)")
    return BundleError(where, f"cannot be read: {exc.strerror}")


def _size(st: os.stat_result) -> int:
    # A sparse file has few blocks but reads (and copies into tmpfs) at its apparent size; a
    # preallocated one has blocks beyond its size.  Both are what the host may have to pay.
    return max(st.st_size, st.st_blocks * 512)


def open_dir(root_fd: int, rel: str, where: str) -> int:
    """A new fd on the directory ``rel`` under ``root_fd``, no component followed if a link."""
    fd = os.dup(root_fd)
    for part in [p for p in rel.split("/") if p]:
        try:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            raise _unreadable(where, exc) from None
        finally:
            os.close(fd)
        fd = nxt
    return fd


def walk(
    root_fd: int,
    limits: BundleLimits,
    file_cap: Callable[[str], str],
    *,
    prefix: str = "",
    skip: frozenset[str] = frozenset(),
) -> Iterator[Entry]:
    """Every entry under ``root_fd``, parents before children, never following a link.

    ``file_cap(rel)`` names the field of ``limits`` that bounds that file's size.  Links, FIFOs,
    sockets and devices, names that are not UTF-8, too many entries and too deep directories are
    refused as they are met, so a hostile tree costs at most ``limits.entries`` stat calls.
    Directories named in ``skip`` are listed but not entered.
    """
    pending = [("", 0)]
    count = 0
    while pending:
        rel_dir, depth = pending.pop()
        fd = open_dir(root_fd, rel_dir, prefix + rel_dir or ".")
        try:
            try:
                names = sorted(os.listdir(fd))
            except OSError as exc:
                raise _unreadable(prefix + rel_dir or ".", exc) from None
            for name in names:
                rel = f"{rel_dir}/{name}" if rel_dir else name
                shown = prefix + rel
                count += 1
                if count > limits.entries:
                    raise BundleError(
                        shown, f"too many files and directories {knob(limits, 'entries')}"
                    )
                try:
                    name.encode("utf-8")
                except UnicodeEncodeError:
                    raise BundleError(ascii(shown), "the name is not UTF-8") from None
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    target = os.readlink(name, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else ""
                except OSError as exc:
                    raise _unreadable(shown, exc) from None
                if stat.S_ISLNK(st.st_mode):
                    raise BundleError(
                        shown, f"is a symbolic link (to {target!r}); bundles may not contain links"
                    )
                if stat.S_ISDIR(st.st_mode):
                    if depth + 1 > limits.dir_depth:
                        raise BundleError(
                            shown, f"directories nest too deeply {knob(limits, 'dir_depth')}"
                        )
                    yield Entry(rel, True, 0, st.st_mode)
                    if name not in skip:
                        pending.append((rel, depth + 1))
                elif stat.S_ISREG(st.st_mode):
                    size = _size(st)
                    what = file_cap(rel)
                    if size > getattr(limits, what):
                        raise BundleError(
                            shown,
                            f"is too big: {st.st_size} bytes apparent, "
                            f"{st.st_blocks * 512} allocated {knob(limits, what)}",
                        )
                    yield Entry(rel, False, size, st.st_mode)
                else:
                    raise BundleError(
                        shown, "is not a regular file or directory (a FIFO, socket or device)"
                    )
        finally:
            os.close(fd)


def open_file(root_fd: int, rel: str, where: str) -> int:
    """An fd on the regular file ``rel`` under ``root_fd``; no component may be a link."""
    parent, _, name = rel.rpartition("/")
    dir_fd = open_dir(root_fd, parent, where) if parent else root_fd
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
    except OSError as exc:
        raise _unreadable(where, exc) from None
    finally:
        if dir_fd != root_fd:
            os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BundleError(where, "is not a regular file (it changed while the bundle was read)")
    return fd


def read_fd(fd: int, where: str, limits: BundleLimits, what: str) -> bytes:
    """All of ``fd`` (which it closes), refusing more than ``limits.<what>`` bytes before
    reading them."""
    cap = getattr(limits, what)
    try:
        st = os.fstat(fd)
        if _size(st) > cap:
            raise BundleError(
                where,
                f"is too big: {st.st_size} bytes apparent, {st.st_blocks * 512} "
                f"allocated {knob(limits, what)}",
            )
        parts: list[bytes] = []
        got = 0
        while chunk := os.read(fd, min(_CHUNK, cap + 1 - got)):
            parts.append(chunk)
            got += len(chunk)
            if got > cap:  # grew after the fstat
                raise BundleError(where, f"grew too big while read {knob(limits, what)}")
        return b"".join(parts)
    except OSError as exc:
        raise _unreadable(where, exc) from None
    finally:
        os.close(fd)


def hash_fd(fd: int, where: str, update: Callable[[bytes], Any]) -> None:
    """Feed ``rel\\0size\\0`` and the bytes of ``fd`` (which it closes) to ``update``, streamed."""
    try:
        size = os.fstat(fd).st_size
        update(f"{where}\0{size}\0".encode())
        left = size
        while left > 0:
            chunk = os.read(fd, min(_CHUNK, left))
            if not chunk:
                break
            update(chunk)
            left -= len(chunk)
        if left or os.read(fd, 1):
            raise BundleError(where, "changed size while it was hashed")
    except OSError as exc:
        raise _unreadable(where, exc) from None
    finally:
        os.close(fd)


def read_tree(
    source: Path, limits: BundleLimits | None = None, *, where: str = "state"
) -> list[tuple[str, bytes | None, int]]:
    """``(rel, bytes or None for a directory, permission bits)`` of everything under ``source``,
    parents first: the in-memory copy of a bundle's ``state/``, bounded by ``limits`` (default
    :meth:`BundleLimits.from_env`) before each byte is read, never through a link."""
    limits = BundleLimits.from_env() if limits is None else limits
    try:
        root_fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise BundleError(
            where, f"cannot be opened as a directory without following links: {exc.strerror}"
        ) from None
    out: list[tuple[str, bytes | None, int]] = []
    total = 0
    try:
        for entry in walk(root_fd, limits, lambda rel: "file_bytes", prefix=f"{where}/"):
            if entry.is_dir:
                out.append((entry.rel, None, entry.mode & 0o777))
                continue
            shown = f"{where}/{entry.rel}"
            total += entry.size
            if total > limits.state_bytes:
                raise BundleError(
                    shown, f"{where}/ holds too many bytes {knob(limits, 'state_bytes')}"
                )
            fd = open_file(root_fd, entry.rel, shown)
            out.append((entry.rel, read_fd(fd, shown, limits, "file_bytes"), entry.mode & 0o777))
    finally:
        os.close(root_fd)
    return out


# -- JSON ------------------------------------------------------------------------------------
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SCAN_CHUNK = 1 << 16
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def json_depth(text: str, stop_above: int | None = None) -> int:
    """How deeply arrays/objects nest in JSON ``text``, without recursing (linear time, C loops);
    with ``stop_above``, the scan may stop (and answer) as soon as the depth passes it.

    Escaped backslashes, then escaped quotes, are dropped (outside strings JSON has no
    backslashes, so reading pairs left to right is exact); the quotes left then alternate
    open/close, so every other piece between them is outside strings, and only its brackets count.
    """
    bare = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(bare.split('"')[::2])
    brackets = _NOT_BRACKETS.sub("", outside)
    depth = top = 0
    for start in range(0, len(brackets), _SCAN_CHUNK):
        sums = list(
            accumulate(map(_STEP.__getitem__, brackets[start : start + _SCAN_CHUNK]), initial=depth)
        )
        top, depth = max(top, max(sums)), sums[-1]
        if stop_above is not None and top > stop_above:
            break
    return top


def parse_json(text: str, file: str, limits: BundleLimits, *, field: str | None = None) -> Any:
    """``json.loads`` of bundle text that cannot recurse deeply or blow up; BundleError if bad."""
    import json

    max_depth = limits.json_depth
    # fewer brackets than the limit cannot nest past it: most lines skip the scan
    opened = text.count("[") + text.count("{")
    too_deep = BundleError(file, f"JSON nests too deeply {knob(limits, 'json_depth')}", field=field)
    if opened > max_depth and json_depth(text, stop_above=max_depth) > max_depth:
        raise too_deep
    try:
        data = json.loads(text)
    except RecursionError:  # defensive: the scan above should make this unreachable
        raise too_deep from None
    except ValueError as exc:  # JSONDecodeError, and integers of more than 4300 digits
        raise BundleError(file, f"not valid JSON: {exc}", field=field) from None
    if _SURROGATE.search(text):
        # A lone surrogate (\ud800) decodes to a str that cannot be written as UTF-8 later
        # (into the sandbox, onto the terminal); refuse it here, where the file is named.
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BundleError(
                file, "a string holds an unpaired UTF-16 surrogate (\\ud800-\\udfff)", field=field
            ) from None
    return data
