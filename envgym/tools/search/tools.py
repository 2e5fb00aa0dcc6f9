"""The three search tools an agent calls: ``search``, ``open``, ``find`` — with input checks.

Every bad input raises :class:`SearchError` whose message names the argument and the limit,
so an env can hand it back to the agent as a tool error (DESIGN.md: agent mistakes never
raise out of an env; they become tool messages).  Results are plain JSON-able dicts.
"""

from __future__ import annotations

from typing import Any, Protocol

from envgym.tools.search.errors import SearchError
from envgym.tools.search.find import MAX_MATCHES, find_matches
from envgym.tools.search.index import Document, Hit, query_terms
from envgym.tools.search.pages import paginate

MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 64  # each term is a posting-list walk: bounds the p99 of a pasted paragraph
MAX_K = 50
MAX_ID_CHARS = 200


class Backend(Protocol):
    """What the tools need from an index (the local tantivy index, or a web backend)."""

    def search(self, query: str, k: int) -> list[Hit]: ...

    def get(self, doc_id: str) -> Document | None: ...


class SearchTools:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def search(self, query: str, k: int = 10) -> list[dict[str, Any]]:
        """Ranked documents for ``query``: ``[{id, title, score, snippet}]``, best first."""
        if not isinstance(query, str) or not query.strip():
            raise SearchError("search: the query is empty; give some words to search for")
        if len(query) > MAX_QUERY_CHARS:
            raise SearchError(
                f"search: the query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}"
            )
        terms = query_terms(query)
        if not terms:
            raise SearchError(
                f"search: the query {query!r} has no searchable words (letters or digits)"
            )
        if len(terms) > MAX_QUERY_TERMS:
            raise SearchError(
                f"search: the query has {len(terms)} distinct words; the limit is {MAX_QUERY_TERMS}"
            )
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise SearchError(f"search: k must be an integer from 1 to {MAX_K}, got {k!r}")
        return [vars(hit) for hit in self.backend.search(" ".join(terms), k)]

    def open(self, id: str, page: int = 1) -> dict[str, Any]:  # noqa: A002 - the tool's own name
        """Page ``page`` (from 1) of document ``id``: ``{id, title, page, pages, text}``."""
        doc = self._document(id, "open")
        pages = paginate(doc.body)
        if isinstance(page, bool) or not isinstance(page, int):
            raise SearchError(f"open: page must be an integer, got {page!r}")
        if not 1 <= page <= len(pages):
            raise SearchError(
                f"open: page {page} is out of range; document {id!r} has pages 1 to {len(pages)}"
            )
        return {
            "id": doc.id,
            "title": doc.title,
            "page": page,
            "pages": len(pages),
            "text": pages[page - 1],
        }

    def find(self, id: str, pattern: str) -> dict[str, Any]:  # noqa: A002
        """Matches of ``pattern`` (RE2 regex, case-insensitive) in document ``id``, with page and line."""
        doc = self._document(id, "find")
        matches, truncated = find_matches(paginate(doc.body), pattern)
        return {"id": doc.id, "pattern": pattern, "matches": [vars(m) for m in matches],
                "truncated": truncated, "limit": MAX_MATCHES}  # fmt: skip

    def _document(self, doc_id: str, tool: str) -> Document:
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise SearchError(f"{tool}: the id is empty; use an id from search results")
        if len(doc_id) > MAX_ID_CHARS:
            raise SearchError(
                f"{tool}: the id is {len(doc_id)} characters; ids are at most {MAX_ID_CHARS}"
            )
        doc = self.backend.get(doc_id)
        if doc is None:
            raise SearchError(
                f"{tool}: no document with id {doc_id!r}; use an id from search results"
            )
        return doc
