"""Unified-diff text: which files a patch touches, which of them are tests, splitting by file.

Pure text work (no git), shared by `repo.apply_patch` (to refuse paths outside the repository
before git sees them), the miner (source vs test split) and interchange.  Paths follow `git
apply`'s default `-p1`: the first component of `---`/`+++` paths (`a/`, `b/`) is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
TEST_DIRS = frozenset({"tests", "test"})


@dataclass(frozen=True)
class FilePatch:
    """One file's section of a patch: its text exactly as in the patch, and its paths."""

    old_path: str | None  # None for a created file
    new_path: str | None  # None for a deleted file
    text: str
    binary: bool

    @property
    def path(self) -> str:
        """The path the file has after the patch (before it, for a deletion)."""
        return self.new_path or self.old_path or ""


def _unquote(raw: str) -> str:
    """Undo git's C-style quoting of a path ("a/tab\\there", octal bytes for non-ASCII)."""
    if not (len(raw) >= 2 and raw[0] == raw[-1] == '"'):
        return raw
    out = bytearray()
    body, i = raw[1:-1], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567":
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, ord(nxt)))
            i += 2
            continue
        out.extend(ch.encode())
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def _strip_p1(path: str) -> str | None:
    path = _unquote(path.split("\t", 1)[0].rstrip("\r\n"))
    if path == "/dev/null":
        return None
    return path.split("/", 1)[1] if "/" in path else path


def _header_paths(line: str) -> tuple[str | None, str | None]:
    """Paths of a `diff --git a/X b/Y` line; only trusted when the two halves agree."""
    rest = line[len("diff --git ") :].rstrip("\r\n")
    if rest.startswith('"'):
        end = rest.index('"', 1) if '"' in rest[1:] else len(rest)
        while end < len(rest) and rest[end - 1] == "\\":  # an escaped quote inside
            end = rest.index('"', end + 1)
        old, new = rest[: end + 1], rest[end + 2 :]
        return _strip_p1(old), _strip_p1(new)
    half = (len(rest) - 1) // 2  # "a/P b/P": the same P on both sides
    if rest[half] == " " and rest[:half][2:] == rest[half + 1 :][2:]:
        return _strip_p1(rest[:half]), _strip_p1(rest[half + 1 :])
    old, _, new = rest.partition(" b/")
    return _strip_p1(old), _strip_p1("b/" + new)


def _sections(text: str) -> list[list[str]]:
    """The patch's lines grouped per file; a preamble before the first file is dropped."""
    sections: list[list[str]] = []
    current: list[str] | None = None
    old_left = new_left = 0
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if old_left > 0 or new_left > 0:  # inside a hunk: "--- x" here is a removed line
            if line.startswith("\\"):
                pass
            elif line.startswith("-"):
                old_left -= 1
            elif line.startswith("+"):
                new_left -= 1
            else:
                old_left -= 1
                new_left -= 1
            current.append(line)  # type: ignore[union-attr]
            continue
        starts_plain = (
            line.startswith("--- ")
            and index + 1 < len(lines)
            and lines[index + 1].startswith("+++ ")
            and (current is None or any(x.startswith(("+++ ", "@@")) for x in current))
        )
        if line.startswith("diff --git ") or starts_plain:
            current = []
            sections.append(current)
        if current is None:
            continue
        hunk = _HUNK.match(line)
        if hunk:
            old_left = int(hunk.group(1)) if hunk.group(1) is not None else 1
            new_left = int(hunk.group(2)) if hunk.group(2) is not None else 1
        current.append(line)
    return sections


def parse_patch(text: str) -> list[FilePatch]:
    """The file sections of a unified diff (git-style or plain), in patch order."""
    files = []
    for lines in _sections(text):
        old = new = None
        seen_old = seen_new = binary = False
        header: tuple[str | None, str | None] = (None, None)
        for line in lines:
            if line.startswith("@@"):
                break  # headers end where the first hunk starts
            if line.startswith("diff --git "):
                header = _header_paths(line)
            elif line.startswith("--- "):
                old, seen_old = _strip_p1(line[4:]), True
            elif line.startswith("+++ "):
                new, seen_new = _strip_p1(line[4:]), True
            elif line.startswith(("rename from ", "copy from ")):
                old, seen_old = _unquote(line.split(" ", 2)[2].rstrip("\r\n")), True
            elif line.startswith(("rename to ", "copy to ")):
                new, seen_new = _unquote(line.split(" ", 2)[2].rstrip("\r\n")), True
            elif line.startswith("new file mode"):
                header = (None, header[1])
            elif line.startswith("deleted file mode"):
                header = (header[0], None)
            elif line.startswith(("GIT binary patch", "Binary files ")):
                binary = True
        if not seen_old:
            old = header[0]
        if not seen_new:
            new = header[1]
        files.append(FilePatch(old, new, "".join(lines), binary))
    return files


def changed_files(patch: str) -> list[str]:
    """Every path a patch reads or writes (both sides of a rename), once, in patch order."""
    seen: dict[str, None] = {}
    for section in parse_patch(patch):
        for path in (section.old_path, section.new_path):
            if path:
                seen.setdefault(path, None)
    return list(seen)


def is_test_file(path: str) -> bool:
    """A test file: under a `tests/` or `test/` directory, `test_*.py`, `*_test.py`, `conftest.py`."""
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    name = parts[-1]
    return (
        any(part in TEST_DIRS for part in parts[:-1])
        or (name.startswith("test_") and name.endswith(".py"))
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def select_test_files(paths: Iterable[str]) -> list[str]:
    """The test files among `paths` (see `is_test_file`), in their order."""
    return [p for p in paths if is_test_file(p)]


def split_patch(patch: str) -> tuple[str, str]:
    """`(source patch, test patch)`: each file's section goes whole to one side."""
    source, tests = [], []
    for section in parse_patch(patch):
        (tests if is_test_file(section.path) else source).append(section.text)
    return "".join(source), "".join(tests)


def unsafe_paths(paths: Iterable[str]) -> list[str]:
    """Paths that would leave the repository or reach into `.git` (absolute, `..`, `.git`)."""
    bad = []
    for path in paths:
        parts = path.replace("\\", "/").split("/")
        if (
            path.startswith("/")
            or not path.strip()
            or "\0" in path
            or any(p == ".." for p in parts)
            or any(p.casefold() == ".git" for p in parts)
        ):
            bad.append(path)
    return bad
