"""Search-QA environments over the Debian package corpus (issue 13, part 4; docs/SEARCH_QA.md)."""
