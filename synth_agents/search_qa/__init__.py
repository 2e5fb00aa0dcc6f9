"""Search-QA synthesis (issue 13, part 3): the procedural, offline fallback (docs/SEARCH_QA.md)."""
