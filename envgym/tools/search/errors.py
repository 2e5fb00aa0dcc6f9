"""The one error the search tools raise for bad agent input; its message names what was wrong."""

from __future__ import annotations


class SearchError(ValueError):
    """Bad input to ``search``/``open``/``find`` (empty or huge query, unknown id, page, pattern)."""
