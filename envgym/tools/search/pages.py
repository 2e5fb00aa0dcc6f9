"""Split a document into pages for ``open``: whole lines where possible, ~PAGE_CHARS each.

Pages are numbered from 1.  Line boundaries keep a field (``Depends: ...``) readable on one
page; a single line longer than a page (huge ``Provides`` lists) is cut hard so no page grows
without bound.
"""

from __future__ import annotations

PAGE_CHARS = 2000


def paginate(text: str, page_chars: int = PAGE_CHARS) -> list[str]:
    pages: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        while len(line) > page_chars:  # hard cut: flush what we have, then full-size chunks
            if current:
                pages.append(current)
                current = ""
            pages.append(line[:page_chars])
            line = line[page_chars:]
        if current and len(current) + len(line) > page_chars:
            pages.append(current)
            current = ""
        current += line
    if current or not pages:
        pages.append(current)  # an empty document still has one (empty) page
    return pages


def page_of(pages: list[str], offset: int) -> int:
    """The 1-based page holding character ``offset`` of the joined text."""
    seen = 0
    for number, page in enumerate(pages, start=1):
        seen += len(page)
        if offset < seen:
            return number
    return len(pages)
