"""``envgym bench search``: build time and size of the Debian-corpus index, and tool latency.

* ``index_build_s`` — ``apt-cache dumpavail`` + parsing + indexing every package into a fresh
  folder (the same code path as the cached set-up build, without the cache).  Baseline in the
  same run: ``corpus_read_s``, the dumpavail + parse part alone.
* ``index_mib`` — the index folder on disk (postings + stored documents).
* ``query_p50_ms`` / ``query_p99_ms`` — ``SearchTools.search(q, k=10)`` end to end (input
  checks, BM25 top-10, snippets, titles) over fixed-seed queries of 1-4 words drawn from
  package summaries and names; targets p50 <= 20 ms, p99 <= 100 ms on the whole corpus.
* ``open_p50_ms`` / ``find_p50_ms`` — ``open(id, 1)`` and ``find(id, pattern)`` on hit ids.

``--quick`` indexes the first 3,000 packages and runs 100 queries (smoke tests only).
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from rich.console import Console

from envgym.bench import BenchResult
from envgym.tools.search.build import index_mib, write_index
from envgym.tools.search.debian import Package, load_packages
from envgym.tools.search.index import Index
from envgym.tools.search.tools import SearchTools


def queries(packages: list[Package], n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = [w for p in packages for w in p.summary.lower().split() if w.isalpha() and len(w) > 2]
    out = []
    for _ in range(n):
        picked = rng.sample(words, rng.randint(1, 3))
        if rng.random() < 0.3:  # some queries name a package, as an agent following a lead does
            picked.append(rng.choice(packages).name)
        out.append(" ".join(picked))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _timed(fn: object, *args: object) -> float:
    started = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return (time.perf_counter() - started) * 1e3


def run(quick: bool = False) -> BenchResult:
    console = Console(stderr=True)
    started = time.perf_counter()
    packages = load_packages()
    read_s = time.perf_counter() - started
    if quick:
        packages = packages[:3000]
    with tempfile.TemporaryDirectory(prefix="envgym-bench-search-") as tmp:
        folder = Path(tmp) / "index"
        folder.mkdir()
        write_index(folder, packages, console)
        build_s = time.perf_counter() - started
        tools = SearchTools(Index(folder))
        qs = queries(packages, 100 if quick else 1000)
        for q in qs[:20]:  # warm the OS page cache and tantivy's readers
            tools.search(q, 10)
        latencies = [_timed(tools.search, q, 10) for q in qs]
        ids = [p.name for p in random.Random(1).sample(packages, 100)]
        opens = [_timed(tools.open, i, 1) for i in ids]
        finds = [_timed(tools.find, i, r"lib\w+") for i in ids]
        size = index_mib(folder)
    metrics = {
        "index_build_s": build_s,
        "corpus_read_s": read_s,
        "index_mib": size,
        "documents": float(len(packages)),
        "query_p50_ms": percentile(latencies, 0.5),
        "query_p99_ms": percentile(latencies, 0.99),
        "open_p50_ms": percentile(opens, 0.5),
        "find_p50_ms": percentile(finds, 0.5),
    }
    units = {"index_build_s": "s", "corpus_read_s": "s", "index_mib": "MiB", "documents": "count",
             "query_p50_ms": "ms", "query_p99_ms": "ms", "open_p50_ms": "ms", "find_p50_ms": "ms"}  # fmt: skip
    notes = {
        "index_build_s": "dumpavail + parse + tantivy index, 1 writer thread",
        "corpus_read_s": "baseline: dumpavail + parse alone",
        "query_p50_ms": f"target <= 20 ms; {len(latencies)} queries, k=10, with snippets",
        "query_p99_ms": "target <= 100 ms",
    }
    return BenchResult(benchmark="search", metrics=metrics, units=units, notes=notes)
