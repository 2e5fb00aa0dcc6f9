"""A web-search backend: httpx against a SearxNG-style JSON API, behind the same tools.

``SearchTools(WebSearch("http://127.0.0.1:8888"))`` gives the local index's ``search``/
``open``/``find`` contract (tools.py) over the web, for users with internet:

* ``search(q, k)`` → ``GET {base}/search?q=…&format=json``; SearxNG answers
  ``{"results": [{"url", "title", "content", "score"?}, …]}``.  A result's id is its URL, its
  snippet the ``content`` field.
* ``open(id)`` / ``find(id, …)`` fetch the URL and turn HTML into text lines.  Only URLs that
  came back from a search may be opened (the local contract: "use an id from search
  results"); an agent cannot make the host fetch an arbitrary address (no SSRF).  Nor can a
  poisoned result or a page's redirect: pages on loopback, private, link-local or reserved
  addresses (a cloud metadata service, the host's own services) are refused unless
  ``allow_private`` (a search service whose pages live on a local network, tests), and
  redirects are followed by hand (at most 5, http(s) only), each hop checked the same way.
  (A name that resolves to a public address for the check and a private one for the fetch —
  DNS rebinding — is not defended.)  The last pages fetched are kept, so ``find`` after
  ``open`` does not fetch again.

Every failure of the service — unreachable, timed out, an HTTP error status, a URL httpx cannot
parse, a body that is not the expected JSON, a page that is not text — is a :class:`SearchError`
naming the server and what went wrong, so an env hands it to the agent as a tool error like any
other.  What a server sends is bounded (envgym/tools/search/http_fetch.py): one deadline per request
(``timeout_s``, across redirects, headers and a body dripped a byte at a time), and at most
``MAX_PAGE_BYTES`` decoded bytes of a page, counted as they are decoded (a ``gzip, gzip`` bomb
never decodes past the cap); a longer page is cut, and its text ends with a note saying so.
"""

from __future__ import annotations

import html
import ipaddress
import json
import re
import socket
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from envgym.tools.search.errors import SearchError
from envgym.tools.search.http_fetch import ACCEPT_ENCODING, BodyError, Deadline, read_body
from envgym.tools.search.index import Document, Hit

MAX_PAGE_BYTES = 2_000_000  # decoded bytes of a page read; the rest is cut, and the agent told
MAX_ANSWER_BYTES = 5_000_000  # decoded bytes of a search answer (cut JSON is unreadable: refused)
MAX_REMEMBERED = 10_000  # result URLs kept for open/find (oldest forgotten first)
MAX_CACHED_PAGES = 16  # fetched pages kept: find() after open() reads the same text
MAX_REDIRECTS = 5

if TYPE_CHECKING:  # httpx is imported when a WebSearch is made: the local index never needs it
    import httpx
_TEXT_TYPES = ("text/", "application/xhtml", "application/json", "application/xml")
_HEADERS = {"Accept-Encoding": ACCEPT_ENCODING}


class _TextOfHTML(HTMLParser):
    """Visible text of an HTML page, one line per block; scripts and styles dropped."""

    _SKIP = frozenset({"script", "style", "noscript", "template"})
    _BLOCK = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
              "pre", "table", "ul", "ol", "dd", "dt", "header", "footer", "title"})  # fmt: skip

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
    """A :class:`envgym.tools.search.tools.Backend` over a SearxNG-style ``/search?format=json``
    API.

    Args:
        base_url: the service root, e.g. ``http://127.0.0.1:8888`` (``/search`` is appended).
        timeout_s: the whole of one request (every redirect, connect, header and body read), for
            searches and page fetches alike.
        client: an ``httpx.Client`` to use (tests, proxies); one is made otherwise.
        allow_private: let pages on loopback/private/link-local addresses be opened.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        client: httpx.Client | None = None,
        allow_private: bool = False,
    ) -> None:
        import httpx

        if not isinstance(base_url, str) or not re.match(r"https?://[^/\s]+", base_url):
            raise ValueError(
                f"the web search URL must be http(s)://host[:port][/path], not {base_url!r}"
            )
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, not {timeout_s}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.allow_private = allow_private
        # Redirects are followed by hand (_hops): each hop of a page has its address checked.
        # No keep-alive: every request opens its own socket, which its deadline can shut even
        # while a server drips the status line (a reused socket is not seen being connected).
        self._client = client or httpx.Client(timeout=timeout_s, follow_redirects=False,
                                              limits=httpx.Limits(max_keepalive_connections=0),
                                              headers={"User-Agent": "envgym-search/1"})  # fmt: skip
        self._seen: OrderedDict[str, str] = OrderedDict()  # url -> title from the results
        self._pages: OrderedDict[str, _Answer] = OrderedDict()  # url -> the page as read

    def close(self) -> None:
        self._client.close()

    def search(self, query: str, k: int) -> list[Hit]:
        answer = self._exchange(
            f"{self.base_url}/search",
            tool="search",
            shown=self.base_url,
            params={"q": query, "format": "json"},
            cap=MAX_ANSWER_BYTES,
        )
        if answer.cut:
            limit = MAX_ANSWER_BYTES
            raise SearchError(
                f"search: {self.base_url} answered more than {limit} bytes; the limit"
            )
        try:
            data = json.loads(answer.text)
        except ValueError:
            raise SearchError(f"search: the web search service at {self.base_url} did not answer JSON "
                              f"(got {answer.text[:80]!r}); is format=json enabled?") from None  # fmt: skip
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise SearchError(f"search: the web search service at {self.base_url} answered JSON without a "
                              "'results' list")  # fmt: skip
        hits: list[Hit] = []
        for rank, item in enumerate(results):
            if (
                not isinstance(item, dict)
                or not isinstance(item.get("url"), str)
                or not item["url"]
            ):
                continue  # one odd result does not spoil the rest
            url = item["url"]
            title = str(item.get("title") or url)
            score = item.get("score")
            numeric = isinstance(score, (int, float)) and not isinstance(score, bool)
            score = (
                float(score) if numeric else 1.0 / (rank + 1)
            )  # SearxNG omits it for some engines
            hits.append(
                Hit(url, title, score, " ".join(str(item.get("content") or "").split())[:160])
            )
            self._remember(url, title)
            if len(hits) == k:
                break
        return hits

    def get(self, doc_id: str) -> Document | None:
        if doc_id not in self._seen:
            return None  # "no document with id …; use an id from search results"
        page = self._fetch(doc_id)
        if "html" in page.kind:
            title, text = html_text(page.text)
        else:
            title, text = "", html.unescape(page.text)
        if page.cut:  # the agent must know the end of the text is not the end of the page
            text += f"[the page was cut: only its first {MAX_PAGE_BYTES} bytes were read]\n"
        return Document(doc_id, title or self._seen[doc_id], text)

    def _fetch(self, url: str) -> _Answer:
        """A page (the last few are kept)."""
        if url not in self._pages:
            self._pages[url] = self._exchange(
                url,
                tool="open",
                shown=url,
                cap=MAX_PAGE_BYTES,
                check=lambda target: self._check_address(url, target),
            )
            while len(self._pages) > MAX_CACHED_PAGES:
                self._pages.popitem(last=False)
        self._pages.move_to_end(url)
        return self._pages[url]

    def _check_address(self, url: str, target: str) -> None:
        try:
            parts = urlsplit(target)
            hostname = parts.hostname
        except ValueError:  # e.g. an unclosed IPv6 bracket
            hostname = None
            parts = urlsplit("")
        if parts.scheme not in ("http", "https") or not hostname:
            raise SearchError(f"open: {url} leads to {_clip(repr(target))}, not an http(s) page")
        if not self.allow_private and _private_host(hostname):
            where = "is" if target == url else f"redirects to {_clip(hostname)}, which is"
            raise SearchError(f"open: {url} {where} on a private or local address; refused")

    def _exchange(
        self,
        first: str,
        *,
        tool: str,
        shown: str,
        cap: int,
        params: dict[str, str] | None = None,
        check: Callable[[str], None] | None = None,
    ) -> _Answer:
        """GET ``first`` within one deadline, following redirects by hand (at most MAX_REDIRECTS,
        each hop passed to ``check``), and read at most ``cap`` decoded bytes of the answer.
        Every failure is a SearchError that starts with ``tool`` and names ``shown``."""
        import httpx

        with Deadline(self.timeout_s) as deadline:
            try:
                return self._hops(first, tool, shown, cap, params, check, deadline)
            except BodyError as err:
                if not deadline.expired:
                    raise SearchError(f"{tool}: {shown} {err}") from None
            except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as err:
                # refused, DNS, reset, bad TLS, a URL httpx cannot parse, a socket the deadline shut
                if not (deadline.expired or isinstance(err, httpx.TimeoutException)):
                    raise SearchError(f"{tool}: cannot reach {shown} ({type(err).__name__}: "
                                      f"{_clip(str(err))})") from None  # fmt: skip
        raise SearchError(f"{tool}: {shown} did not answer within {self.timeout_s:g} s; try again")

    def _hops(
        self,
        target: str,
        tool: str,
        shown: str,
        cap: int,
        params: dict[str, str] | None,
        check: Callable[[str], None] | None,
        deadline: Deadline,
    ) -> _Answer:
        for _ in range(MAX_REDIRECTS + 1):
            if check is not None:
                check(target)
            with self._client.stream(
                "GET",
                target,
                params=params,
                timeout=deadline.left(),
                headers=_HEADERS,
                follow_redirects=False,
                extensions={"trace": deadline.trace},
            ) as reply:
                deadline.watch_stream(reply.extensions.get("network_stream"))  # a reused connection
                location = reply.headers.get("location") if reply.is_redirect else None
                if location:  # the body of a redirect is never read
                    target, params = urljoin(str(reply.url), location), None
                    continue
                if reply.status_code >= 400:
                    raise SearchError(f"{tool}: {shown} answered HTTP {reply.status_code} "
                                      f"{_clip(reply.reason_phrase)}".rstrip())  # fmt: skip
                kind = reply.headers.get("content-type", "text/plain").split(";")[0].strip().lower()
                if check is not None and not kind.startswith(_TEXT_TYPES):
                    raise SearchError(f"{tool}: {shown} is {_clip(kind)}, not a text page")
                encoding = reply.headers.get("content-encoding", "")
                body = read_body(reply.iter_raw(), encoding, cap, deadline)
                return _Answer(kind, _decode(body.data, reply.encoding), body.cut)
        raise SearchError(f"{tool}: {shown} redirects more than {MAX_REDIRECTS} times")

    def _remember(self, url: str, title: str) -> None:
        self._seen[url] = title
        self._seen.move_to_end(url)
        while len(self._seen) > MAX_REMEMBERED:
            self._seen.popitem(last=False)


@dataclass(frozen=True)
class _Answer:
    kind: str  # the content type, e.g. text/html
    text: str
    cut: bool  # only the first ``cap`` bytes were read


def _decode(data: bytes, charset: str | None) -> str:
    try:
        return data.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a codec that is not a text encoding (charset=rot13)
        return data.decode("utf-8", errors="replace")


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _private_host(host: str) -> bool:
    """Whether ``host`` is, or resolves to, a loopback/private/link-local/reserved address
    (an unresolvable name counts as private: it cannot be shown to be public)."""
    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            addresses = {ipaddress.ip_address(info[4][0].split("%")[0])
                         for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}  # fmt: skip
        except (OSError, ValueError):
            return True
    return any(a.is_private or a.is_loopback or a.is_link_local or a.is_reserved or a.is_multicast
               or a.is_unspecified for a in addresses)  # fmt: skip
