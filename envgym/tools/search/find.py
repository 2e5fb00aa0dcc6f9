"""``find``: regex matches in one document, in time linear in the text whatever the pattern.

Python's ``re`` backtracks, so a pattern like ``(a+)+$`` takes exponential time on a long run
of ``a``; an agent (or a hostile prompt) can write one by accident.  Google's RE2 compiles to
automata and guarantees linear time, so the bound holds by construction and needs no timeout
or thread to kill.  The price is RE2's syntax: no backreferences and no lookaround — those
patterns are refused with RE2's own reason.  A pattern length cap and RE2's memory cap bound
compile cost.  Matching is case-insensitive, as a page's find box is.
"""

from __future__ import annotations

from dataclasses import dataclass

import re2

from envgym.tools.search.errors import SearchError
from envgym.tools.search.pages import page_of

MAX_PATTERN = 256
MAX_MATCHES = 50
_CONTEXT = 60  # characters of the line shown either side of a match
_RE2_MEM = 8 << 20  # bytes of automaton memory per compiled pattern


@dataclass(frozen=True)
class Match:
    page: int
    line: int
    match: str
    context: str


def compile_pattern(pattern: str) -> re2._Regexp:
    if not isinstance(pattern, str) or not pattern:
        raise SearchError("find: the pattern is empty; give a word or a regular expression")
    if len(pattern) > MAX_PATTERN:
        raise SearchError(
            f"find: the pattern is {len(pattern)} characters; the limit is {MAX_PATTERN}"
        )
    options = re2.Options()
    options.log_errors = False  # RE2 would print every rejected pattern on stderr
    options.case_sensitive = False
    options.max_mem = _RE2_MEM
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = (
            exc.args[0].decode(errors="replace")
            if exc.args and isinstance(exc.args[0], bytes)
            else str(exc)
        )
        raise SearchError(
            f"find: invalid pattern {pattern!r}: {reason} (RE2 syntax: no backreferences or lookaround)"
        ) from None


def find_matches(
    pages: list[str], pattern: str, limit: int = MAX_MATCHES
) -> tuple[list[Match], bool]:
    """Matches of ``pattern`` over the joined pages (at most ``limit``) and whether more exist."""
    compiled = compile_pattern(pattern)
    text = "".join(pages)
    matches: list[Match] = []
    for found in compiled.finditer(text):
        if found.end() == found.start():
            continue  # an empty match (``x*`` anywhere) says nothing about the document
        if len(matches) == limit:
            return matches, True
        start, end = found.start(), found.end()
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        left, right = max(line_start, start - _CONTEXT), min(line_end, end + _CONTEXT)
        context = (
            ("…" if left > line_start else "")
            + text[left:right]
            + ("…" if right < line_end else "")
        )
        matches.append(Match(page=page_of(pages, start), line=text.count("\n", 0, start) + 1,
                             match=found.group(0), context=context))  # fmt: skip
    return matches, False
