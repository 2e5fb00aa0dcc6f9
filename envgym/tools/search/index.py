"""The local search index: tantivy (Rust BM25), one folder holding postings and stored documents.

Why tantivy over bm25s: measured on the full Debian corpus (docs/SEARCH.md,
``scripts/search_engine_compare.py``) it builds ~5x faster, is half the size and answers a query
in well under a millisecond where bm25s needs ~10 ms; it also stores the documents, so
``open``/``find`` need no second store.

Queries are reduced to plain words before they reach tantivy's query parser: agent text such as
``foo:bar`` or an unbalanced quote would otherwise be query syntax (field names, phrases,
ranges) and fail or mean something else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import tantivy

SCHEMA_VERSION = "1"  # part of the cache key: bump when the schema or the document text changes
MARKER = "index.json"

_WORD = re.compile(r"[^\W_]+")  # what tantivy's default tokenizer keeps (it splits on the rest)
_MAX_TERM = 40  # the default tokenizer drops longer tokens; so do we (they can never match)


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    body: str


@dataclass(frozen=True)
class Hit:
    id: str
    title: str
    score: float
    snippet: str


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")  # exact lookup by term
    builder.add_text_field("title", stored=True)
    builder.add_text_field("body", stored=True)
    return builder.build()


def query_terms(query: str) -> list[str]:
    """The words of ``query`` as the index sees them (lower-cased, unique, order kept)."""
    words = (w.lower() for w in _WORD.findall(query) if len(w) <= _MAX_TERM)
    return list(dict.fromkeys(words))


def build_index(
    folder: Path,
    docs: Iterable[Document],
    *,
    advance: Callable[[int], None] = lambda n: None,
    threads: int = 1,
) -> int:
    """Write an index of ``docs`` into the empty ``folder``; returns the document count.

    ``advance(n)`` is called as documents are added (for a progress bar).  One writer thread
    by default: the build takes about a second per 60k documents and must not crowd a shared
    machine.
    """
    index = tantivy.Index(_schema(), path=str(folder))
    writer = index.writer(heap_size=64_000_000, num_threads=threads)
    count = 0
    for doc in docs:
        writer.add_document(tantivy.Document(id=doc.id, title=doc.title, body=doc.body))
        count += 1
        if count % 1000 == 0:
            advance(1000)
    advance(count % 1000)
    writer.commit()
    writer.wait_merging_threads()
    return count


class Index:
    """A read-only view of a built index folder (thread-safe: tantivy searchers are)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._index = tantivy.Index.open(str(folder))
        self._schema = self._index.schema
        self._searcher = self._index.searcher()

    @property
    def size(self) -> int:
        return self._searcher.num_docs

    def search(self, query: str, k: int) -> list[Hit]:
        terms = query_terms(query)
        if not terms:
            return []
        parsed = self._index.parse_query(
            " ".join(terms), ["title", "body"], field_boosts={"title": 2.0}
        )
        hits = self._searcher.search(parsed, k, count=False).hits
        if not hits:
            return []
        snippets = tantivy.SnippetGenerator.create(self._searcher, parsed, self._schema, "body")
        snippets.set_max_num_chars(160)
        out = []
        for score, address in hits:
            doc = self._searcher.doc(address)
            fragment = snippets.snippet_from_doc(doc).fragment() or doc["body"][0][:160]
            out.append(Hit(doc["id"][0], doc["title"][0], float(score), " ".join(fragment.split())))
        return out

    def get(self, doc_id: str) -> Document | None:
        query = tantivy.Query.term_query(self._schema, "id", doc_id)
        hits = self._searcher.search(query, 1, count=False).hits
        if not hits:
            return None
        doc = self._searcher.doc(hits[0][1])
        return Document(doc["id"][0], doc["title"][0], doc["body"][0])
