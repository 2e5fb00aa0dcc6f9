"""The SWE agent's file tools — ``view``, ``search``, ``str_replace``, ``create`` — on the host.

They run in the env's own process over the episode's workspace directory (the repository that
``bash`` sees at :data:`JAIL_ROOT`), so every path an agent names is confined here:

* a path is relative to the repository root, or absolute under :data:`JAIL_ROOT` (what the
  agent sees in ``bash``); any other absolute path is refused;
* the path is resolved with every link followed and must stay inside the workspace: a link the
  agent planted with ``bash`` (``ln -s /etc/passwd x``) reads as "outside the repository";
* ``.git`` is refused for reads and writes (editing git internals could fake the diff the reward
  is computed from; reading them adds nothing an agent needs that ``bash`` lacks);
* reads and writes are size-limited and only regular files are opened (a FIFO would block).

An agent cannot act between the check and the use: its only concurrent code runs in ``bash``,
and the jail kills every process a command started before the call returns.  Every mistake is a
:class:`FileToolError` whose message is written for the agent; the env turns it into a tool
message.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import re2

from envgym.envs.swe.safe_read import TooLarge, UnsafeFile, read_file

JAIL_ROOT = "/repo"  # where bash sees the repository; file tools accept this prefix too


class FileToolError(Exception):
    """An agent mistake (bad path, no match, too large); the message is shown to the agent."""


@dataclass(frozen=True)
class FileLimits:
    """Bounds on what one file-tool call reads, writes and shows."""

    max_read_bytes: int = 4 * 1024**2  # bigger files are refused by view/str_replace/search
    max_write_bytes: int = 1024**2  # content a create/str_replace may leave in one file
    max_output_chars: int = 16_000  # what one call shows; the rest is cut with a note
    max_line_chars: int = 1_000  # one shown line, cut with a marker
    max_listing: int = 400  # directory entries shown
    max_matches: int = 100  # search results shown
    max_search_bytes: int = 64 * 1024**2  # total bytes search reads before it stops
    max_pattern_chars: int = 512


_RE2_MEM = 8 << 20  # automaton memory per compiled search pattern


class Workspace:
    """The agent's view of one repository checkout at ``root``."""

    def __init__(self, root: Path, limits: FileLimits | None = None) -> None:
        self.root = Path(os.path.realpath(root))
        self.limits = limits or FileLimits()

    # -- confinement ---------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        """The real host path of an agent path, or :class:`FileToolError` saying why not."""
        if not isinstance(path, str) or not path.strip():
            raise FileToolError("the path is empty; give a path relative to the repository root")
        if "\x00" in path:
            raise FileToolError("the path contains a NUL character")
        pure = PurePosixPath(path.strip())
        if pure.is_absolute():
            if pure != PurePosixPath(JAIL_ROOT) and PurePosixPath(JAIL_ROOT) not in pure.parents:
                raise FileToolError(
                    f"{path!r} is outside the repository; paths are relative to the repository "
                    f"root or absolute under {JAIL_ROOT}"
                )
            pure = pure.relative_to(JAIL_ROOT)
        real = Path(os.path.realpath(self.root / pure))
        if real != self.root and self.root not in real.parents:
            raise FileToolError(f"{path!r} leads outside the repository (after following links)")
        if any(part.casefold() == ".git" for part in real.relative_to(self.root).parts):
            raise FileToolError(f"{path!r} is inside .git: git internals are off limits")
        return real

    def shown(self, real: Path) -> str:
        """How a host path is named to the agent: relative to the repository root."""
        rel = real.relative_to(self.root).as_posix()
        return "." if rel == "." else rel

    # -- reading ---------------------------------------------------------------------------
    def read_text(self, real: Path) -> str:
        """A regular file's text (size-checked, never following a last-moment link)."""
        try:
            data = read_file(real, max_bytes=self.limits.max_read_bytes)
        except FileNotFoundError:
            raise FileToolError(f"{self.shown(real)} does not exist") from None
        except TooLarge as err:
            raise FileToolError(
                f"{self.shown(real)} is {err.size} bytes, over the {err.limit}-byte "
                "limit of this tool; use bash (head, sed -n, grep) on it"
            ) from None
        except UnsafeFile as err:
            raise FileToolError(f"{self.shown(real)} {err.reason}") from None
        if b"\x00" in data[:8192]:
            raise FileToolError(f"{self.shown(real)} looks binary; it is not shown")
        return data.decode("utf-8", errors="replace")

    def view(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        real = self.resolve(path)
        if real.is_dir():
            return self._listing(real)
        if not real.exists():
            raise FileToolError(f"{path!r} does not exist")
        lines = self.read_text(real).splitlines()
        first = 1 if start_line is None else start_line
        last = len(lines) if end_line is None or end_line == -1 else end_line
        if first < 1 or last < first - 1 or (lines and first > len(lines)):
            raise FileToolError(
                f"invalid line range {start_line}..{end_line}: {self.shown(real)} has {len(lines)} lines "
                "(lines count from 1; end_line -1 means the last line)"
            )
        out: list[str] = []
        used = 0
        for number in range(first, min(last, len(lines)) + 1):
            line = _cut_line(lines[number - 1], self.limits.max_line_chars)
            row = f"{number:6}\t{line}"
            if used + len(row) + 1 > self.limits.max_output_chars:
                out.append(
                    f"[output cut at line {number - 1} of {len(lines)}; view the rest with "
                    f"start_line={number}]"
                )
                break
            out.append(row)
            used += len(row) + 1
        if not lines:
            return f"{self.shown(real)} is empty"
        return "\n".join(out)

    def _listing(self, real: Path) -> str:
        """Up to two levels below ``real``, without .git and without following links."""
        rows: list[str] = []
        more = False
        for entry, _depth in _walk(real, depth=2):
            if len(rows) == self.limits.max_listing:
                more = True
                break
            name = entry.relative_to(real).as_posix()
            if entry.is_symlink():
                rows.append(f"{name}@")
            elif entry.is_dir():
                rows.append(f"{name}/")
            else:
                rows.append(name)
        head = f"{self.shown(real)}/ (two levels; links end in @):"
        tail = ["[more entries not shown; view a subdirectory]"] if more else []
        return "\n".join([head, *rows, *tail])

    def search(self, pattern: str, path: str | None = None) -> str:
        """Lines matching an RE2 pattern (linear time whatever the pattern: no ReDoS on the host)."""
        if not isinstance(pattern, str) or not pattern:
            raise FileToolError("the pattern is empty")
        if len(pattern) > self.limits.max_pattern_chars:
            raise FileToolError(f"the pattern is over {self.limits.max_pattern_chars} characters")
        options = re2.Options()
        options.log_errors = False
        options.max_mem = _RE2_MEM
        try:
            compiled = re2.compile(pattern, options)
        except re2.error as err:
            raise FileToolError(
                f"invalid pattern {pattern!r}: {err} (RE2 syntax: no backreferences or lookaround)"
            ) from None
        top = self.resolve(path or ".")
        files = (
            [top]
            if top.is_file()
            else [e for e, _ in _walk(top, depth=None) if e.is_file() and not e.is_symlink()]
        )
        hits: list[str] = []
        read = 0
        for file in files:
            if len(hits) > self.limits.max_matches or read > self.limits.max_search_bytes:
                break
            try:
                text = self.read_text(file)
            except FileToolError:
                continue  # binary, too large, vanished: search skips what view would refuse
            read += len(text)
            for number, line in enumerate(text.splitlines(), 1):
                if compiled.search(line):
                    hits.append(f"{self.shown(file)}:{number}: {_cut_line(line.strip(), 300)}")
                    if len(hits) > self.limits.max_matches:
                        break
        if not hits:
            return f"no matches for {pattern!r} in {self.shown(top)}"
        note = ""
        if len(hits) > self.limits.max_matches:
            hits = hits[: self.limits.max_matches]
            note = (
                f"\n[more than {self.limits.max_matches} matches; narrow the pattern or the path]"
            )
        elif read > self.limits.max_search_bytes:
            note = "\n[search stopped after reading its byte limit; narrow the path]"
        return _cap("\n".join(hits), self.limits.max_output_chars) + note

    # -- writing ---------------------------------------------------------------------------
    def str_replace(self, path: str, old: str, new: str) -> str:
        real = self.resolve(path)
        if not real.exists():
            raise FileToolError(f"{path!r} does not exist; use create to make a new file")
        text = self.read_text(real)
        if not old:
            raise FileToolError("old is empty; give the exact text to replace (with some context)")
        count = text.count(old)
        if count == 0:
            raise FileToolError(
                f"old was not found in {self.shown(real)} (0 matches); it must match the file exactly, "
                "whitespace and indentation included — view the file and copy the text"
            )
        if count > 1:
            raise FileToolError(
                f"old occurs {count} times in {self.shown(real)}; it must occur exactly once — "
                "add surrounding lines to make it unique"
            )
        start = text.index(old)
        self._write(real, text[:start] + new + text[start + len(old) :])
        line = text.count("\n", 0, start) + 1
        return f"replaced 1 occurrence in {self.shown(real)} at line {line}"

    def create(self, path: str, content: str) -> str:
        real = self.resolve(path)
        if real.is_dir():
            raise FileToolError(f"{path!r} is a directory")
        existed = real.exists()
        self._write(real, content)
        verb = "overwrote" if existed else "created"
        return f"{verb} {self.shown(real)} ({len(content.splitlines())} lines)"

    def _write(self, real: Path, text: str) -> None:
        """Replace ``real`` atomically; new files and directories get the workspace's owner.

        The jailed ``bash`` runs as the owner of the workspace (not as the host's root), so a
        file the host writes must belong to that owner or the agent could not edit it in bash.
        """
        data = text.encode("utf-8")
        if len(data) > self.limits.max_write_bytes:
            raise FileToolError(
                f"the new content is {len(data)} bytes, over the {self.limits.max_write_bytes}-byte limit"
            )
        owner = os.stat(self.root)
        self._make_parents(real.parent, owner)
        mode = stat.S_IMODE(os.stat(real).st_mode) if real.is_file() else 0o644
        fd, tmp = tempfile.mkstemp(prefix=".envgym-", dir=real.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, mode)
            if os.geteuid() == 0:
                os.chown(tmp, owner.st_uid, owner.st_gid)
            os.replace(tmp, real)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _make_parents(self, directory: Path, owner: os.stat_result) -> None:
        missing: list[Path] = []
        while not directory.exists():
            missing.append(directory)
            directory = directory.parent
        if not directory.is_dir():
            raise FileToolError(f"{self.shown(directory)} is not a directory")
        for new in reversed(missing):
            new.mkdir()
            if os.geteuid() == 0:
                os.chown(new, owner.st_uid, owner.st_gid)


MAX_WALK = (
    200_000  # entries one walk visits: a repository the agent filled with files stays bounded
)


def _walk(top: Path, depth: int | None) -> list[tuple[Path, int]]:
    """Entries below ``top`` (sorted by path), skipping .git, never entering links."""
    found: list[tuple[Path, int]] = []
    stack: list[tuple[Path, int]] = [(top, 0)]
    while stack and len(found) < MAX_WALK:
        directory, level = stack.pop()
        try:
            children = sorted(directory.iterdir())
        except OSError:
            continue
        for child in children:
            if child.name == ".git":
                continue
            found.append((child, level + 1))
            if child.is_dir() and not child.is_symlink() and (depth is None or level + 1 < depth):
                stack.append((child, level + 1))
    found.sort(key=lambda item: item[0].as_posix())
    return found


def _cut_line(line: str, limit: int) -> str:
    return (
        line if len(line) <= limit else line[:limit] + f" [… {len(line) - limit} more characters]"
    )


def _cap(text: str, limit: int) -> str:
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"\n[output cut: {len(text) - limit} more characters]"
    )
