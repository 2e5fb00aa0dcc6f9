"""Search-QA synthesis: the procedural, offline fallback (docs/SEARCH_QA.md)."""
