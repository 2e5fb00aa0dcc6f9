"""A web-search backend: httpx against a SearxNG-style JSON API, behind the same tools.

``SearchTools(WebSearch("http://127.0.0.1:8888"))`` gives the local index's ``search``/
``open``/``find`` contract (tools.py) over the web, for users with internet:

* ``search(q, k)`` → ``GET {base}/search?q=…&format=json``; SearxNG answers
  ``{"results": [{"url", "title", "content", "score"?}, …]}``.  A result's id is its URL, its
  snippet the ``content`` field.
* ``open(id)`` / ``find(id, …)`` fetch the URL and turn HTML into text lines.  Only URLs that
  came back from a search may be opened (the local contract: "use an id from search
  results"); an agent cannot make the host fetch an arbitrary address (no SSRF).

Every failure of the service — unreachable, timed out, an HTTP error status, a body that is
not the expected JSON, a page too large or not text — is a :class:`SearchError` naming the
server and what went wrong, so an env hands it to the agent as a tool error like any other.
"""

from __future__ import annotations

import html
import re
from collections import OrderedDict
from html.parser import HTMLParser
from typing import Any

import httpx

from tools.search.errors import SearchError
from tools.search.index import Document, Hit

MAX_PAGE_BYTES = 2_000_000  # a fetched page larger than this is refused, not truncated silently
MAX_REMEMBERED = 10_000  # result URLs kept for open/find (oldest forgotten first)
_TEXT_TYPES = ("text/", "application/xhtml", "application/json", "application/xml")


class _TextOfHTML(HTMLParser):
    """Visible text of an HTML page, one line per block; scripts and styles dropped."""

    _SKIP = {"script", "style", "noscript", "template"}
    _BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
              "pre", "table", "ul", "ol", "dd", "dt", "header", "footer", "title"}  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        if tag == "title":
            self._in_title = True
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skipping:
            self._skipping -= 1
        if tag == "title":
            self._in_title = False
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        if self._in_title:
            self.title += data
        self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line) + "\n"


def html_text(markup: str) -> tuple[str, str]:
    """``(title, text)`` of an HTML page."""
    parser = _TextOfHTML()
    parser.feed(markup)
    parser.close()
    return " ".join(parser.title.split()), parser.text()


class WebSearch:
    """A :class:`tools.search.tools.Backend` over a SearxNG-style ``/search?format=json`` API.

    Args:
        base_url: the service root, e.g. ``http://127.0.0.1:8888`` (``/search`` is appended).
        timeout_s: per request (connect + read), for searches and page fetches alike.
        client: an ``httpx.Client`` to use (tests, proxies); one is made otherwise.
    """

    def __init__(self, base_url: str, *, timeout_s: float = 10.0, client: httpx.Client | None = None) -> None:
        if not isinstance(base_url, str) or not re.match(r"https?://[^/\s]+", base_url):
            raise ValueError(f"the web search URL must be http(s)://host[:port][/path], not {base_url!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, not {timeout_s}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._client = client or httpx.Client(timeout=timeout_s, follow_redirects=True,
                                              headers={"User-Agent": "envgym-search/1"})  # fmt: skip
        self._seen: OrderedDict[str, str] = OrderedDict()  # url -> title from the results

    def close(self) -> None:
        self._client.close()

    def search(self, query: str, k: int) -> list[Hit]:
        reply = self._get(f"{self.base_url}/search", "search", params={"q": query, "format": "json"})
        try:
            data = reply.json()
        except ValueError:
            raise SearchError(f"search: the web search service at {self.base_url} did not answer JSON "
                              f"(got {reply.text[:80]!r}); is format=json enabled?") from None  # fmt: skip
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise SearchError(f"search: the web search service at {self.base_url} answered JSON without a "
                              "'results' list")  # fmt: skip
        hits: list[Hit] = []
        for rank, item in enumerate(results):
            if not isinstance(item, dict) or not isinstance(item.get("url"), str) or not item["url"]:
                continue  # one odd result does not spoil the rest
            url = item["url"]
            title = str(item.get("title") or url)
            score = item.get("score")
            numeric = isinstance(score, (int, float)) and not isinstance(score, bool)
            score = float(score) if numeric else 1.0 / (rank + 1)  # SearxNG omits it for some engines
            hits.append(Hit(url, title, score, " ".join(str(item.get("content") or "").split())[:160]))
            self._remember(url, title)
            if len(hits) == k:
                break
        return hits

    def get(self, doc_id: str) -> Document | None:
        if doc_id not in self._seen:
            return None  # "no document with id …; use an id from search results"
        kind, text = self._fetch(doc_id)
        if "html" in kind:
            title, text = html_text(text)
        else:
            title, text = "", html.unescape(text)
        return Document(doc_id, title or self._seen[doc_id], text)

    def _fetch(self, url: str) -> tuple[str, str]:
        """``(content type, text)`` of a page, read in chunks so a huge page is refused early."""
        try:
            with self._client.stream("GET", url, timeout=self.timeout_s) as reply:
                if reply.status_code >= 400:
                    raise SearchError(f"open: {url} answered HTTP {reply.status_code} {reply.reason_phrase}".rstrip())
                kind = reply.headers.get("content-type", "text/plain").split(";")[0].strip().lower()
                if not kind.startswith(_TEXT_TYPES):
                    raise SearchError(f"open: {url} is {kind}, not a text page")
                body = bytearray()
                for chunk in reply.iter_bytes():
                    body += chunk
                    if len(body) > MAX_PAGE_BYTES:
                        raise SearchError(f"open: {url} is larger than {MAX_PAGE_BYTES} bytes; the limit")
                return kind, body.decode(reply.encoding or "utf-8", errors="replace")
        except httpx.TimeoutException:
            raise SearchError(f"open: {url} did not answer within {self.timeout_s:g} s; try again") from None
        except httpx.HTTPError as err:
            raise SearchError(f"open: cannot reach {url} ({type(err).__name__}: {err})") from None

    def _remember(self, url: str, title: str) -> None:
        self._seen[url] = title
        self._seen.move_to_end(url)
        while len(self._seen) > MAX_REMEMBERED:
            self._seen.popitem(last=False)

    def _get(self, url: str, tool: str, params: dict[str, Any] | None = None) -> httpx.Response:
        where = self.base_url
        try:
            reply = self._client.get(url, params=params, timeout=self.timeout_s)
        except httpx.TimeoutException:
            raise SearchError(f"{tool}: {where} did not answer within {self.timeout_s:g} s; try again") from None
        except httpx.HTTPError as err:  # refused, DNS, reset, bad TLS, too many redirects
            raise SearchError(f"{tool}: cannot reach {where} ({type(err).__name__}: {err})") from None
        if reply.status_code >= 400:
            raise SearchError(f"{tool}: {where} answered HTTP {reply.status_code} {reply.reason_phrase}".rstrip())
        return reply
