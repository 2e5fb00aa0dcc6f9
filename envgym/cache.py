"""The envgym cache: folders built once, atomically, and shared by every process.

Default bundles and the converted embedded model are expensive to build (seconds to a minute)
and identical for every caller, so they are built once into ``$ENVGYM_CACHE`` (default
``~/.cache/envgym``).  Two rules make that safe under concurrency:

* **one builder**: callers of the same entry take an exclusive ``flock`` on a lock file in
  ``<cache>/locks``, so concurrent threads and processes wait for the first build instead of
  each doing it again (four racing builders on two cores used to take four times as long);
* **no half-built entry**: the build writes into a private temporary sibling that is renamed
  into place only once complete, so a crash or a kill leaves nothing a later caller would read.

A folder counts as built when its marker file exists (``manifest.json`` for a bundle).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

# flock is per open file description, so threads of one process need their own lock too.
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def cache_root() -> Path:
    """``$ENVGYM_CACHE``, else ``~/.cache/envgym``."""
    env = os.environ.get("ENVGYM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "envgym"


def source_digest(root: Path, paths: Iterable[Path], *extra: str) -> str:
    """A sha256 over ``extra`` and each file's path (relative to ``root``) and bytes, in order."""
    digest = hashlib.sha256("\0".join(extra).encode())
    for path in paths:
        digest.update(
            b"\0" + path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes()
        )
    return digest.hexdigest()


def built_once(
    final: Path, build: Callable[[Path], object], *, marker: str = "manifest.json"
) -> Path:
    """Return ``final``, calling ``build(folder)`` to create it first when it is not built yet.

    ``build`` gets an empty folder to fill; it must write ``marker`` there last, or not at all
    if it fails (an exception propagates and leaves nothing behind).
    """
    if (final / marker).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    locks = cache_root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(final.resolve()).encode()).hexdigest()[:16]
    with _THREAD_LOCKS_GUARD:
        thread_lock = _THREAD_LOCKS.setdefault(key, threading.Lock())
    with thread_lock, open(locks / f"{final.name}-{key}.lock", "a+b") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # released when the file closes, even on a kill
        if (final / marker).is_file():
            return final  # another caller built it while we waited
        if final.exists():
            shutil.rmtree(final)  # a folder without its marker: left by an older, broken layout
        _sweep_scratch(final)
        scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        scratch.chmod(0o755)  # mkdtemp makes it private; the cache is readable like any other
        try:
            target = scratch / "entry"
            target.mkdir()
            build(target)
            if not (target / marker).is_file():
                raise RuntimeError(f"building {final.name} finished without writing {marker}")
            os.rename(target, final)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return final


def source_keyed_bundle(
    name: str,
    identity: str,
    roots: Iterable[Path],
    build: Callable[[Path], object],
    *,
    skip: frozenset[str] = frozenset(),
) -> Path:
    """``build``'s bundle, built once into ``<cache>/bundles/<name>-<key>`` and reused.

    The one way a family caches its default bundle.  ``key`` hashes ``identity`` (what the
    build depends on besides this code: a generator version, the seed and sizes, an input
    corpus's key) and the ``*.py`` files under each of ``roots`` (file names in ``skip`` left
    out: modules that do not shape the bundle), so an edited generator never serves a stale
    bundle; concurrent callers wait for one build (:func:`built_once`).
    """
    parts = [identity.encode()]
    for root in sorted({Path(r).resolve() for r in roots}):
        files = [p for p in sorted(root.rglob("*.py")) if p.name not in skip]
        parts.append(source_digest(root, files).encode())
    key = hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]
    return built_once(cache_root() / "bundles" / f"{name}-{key}", build)


def _sweep_scratch(final: Path) -> None:
    """Remove scratch folders a killed builder of ``final`` left behind (SIGKILL skips ``finally``).

    Only called under ``final``'s lock, so no live builder of this entry owns one.  The name must
    be exactly mkdtemp's ``.<name>.<8 chars>`` so another entry's scratch (``.<name>.x.<8>``,
    built under its own lock) is never touched.
    """
    own = re.compile(rf"\.{re.escape(final.name)}\.[A-Za-z0-9_]{{8}}")
    for sibling in final.parent.iterdir():
        if own.fullmatch(sibling.name) and sibling.is_dir():
            shutil.rmtree(sibling, ignore_errors=True)
