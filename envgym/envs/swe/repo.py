"""Git for SWE tasks: a source cache, clean checkouts of a base commit, `git apply`, diffs.

A repository is given as a local path (used in place, never copied into the cache, no network)
or a clone URL (`https://`, `http://`, `git://`, `ssh://`, `file://`, ``user@host:path``, or
"owner/name" plus `repo_url`), which is mirrored once as a bare repository under
``<envgym cache>/swe/mirrors`` and updated on demand.

Every git command is hardened (`envgym/envs/swe/git_safe.py`: no system or user config, a throwaway
``HOME``, `-c` overrides for every program-running key, timeouts), and git never runs *in* a
source: sources are read through a view of ours (`envgym/envs/swe/git_source.py`), so a filter, a
textconv driver or a hook in a repository's own config is never even read.

Checkouts fetch only the base commit and (with ``depth=None``) its ancestors into a fresh
repository, so the future of the project — the fix itself — is not in the workspace's object
store for an agent to find with ``git log --all``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from envgym.cache import built_once, cache_root
from envgym.envs.swe.git_safe import GIT_TIMEOUT_S, GitError, git
from envgym.envs.swe.git_source import find_git_dir, source_view
from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.patch import changed_files, is_test_file, select_test_files, unsafe_paths

__all__ = [
    "GitError",
    "PatchResult",
    "apply_patch",
    "changed_files",
    "check_clone_url",
    "checkout",
    "diff",
    "git",
    "is_test_file",
    "open_source",
    "resolve_source",
    "select_test_files",
    "source_view",
]

_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)", re.IGNORECASE)
# What may be cloned: the network transports and file://, and scp-like user@host:path.  No
# ext:: (runs a command), no leading "-" (git would read an option), no whitespace or controls.
_CLONE_URL = re.compile(
    r"^(?:(?:https?|git|ssh|file)://[^\s\x00-\x1f\x7f-]"
    r"|[\w][\w.-]*@[\w][\w.-]*:[^\s\x00-\x1f\x7f-])[^\s\x00-\x1f\x7f]*$",
    re.IGNORECASE,
)
_OWNER_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")
_SHA = re.compile(r"^[0-9a-fA-F]{4,40}$")
# Build and test by-products an agent's run leaves behind; never part of a submitted diff.
JUNK = (
    "**/__pycache__/**",
    "**/*.pyc",
    "**/*.pyo",
    "**/*.egg-info/**",
    "**/.pytest_cache/**",
    "**/.mypy_cache/**",
    "**/.ruff_cache/**",
    "**/.tox/**",
    "**/.eggs/**",
)


@dataclass(frozen=True)
class PatchResult:
    ok: bool
    reason: str  # "" when ok; else git's complaint or why the patch was refused
    files: tuple[str, ...] = ()  # the paths the patch touches


def _is_url(repo: str) -> bool:
    return bool(_URL.match(repo))


def check_clone_url(url: str) -> str:
    """`url` if it is one git may clone from (see `_CLONE_URL`), else `GitError` saying why."""
    if not _CLONE_URL.match(url):
        raise GitError(
            f"not a repository URL git may clone: {url[:200]!r} (allowed: https://, "
            "http://, git://, ssh://, file:// or user@host:path, no spaces or controls)"
        )
    return url


def _mirror_path(url: str) -> Path:
    name = re.sub(r"[^\w.-]", "_", url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"))
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return cache_root() / "swe" / "mirrors" / f"{name or 'repo'}-{digest}.git"


def resolve_source(
    repo: str | os.PathLike[str], repo_url: str = "", *, update: bool = False
) -> Path:
    """The local git directory to read `repo` from: the path itself, or the URL's cached mirror.

    A mirror is cloned on first use and fetched again when `update` is true.  Raises `GitError`
    for a path that is not a git repository or a URL that cannot be cloned.
    """
    text = os.fspath(repo)
    if not _is_url(text):
        path = Path(text).expanduser()
        if path.exists():
            find_git_dir(path)  # read as files: git never runs in a source (git_source.py)
            return path.resolve()
        if not repo_url:
            if _OWNER_NAME.match(text):
                raise GitError(
                    f"{text!r} is neither a local path nor a URL; set repo_url "
                    f"(e.g. https://github.com/{text}.git) to say where to clone it from"
                )
            raise GitError(f"no such repository path: {path}")
        text = repo_url
    url = check_clone_url(text)
    mirror = _mirror_path(url)

    def clone(into: Path) -> None:
        local = _local_path(url)
        if local is None:
            git(["clone", "--mirror", "--quiet", "--", url, str(into)])
            return
        # A file:// repository is a local one: cloned through a view, so that upload-pack runs
        # under our config, not the repository's.
        with source_view(local) as view:
            git(["clone", "--mirror", "--quiet", "--", view.as_uri(), str(into)])
        git(["remote", "set-url", "origin", url], cwd=into)

    existed = (mirror / "HEAD").is_file()
    built_once(mirror, clone, marker="HEAD")
    if update and existed:
        update_mirror(mirror)
    return mirror


def _local_path(url: str) -> Path | None:
    """The path of a ``file://`` URL (None for other URLs)."""
    if not url.lower().startswith("file://"):
        return None
    return Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))


def update_mirror(mirror: Path, *, timeout_s: float = GIT_TIMEOUT_S) -> None:
    """Fetch a mirror up to date: over the network, or through a view for a file:// one."""
    url = git(["config", "--get", "remote.origin.url"], cwd=mirror).stdout.strip()
    local = _local_path(url)
    if local is None:
        git(["remote", "update", "--prune"], cwd=mirror, timeout_s=timeout_s)
        return
    with source_view(local) as view:
        git(
            ["fetch", "--quiet", "--prune", "--", view.as_uri(), "+refs/*:refs/*"],
            cwd=mirror,
            timeout_s=timeout_s,
        )


def _source_of(
    instance_or_repo: SweInstance | str | os.PathLike[str], repo_url: str, *, update: bool = False
) -> tuple[Path, bool]:
    """(git dir, whether it is a mirror that a fetch could bring up to date)."""
    if isinstance(instance_or_repo, SweInstance):
        repo, repo_url = instance_or_repo.repo, repo_url or instance_or_repo.repo_url
    else:
        repo = os.fspath(instance_or_repo)
    source = resolve_source(repo, repo_url, update=update)
    return source, source.is_relative_to(cache_root() / "swe" / "mirrors")


@contextmanager
def open_source(
    instance_or_repo: SweInstance | str | os.PathLike[str],
    repo_url: str = "",
    *,
    update: bool = False,
) -> Iterator[Path]:
    """A view (`git_source.source_view`) of the repository `resolve_source` finds: the git dir
    to run read-only git commands in, with our config and the source's objects and refs."""
    source, _ = _source_of(instance_or_repo, repo_url, update=update)
    with source_view(source) as view:
        yield view


def _has_commit(view: Path, commit: str) -> bool:
    probe = git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=view, check=False)
    return probe.returncode == 0


def checkout(
    instance_or_repo: SweInstance | str | os.PathLike[str],
    commit: str,
    dest: str | os.PathLike[str],
    *,
    repo_url: str = "",
    depth: int | None = 1,
    timeout_s: float = GIT_TIMEOUT_S,
) -> Path:
    """A clean working tree of `commit` at `dest` (which must be absent or empty).

    `dest` is its own repository holding `commit` (detached HEAD) and, unless `depth` limits it,
    its ancestors — never later commits.  A commit missing from a URL's mirror triggers one
    update of the mirror.  Raises `GitError` (unknown commit, bad repository, timeout).
    """
    if not _SHA.match(commit):
        raise GitError(f"not a commit sha: {commit!r}")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise GitError(f"checkout destination {dest} is not empty")
    source, is_mirror = _source_of(instance_or_repo, repo_url)
    with source_view(source) as view:
        if not _has_commit(view, commit) and is_mirror:
            update_mirror(source, timeout_s=timeout_s)
        resolved = git(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{commit}^{{commit}}"],
            cwd=view,
            check=False,
        )
        if resolved.returncode != 0:
            raise GitError(f"commit {commit} is not in {source}")
        sha = resolved.stdout.strip()
        dest.mkdir(parents=True, exist_ok=True)
        try:
            git(["init", "--quiet", "--", str(dest)], timeout_s=timeout_s)
            # file:// (not a bare path) so that --depth is honoured; upload-pack runs in the
            # view (our config, which lets it serve any sha: protocol v0 servers would refuse
            # non-tip commits), never in the source.
            fetch = ["fetch", "--quiet", "--no-tags"]
            if depth is not None:
                fetch.append(f"--depth={depth}")
            git([*fetch, "--", view.as_uri(), sha], cwd=dest, timeout_s=timeout_s)
            git(
                ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", sha],
                cwd=dest,
                timeout_s=timeout_s,
            )
        except GitError:
            _empty(dest)
            raise
    return dest


def _empty(dest: Path) -> None:
    for child in dest.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()


def _refusal(workdir: Path, paths: list[str]) -> str:
    bad = unsafe_paths(paths)
    if bad:
        return f"patch touches paths outside the repository or in .git: {bad}"
    root = workdir.resolve()
    for path in paths:
        # A parent that is a symlink could lead outside; git refuses that too, but the message
        # is clearer from us and the check does not depend on git's version.
        parent = (workdir / path).parent
        if not parent.resolve().is_relative_to(root):
            return f"patch path {path!r} leads outside the repository through a symlink"
    return ""


def apply_patch(
    workdir: str | os.PathLike[str], patch_text: str, *, timeout_s: float = 120.0
) -> PatchResult:
    """Apply a unified diff to `workdir` (all or nothing).

    A patch that is empty, malformed, does not apply, or touches paths outside the repository or
    under `.git` gives ``PatchResult(ok=False, reason=...)``; only an unusable `workdir` raises.
    """
    workdir = Path(workdir)
    if not workdir.is_dir():
        raise GitError(f"no such working tree: {workdir}")
    if not patch_text.strip():
        return PatchResult(False, "patch is empty")
    files = tuple(changed_files(patch_text))
    if not files:
        return PatchResult(False, "no file changes found in the patch (not a unified diff?)")
    refusal = _refusal(workdir, list(files))
    if refusal:
        return PatchResult(False, refusal, files)
    text = patch_text if patch_text.endswith("\n") else patch_text + "\n"
    base = ["apply", "--whitespace=nowarn"]
    with _scratch_git(workdir, with_objects=False) as env:
        try:
            checked = git(
                [*base, "--check", "-"],
                cwd=workdir,
                input=text,
                check=False,
                timeout_s=timeout_s,
                env=env,
            )
            if checked.returncode != 0:
                return PatchResult(
                    False, checked.stderr.strip() or "git apply --check failed", files
                )
            applied = git(
                [*base, "-"], cwd=workdir, input=text, check=False, timeout_s=timeout_s, env=env
            )
        except GitError as exc:  # a timeout on a pathological patch is still the patch's outcome
            return PatchResult(False, str(exc), files)
    if applied.returncode != 0:
        return PatchResult(False, applied.stderr.strip() or "git apply failed", files)
    return PatchResult(True, "", files)


def diff(
    workdir: str | os.PathLike[str], base_commit: str, *, timeout_s: float = GIT_TIMEOUT_S
) -> str:
    """The working tree against `base_commit` as a patch, new untracked files included.

    Build junk (`__pycache__`, `*.pyc`, `*.egg-info`, tool caches) and ignored files are left
    out.  The workspace's repository is only read (see `_scratch_git`).
    """
    workdir = Path(workdir)
    if not workdir.is_dir():
        raise GitError(f"no such working tree: {workdir}")
    excludes = [f":(exclude,glob){pattern}" for pattern in JUNK]
    with _scratch_git(workdir, with_objects=True) as env:
        git(["read-tree", base_commit], cwd=workdir, env=env, timeout_s=timeout_s)
        git(["add", "--all", "--", ".", *excludes], cwd=workdir, env=env, timeout_s=timeout_s)
        out = git(
            [
                "diff",
                "--cached",
                "--binary",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                "--no-renames",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                base_commit,
            ],
            cwd=workdir,
            env=env,
            timeout_s=timeout_s,
        )
    return out.stdout


@contextmanager
def _scratch_git(workdir: Path, *, with_objects: bool) -> Iterator[dict[str, str]]:
    """Environment for git over `workdir`'s files with a private, empty repository.

    The workspace's own `.git/config` is the agent's to write: with it, `git add` would run a
    planted clean filter and `git apply` honour planted settings.  A scratch git dir (our config
    only, borrowing the workspace's objects read-only through alternates) makes every filter or
    driver the worktree's `.gitattributes` names undefined, hence inert; new objects and the
    index stay in the scratch dir, so the workspace is not touched either.
    """
    with tempfile.TemporaryDirectory(prefix="envgym-git-") as scratch:
        git_dir = Path(scratch) / "git"
        git(["init", "--quiet", "--bare", str(git_dir)])
        if with_objects:
            objects = workdir / ".git" / "objects"
            if not objects.is_dir():
                raise GitError(f"{workdir} has no .git/objects (not a checkout of ours?)")
            (git_dir / "objects" / "info" / "alternates").write_text(f"{objects.resolve()}\n")
        yield {
            "GIT_DIR": str(git_dir),
            "GIT_WORK_TREE": str(workdir.resolve()),
            "GIT_INDEX_FILE": str(git_dir / "index"),
        }
