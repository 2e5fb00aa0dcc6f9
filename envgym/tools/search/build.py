"""Build the Debian-corpus index once into the envgym cache, with a progress bar.

The cache entry is keyed by the apt package lists it came from (name, size, mtime of each
``/var/lib/apt/lists/*_Packages*``), the schema version and tantivy's version, so an
``apt-get update`` or an upgrade builds a fresh index beside the old one instead of serving a
stale or unreadable one.  ``envgym.cache.built_once`` makes the build single and atomic: an
interrupted build leaves no entry (its scratch folder is swept by the next build), so the next
call simply builds again from the start — a full build is about a second of indexing, which
makes restarting cheaper and simpler than resuming a half-written index.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import tantivy
from rich.console import Console

from envgym.cache import built_once, cache_root
from envgym.progress import progress_bar
from envgym.tools.search.debian import Package, load_packages
from envgym.tools.search.index import MARKER, SCHEMA_VERSION, Document, Index, build_index

APT_LISTS = Path("/var/lib/apt/lists")


def package_document(package: Package) -> Document:
    title = f"{package.name}: {package.summary}" if package.summary else package.name
    return Document(id=package.name, title=title, body=package.text())


def corpus_key(lists: Path = APT_LISTS) -> str:
    """A short digest naming the cache entry (see the module docstring)."""
    digest = hashlib.sha256(f"debian\0{SCHEMA_VERSION}\0{tantivy.__version__}".encode())
    for path in sorted(lists.glob("*_Packages*")) if lists.is_dir() else []:
        stat = path.stat()
        digest.update(f"\0{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def default_folder() -> Path:
    return cache_root() / "search" / f"debian-{corpus_key()}"


def write_index(folder: Path, packages: Sequence[Package], console: Console | None = None) -> None:
    """Index ``packages`` into the empty ``folder`` and write the marker last (built_once's rule)."""
    console = console or Console(stderr=True)
    started = time.perf_counter()
    with progress_bar(console) as bar:
        task = bar.add_task("indexing Debian packages", total=len(packages))

        def docs() -> Iterator[Document]:
            return (package_document(p) for p in packages)

        count = build_index(folder, docs(), advance=lambda n: bar.advance(task, n))
    meta = {
        "source": "apt-cache dumpavail",
        "documents": count,
        "schema": SCHEMA_VERSION,
        "tantivy": tantivy.__version__,
        "index_s": round(time.perf_counter() - started, 3),
    }
    (folder / MARKER).write_text(json.dumps(meta, indent=1) + "\n")


def build_at(
    final: Path, packages: Iterable[Package] | None = None, console: Console | None = None
) -> Path:
    """Build (once) an index at ``final``; ``packages`` default to the machine's apt corpus."""

    def build(folder: Path) -> None:
        chosen = list(packages) if packages is not None else load_packages()
        write_index(folder, chosen, console)

    return built_once(final, build, marker=MARKER)


def default_index(console: Console | None = None) -> Index:
    """The machine's Debian-corpus index, built on first use (raises ``CorpusUnavailable``)."""
    return Index(build_at(default_folder(), console=console))


def index_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


if (
    __name__ == "__main__"
):  # `python -m envgym.tools.search.build`: build the default index at set-up
    path = build_at(default_folder())
    sys.stdout.write(f"{path}\n")
