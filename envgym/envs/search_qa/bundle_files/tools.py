"""Search-QA tools: ``search``, ``open``, ``find`` over Debian package documents, and ``submit_answer``.

In an episode, envgym routes ``search``/``open``/``find`` to the full local index of every
Debian package (envgym/tools/search, docs/SEARCH_QA.md).  The bodies below run only where the bundle
contract runs tools — inside the bundle sandbox, e.g. when ``envgym check`` replays a gold
solution: standard-library stand-ins over ``docs.jsonl``, the snapshot of the documents the
bundle's questions need plus distractors.
"""

from __future__ import annotations

import json
import re
from typing import Any

from envgym.runtime import state_dir

_PAGE = 2000


def _docs() -> dict[str, dict[str, str]]:
    lines = (state_dir() / "docs.jsonl").read_text(encoding="utf-8").splitlines()
    return {d["id"]: d for d in map(json.loads, lines)}


def _pages(body: str) -> list[str]:
    # A stdlib mirror of envgym/tools/search/pages.py `paginate` (bundle code imports no project
    # package); tests/test_search_qa_env.py checks the two page alike.
    pages, current = [], ""
    for line in body.splitlines(keepends=True):
        while len(line) > _PAGE:
            if current:
                pages.append(current)
                current = ""
            pages.append(line[:_PAGE])
            line = line[_PAGE:]
        if current and len(current) + len(line) > _PAGE:
            pages.append(current)
            current = ""
        current += line
    return pages + [current] if current or not pages else pages


def _doc(id: str) -> dict[str, str]:  # noqa: A002
    doc = _docs().get(id)
    if doc is None:
        raise KeyError(f"no document with id {id!r}; use an id from search results")
    return doc


def search(query: str, k: int = 5) -> list[dict[str, Any]]:
    """Search the Debian package documents; returns the best matches first.

    Args:
        query: words to search for (package names, maintainers, sections, description words).
        k: how many results to return, 1 to 50.

    Returns:
        a list of {id, title, score, snippet}; open a result with its id.
    """
    words = {w.lower() for w in re.findall(r"[^\W_]+", query)}
    if not words:
        raise ValueError("the query is empty; give some words to search for")
    if not 1 <= k <= 50:
        raise ValueError(f"k must be an integer from 1 to 50, got {k}")
    scored = []
    for doc in _docs().values():
        text = (doc["title"] + " " + doc["body"]).lower()
        score = sum(2.0 if w in doc["title"].lower() else 1.0 for w in words if w in text)
        if score:
            scored.append((-score, doc["id"], doc))
    scored.sort()
    return [
        {"id": d["id"], "title": d["title"], "score": -s, "snippet": d["body"][:160]}
        for s, _, d in scored[:k]
    ]


def open(id: str, page: int = 1) -> dict[str, Any]:  # noqa: A001 - the agent-facing name
    """Read one page of a document.

    Args:
        id: a document id from search results (a Debian package name).
        page: the page number, from 1.

    Returns:
        {id, title, page, pages, text}.
    """
    doc = _doc(id)
    pages = _pages(doc["body"])
    if not 1 <= page <= len(pages):
        raise ValueError(
            f"page {page} is out of range; document {id!r} has pages 1 to {len(pages)}"
        )
    return {
        "id": id,
        "title": doc["title"],
        "page": page,
        "pages": len(pages),
        "text": pages[page - 1],
    }


def find(id: str, pattern: str) -> dict[str, Any]:
    """Find a pattern in one document (case-insensitive regular expression, RE2 syntax).

    Args:
        id: a document id from search results.
        pattern: what to look for, e.g. "Maintainer" or "lib\\w+".

    Returns:
        {id, pattern, matches: [{page, line, match, context}], truncated, limit}.
    """
    doc = _doc(id)
    if not pattern:
        raise ValueError("the pattern is empty; give a word or a regular expression")
    # The stand-in matches literally (re on an escaped pattern cannot backtrack badly).
    needle = re.compile(re.escape(pattern), re.IGNORECASE)
    matches = []
    for number, line in enumerate(doc["body"].splitlines(), start=1):
        for found in needle.finditer(line):
            matches.append(
                {"page": 1, "line": number, "match": found.group(0), "context": line[:200]}
            )
    return {
        "id": id,
        "pattern": pattern,
        "matches": matches[:50],
        "truncated": len(matches) > 50,
        "limit": 50,
    }


def submit_answer(answer: str) -> str:
    """Submit the final answer. Call it once, when you are sure.

    Args:
        answer: only the answer, in the form the question asks for (a package name, a
            maintainer's name, a version string).
    """
    if not answer.strip():
        raise ValueError("the answer is empty: pass the final answer as `answer`")
    return "Answer submitted."
