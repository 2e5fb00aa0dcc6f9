"""Read a repository somebody handed in without git ever reading its configuration.

A source repository (the user's `--repo`, an instance's `repo`, the smith copy a jail ran in) is
data.  Its `.git/config` may define a clean/smudge filter, a textconv driver, an fsmonitor, a
pager, `include.path` of another file …; its `info/attributes` may assign them.  Git reads the
config of the git dir it runs in, so no git command runs in a source.  Instead `source_view`
builds a *view*: a bare repository of ours (our config, our `info/attributes`) whose object store
borrows the source's through one alternates line, and whose refs and `HEAD` are copied from the
source by this module — parsed as text, opened with ``O_NOFOLLOW``, bounded in size and count.
Every read (log, diff, rev-parse, archive) and every fetch (upload-pack runs in the view) then
happens under our config only.

Refused, with a reason: a path that is not a repository's top; a source whose object store
itself borrows from elsewhere (`objects/info/alternates`: through our view, git would follow it
to any object store on the host) or is a link; refs in a format other than files/packed-refs.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from envgym.envs.swe.git_safe import GitError
from envgym.envs.swe.safe_read import UnsafeFile, read_file

__all__ = ["SourceRepo", "find_git_dir", "read_refs", "source_view"]

MAX_SMALL_FILE = 64 * 1024  # HEAD, a loose ref, a .git file, commondir, shallow lines
MAX_PACKED_REFS = 256 * 1024 * 1024
MAX_SHALLOW = 64 * 1024 * 1024
MAX_REFS = 1_000_000
MAX_REF_DEPTH = 64
_SHA = re.compile(r"[0-9a-f]{40}")
# Git's ref-name rules (git check-ref-format), minus what packed-refs could not hold anyway.
_BAD_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock(?:/|$)|\.$|/$")
_VIEW_CONFIG = """[core]
\trepositoryformatversion = 0
\tbare = true
[uploadpack]
\tallowAnySHA1InWant = true
"""
# Highest-precedence attributes of the view: whatever the source's own .gitattributes say, no
# filter, no conversion, nothing left out of an archive — the bytes of the tree as committed.
_VIEW_ATTRIBUTES = (
    "* !filter !diff !merge -text !eol !ident !working-tree-encoding -export-ignore -export-subst\n"
)


@dataclass(frozen=True)
class SourceRepo:
    git_dir: Path  # where HEAD lives (per worktree)
    common_dir: Path  # where objects, refs and packed-refs live


def _read_small(path: Path, limit: int = MAX_SMALL_FILE) -> str | None:
    """The text of a regular file that is not a link, or None when absent."""
    try:
        return read_file(path, max_bytes=limit).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except UnsafeFile as exc:
        raise GitError(str(exc)) from None


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _looks_like_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and _is_dir(path / "objects") and _is_dir(path / "refs")


def find_git_dir(path: Path) -> SourceRepo:
    """The git dir of the repository whose top (or bare git dir) is `path`; `GitError` if none."""
    dot_git = path / ".git"
    git_dir: Path | None = None
    if _is_dir(dot_git):
        git_dir = dot_git
    elif dot_git.is_symlink() or dot_git.is_file():
        text = _read_small(dot_git) or ""  # a linked worktree or a submodule: "gitdir: <path>"
        if not text.startswith("gitdir: "):
            raise GitError(f"{dot_git} is neither a directory nor a 'gitdir:' file")
        git_dir = path / text[len("gitdir: ") :].strip()
    elif _looks_like_git_dir(path):
        git_dir = path
    if git_dir is None or not (git_dir / "HEAD").is_file():
        raise GitError(f"{path} is not a git repository (or not its top directory)")
    git_dir = git_dir.resolve()
    common = _read_small(git_dir / "commondir")
    common_dir = (git_dir / common.strip()).resolve() if common else git_dir
    if not _looks_like_git_dir(common_dir) and not _is_dir(common_dir / "objects"):
        raise GitError(f"{path}: {common_dir} has no object store")
    return SourceRepo(git_dir, common_dir)


def _valid_ref(name: str) -> bool:
    return name.startswith("refs/") and not _BAD_REF.search(name) and "/." not in name


def _loose_refs(common: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    stack: list[tuple[Path, str, int]] = [(common / "refs", "refs", 0)]
    while stack:
        folder, prefix, depth = stack.pop()
        if depth > MAX_REF_DEPTH:
            raise GitError(f"{folder}: refs nested deeper than {MAX_REF_DEPTH}")
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            name = f"{prefix}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                stack.append((Path(entry.path), name, depth + 1))
            elif entry.is_file(follow_symlinks=False) and _valid_ref(name):
                value = (_read_small(Path(entry.path)) or "").strip()
                if _SHA.fullmatch(value):  # symbolic refs below refs/ are skipped
                    found[name] = value
            if len(found) > MAX_REFS:
                raise GitError(f"{common}: more than {MAX_REFS} refs")
    return found


def read_refs(source: SourceRepo) -> tuple[dict[str, str], str]:
    """(ref name -> sha, HEAD as a sha or "ref: <name>") of a source, read as text."""
    common = source.common_dir
    if _is_dir(common / "reftable"):
        raise GitError(f"{common}: reftable refs are not supported (use the files backend)")
    refs: dict[str, str] = {}
    packed = _read_small(common / "packed-refs", MAX_PACKED_REFS)
    for line in (packed or "").splitlines():
        if line.startswith(("#", "^")):
            continue
        sha, _, name = line.partition(" ")
        if _SHA.fullmatch(sha) and _valid_ref(name):
            refs[name] = sha
        if len(refs) > MAX_REFS:
            raise GitError(f"{common}: more than {MAX_REFS} refs")
    refs.update(_loose_refs(common))  # a loose ref is newer than its packed copy
    head = (_read_small(source.git_dir / "HEAD") or "").strip()
    if head.startswith("ref: ") and _valid_ref(head[5:].strip()):
        head = "ref: " + head[5:].strip()
    elif not _SHA.fullmatch(head):
        raise GitError(f"{source.git_dir}/HEAD is neither a sha nor a ref")
    return refs, head


def _object_store(source: SourceRepo) -> Path:
    objects = source.common_dir / "objects"
    if objects.is_symlink() or not _is_dir(objects):
        raise GitError(f"{objects} is a link or not a directory; refusing to read through it")
    for name in ("alternates", "http-alternates"):
        if os.path.lexists(objects / "info" / name):
            raise GitError(
                f"{source.common_dir} borrows objects from elsewhere "
                f"(objects/info/{name}); run 'git repack -a -d' there and remove it"
            )
    path = str(objects.resolve())
    if any(ord(c) < 0x20 or c == '"' for c in path):
        raise GitError(f"unusual characters in the path {path!r}; move the repository")
    return Path(path)


def write_view(source: SourceRepo, view: Path) -> Path:
    """Make `view` (absent or empty) a bare repository reading `source`'s objects and refs."""
    objects = _object_store(source)
    refs, head = read_refs(source)
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
        (view / sub).mkdir(parents=True, exist_ok=True)
    (view / "config").write_text(_VIEW_CONFIG)
    (view / "info" / "attributes").write_text(_VIEW_ATTRIBUTES)
    (view / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    (view / "packed-refs").write_text("".join(f"{refs[n]} {n}\n" for n in sorted(refs)))
    (view / "HEAD").write_text(head + "\n")
    shallow = _read_small(source.common_dir / "shallow", MAX_SHALLOW)
    if shallow:  # a shallow source: the view must know where its history stops
        lines = [line for line in shallow.split() if _SHA.fullmatch(line)]
        (view / "shallow").write_text("".join(f"{line}\n" for line in lines))
    return view


@contextmanager
def source_view(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary view (see the module docstring) of the repository at `path`."""
    source = find_git_dir(Path(path))
    scratch = Path(tempfile.mkdtemp(prefix="envgym-git-view-"))
    try:
        yield write_view(source, scratch / "view.git")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
