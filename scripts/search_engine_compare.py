"""Measure bm25s vs tantivy on the Debian corpus: build time, index size, query p50/p99.

Run: ``pip install bm25s`` (not a dependency: only this comparison uses it), then
``nice -n 19 python scripts/search_engine_compare.py`` (docs/SEARCH.md has the numbers).
Both engines index the same title + body text and answer the same queries (words drawn from
package summaries, 1-3 words each, fixed seed); latency covers tokenizing the query, scoring
and fetching the top-10 ids.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

from envgym.tools.search.debian import load_packages


def dir_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    packages = load_packages()
    ids = [p.name for p in packages]
    texts = [f"{p.name} {p.summary}\n{p.text()}" for p in packages]
    rng = random.Random(0)
    words = [w for p in packages for w in p.summary.lower().split() if w.isalpha() and len(w) > 3]
    queries = [" ".join(rng.sample(words, rng.randint(1, 3))) for _ in range(300)]
    print(
        f"{len(ids)} documents, {sum(map(len, texts)) / 2**20:.1f} MiB of text, {len(queries)} queries"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in (("bm25s", bm25s_run), ("tantivy", tantivy_run)):
            build_s, mib, lat = fn(Path(tmp) / name, ids, texts, queries)
            print(
                f"{name:8s} build {build_s:6.2f} s  index {mib:6.1f} MiB  "
                f"p50 {statistics.median(lat):6.2f} ms  p99 {pct(lat, 0.99):6.2f} ms"
            )


def bm25s_run(folder: Path, ids: list[str], texts: list[str], queries: list[str]):
    import bm25s
    from bm25s.tokenization import Tokenizer

    t0 = time.perf_counter()
    tok = Tokenizer(stopwords="en")
    corpus_ids = tok.tokenize(texts, show_progress=False, return_as="ids")
    model = bm25s.BM25()
    model.index(corpus_ids, show_progress=False)
    model.save(folder, show_progress=False)
    tok.save_vocab(folder)
    build_s = time.perf_counter() - t0
    lat = []
    for q in queries:
        t = time.perf_counter()
        qids = tok.tokenize([q], update_vocab=False, show_progress=False, return_as="ids")
        if qids[0]:
            docs, _ = model.retrieve(qids, k=10, show_progress=False, n_threads=1)
            _ = [ids[i] for i in docs[0]]
        lat.append((time.perf_counter() - t) * 1e3)
    return build_s, dir_mib(folder), lat


def tantivy_run(folder: Path, ids: list[str], texts: list[str], queries: list[str]):
    import tantivy

    folder.mkdir()
    t0 = time.perf_counter()
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("body", stored=False)
    schema = sb.build()
    index = tantivy.Index(schema, path=str(folder))
    writer = index.writer(heap_size=100_000_000, num_threads=1)
    for i, t in zip(ids, texts):
        writer.add_document(tantivy.Document(id=i, body=t))
    writer.commit()
    writer.wait_merging_threads()
    build_s = time.perf_counter() - t0
    index.reload()
    searcher = index.searcher()
    lat = []
    for q in queries:
        t = time.perf_counter()
        query, _errors = index.parse_query_lenient(q, ["body"])
        hits = searcher.search(query, 10).hits
        _ = [searcher.doc(addr)["id"][0] for _, addr in hits]
        lat.append((time.perf_counter() - t) * 1e3)
    return build_s, dir_mib(folder), lat


if __name__ == "__main__":
    main()
