"""Search-QA environments over the Debian package corpus (docs/SEARCH_QA.md)."""
