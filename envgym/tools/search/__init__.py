"""Search tools over a local index (docs/SEARCH.md).

``SearchTools(default_index())`` gives ``search(query, k)``, ``open(id, page)`` and
``find(id, pattern)`` over the Debian package corpus, built once into the envgym cache;
``SearchTools(WebSearch(url))`` gives the same tools over a SearxNG-style JSON API.
"""

from envgym.tools.search.errors import SearchError
from envgym.tools.search.tools import SearchTools
from envgym.tools.search.web import WebSearch

__all__ = ["SearchError", "SearchTools", "WebSearch"]
