"""Search tools over a local index (docs/SEARCH.md).

``SearchTools(default_index())`` gives ``search(query, k)``, ``open(id, page)`` and
``find(id, pattern)`` over the Debian package corpus, built once into the envgym cache.
"""

from tools.search.errors import SearchError
from tools.search.tools import SearchTools

__all__ = ["SearchError", "SearchTools"]
