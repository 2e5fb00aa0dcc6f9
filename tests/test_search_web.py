"""envgym/tools/search/web.py against a real HTTP server on 127.0.0.1 that speaks SearxNG's JSON
shape.

No SearxNG can run offline, so the server is a small one written here: ``/search?q=…&format=json``
answers ``{"results": [{url, title, content, score}]}`` ranked by word overlap over a few HTML
pages it also serves; other paths misbehave on purpose (slow, malformed JSON, HTTP errors).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from local_http import LocalServer

from envgym.tools.search import SearchError, SearchTools
from envgym.tools.search.web import WebSearch

pytestmark = pytest.mark.timeout(60)

PAGES = {
    "/doc/httpx": (
        "<html><head><title>HTTPX</title><style>p{}</style></head><body><h1>HTTPX</h1>"
        "<p>A next-generation HTTP client for Python.</p><script>var x = 'hidden';</script>"
        "<p>Version 0.28 supports HTTP/2 &amp; async.</p></body></html>"
    ),
    "/doc/requests": "<html><body><p>Requests: HTTP for humans, a Python library.</p></body></html>",
    "/doc/long": "<html><body>"
    + "".join(f"<p>line {i} {'word ' * 30}</p>" for i in range(300))
    + "</body></html>",
}


class Server:
    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                outer.requests.append(self.path)
                url = urlparse(self.path)
                if url.path == "/search":
                    self._search(parse_qs(url.query))
                elif url.path in PAGES:
                    self._send(200, "text/html; charset=utf-8", PAGES[url.path].encode())
                elif url.path == "/huge":
                    self._send(200, "text/html", b"<p>" + b"x" * 2_100_000)
                elif url.path.startswith("/redirect/"):  # /redirect/<n>/<path>: n hops, then path
                    n, _, rest = url.path.removeprefix("/redirect/").partition("/")
                    target = f"/redirect/{int(n) - 1}/{rest}" if int(n) > 1 else "/" + rest
                    if rest.startswith("to:"):
                        target = rest.removeprefix("to:").replace("|", "/")
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif url.path == "/binary":
                    self._send(200, "application/octet-stream", b"\x00\x01")
                else:
                    self._send(404, "text/plain", b"not found")

            def _search(self, query: dict[str, list[str]]) -> None:
                if outer.mode == "slow":
                    time.sleep(2)
                if outer.mode == "http500":
                    return self._send(500, "text/plain", b"upstream engines failed")
                if outer.mode == "malformed":
                    return self._send(200, "application/json", b'{"results": [')
                if outer.mode == "no-results-key":
                    return self._send(200, "application/json", b'{"answers": []}')
                if query.get("format") != ["json"]:
                    return self._send(403, "text/plain", b"format not allowed")
                words = set(query["q"][0].lower().split())
                results = []
                for path, page in PAGES.items():
                    overlap = len(
                        words & set(page.lower().replace("<", " ").replace(">", " ").split())
                    )
                    if overlap:
                        results.append(
                            {
                                "url": f"{outer.base}{path}",
                                "title": path.rsplit("/", 1)[1],
                                "content": page[:200],
                                "score": float(overlap),
                            }
                        )
                results.sort(key=lambda r: -r["score"])
                results.insert(1, {"title": "an odd result without a url"})
                if outer.mode == "redirects":
                    results = [{"url": f"{outer.base}/redirect/2/doc/httpx", "title": "two hops"},
                               {"url": f"{outer.base}/redirect/9/doc/httpx", "title": "loop"},
                               {"url": f"{outer.base}/redirect/1/to:file:||||etc|passwd", "title": "file"},
                               {"url": f"{outer.localhost}/redirect/1/to:{outer.base.replace('/', '|')}|doc|httpx",
                                "title": "public→private"}]  # fmt: skip
                if outer.mode == "binary":
                    results = [
                        {"url": f"{outer.base}/binary", "title": "bin", "content": ""},
                        {"url": f"{outer.base}/gone", "title": "gone", "content": ""},
                        {"url": f"{outer.base}/huge", "title": "huge", "content": ""},
                    ]
                self._send(
                    200,
                    "application/json",
                    json.dumps({"query": query["q"][0], "results": results}).encode(),
                )

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.local = LocalServer(Handler)
        self.base = self.local.base
        self.localhost = f"http://localhost:{self.local.port}"

    def stop(self) -> None:
        self.local.stop()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def tools(server: Server) -> Iterator[SearchTools]:
    backend = WebSearch(
        server.base, timeout_s=0.5, allow_private=True
    )  # the test pages live on 127.0.0.1
    yield SearchTools(backend)
    backend.close()


def test_search_open_find_over_the_web_backend(server: Server, tools: SearchTools) -> None:
    hits = tools.search("python http client", k=5)
    assert [h["id"] for h in hits][:2] == [
        f"{server.base}/doc/httpx",
        f"{server.base}/doc/requests",
    ]
    assert all(set(h) == {"id", "title", "score", "snippet"} for h in hits)
    assert any(p.startswith("/search?") and "format=json" in p for p in server.requests)
    assert len(tools.search("python http client", k=1)) == 1
    page = tools.open(hits[0]["id"])
    assert page["title"] == "HTTPX" and page["pages"] == 1
    assert "next-generation HTTP client" in page["text"] and "HTTP/2 & async" in page["text"]
    assert "hidden" not in page["text"] and "p{}" not in page["text"]  # scripts and styles dropped
    found = tools.find(hits[0]["id"], r"version \d+\.\d+")
    assert [m["match"] for m in found["matches"]] == ["Version 0.28"]
    assert server.requests.count("/doc/httpx") == 1  # find after open reads the kept page


def test_private_addresses_are_refused_by_default(server: Server) -> None:
    # a poisoned result (or a redirect) must not make the host read its own or a metadata service
    backend = WebSearch(server.base, timeout_s=0.5)
    tools = SearchTools(backend)
    try:
        url = tools.search("python http client", k=1)[0]["id"]
        with pytest.raises(
            SearchError,
            match=r"open: http://127\.0\.0\.1:\d+/doc/httpx is on a private or local address; refused",
        ):
            tools.open(url)
        assert not any(p.startswith("/doc/") for p in server.requests)  # nothing was fetched
    finally:
        backend.close()


def test_redirects_are_followed_by_hand_and_checked(
    server: Server, tools: SearchTools, monkeypatch
) -> None:
    from envgym.tools.search import web

    server.mode = "redirects"
    ids = [h["id"] for h in tools.search("anything", k=5)]
    assert "next-generation HTTP client" in tools.open(ids[0])["text"]  # two hops, then the page
    with pytest.raises(SearchError, match="redirects more than 5 times"):
        tools.open(ids[1])
    with pytest.raises(SearchError, match=r"leads to 'file:////etc/passwd', not an http\(s\) page"):
        tools.open(ids[2])
    # "localhost" stands in for a public host: a public page redirecting to a private address
    tools.backend.allow_private = False
    monkeypatch.setattr(web, "_private_host", lambda host: host != "localhost")
    with pytest.raises(
        SearchError,
        match=r"redirects to 127\.0\.0\.1, which is on a private or local address; refused",
    ):
        tools.open(ids[3])


def test_long_pages_are_paged_like_the_local_index(tools: SearchTools) -> None:
    url = next(h["id"] for h in tools.search("line word", k=10) if h["id"].endswith("/long"))
    first = tools.open(url)
    assert first["pages"] > 3
    last = tools.open(url, page=first["pages"])
    assert "line 299" in last["text"]
    with pytest.raises(SearchError, match=rf"open: page {first['pages'] + 1} is out of range"):
        tools.open(url, page=first["pages"] + 1)


def test_only_urls_from_results_can_be_opened(server: Server, tools: SearchTools) -> None:
    with pytest.raises(
        SearchError, match="open: no document with id .*use an id from search results"
    ):
        tools.open(f"{server.base}/doc/httpx")  # real page, but never returned by a search
    with pytest.raises(SearchError, match="find: no document with id"):
        tools.find("http://169.254.169.254/latest/meta-data", "x")
    assert not any(p.startswith("/doc/") for p in server.requests)  # nothing was fetched


def test_the_local_input_checks_apply_unchanged(server: Server, tools: SearchTools) -> None:
    for bad, message in [
        ("", "the query is empty"),
        ("x" * 1001, "the limit is 1000"),
        ("!!!", "no searchable words"),
    ]:
        with pytest.raises(SearchError, match=message):
            tools.search(bad)
    with pytest.raises(SearchError, match="k must be an integer"):
        tools.search("python", k=0)
    assert server.requests == []  # bad input never reaches the service


@pytest.mark.parametrize(("mode", "message"), [
    ("http500", r"search: http://127\.0\.0\.1:\d+ answered HTTP 500"),
    ("malformed", r"search: the web search service at .* did not answer JSON"),
    ("no-results-key", r"answered JSON without a 'results' list"),
    ("slow", r"search: http://127\.0\.0\.1:\d+ did not answer within 0\.5 s"),
])  # fmt: skip
def test_a_misbehaving_service_is_a_clear_search_error(
    server: Server, tools: SearchTools, mode: str, message: str
) -> None:
    server.mode = mode
    with pytest.raises(SearchError, match=message):
        tools.search("python")


def test_pages_that_are_not_text_or_gone(server: Server, tools: SearchTools) -> None:
    server.mode = "binary"
    ids = [h["id"] for h in tools.search("anything", k=5)]
    with pytest.raises(
        SearchError, match="open: .*/binary is application/octet-stream, not a text page"
    ):
        tools.open(ids[0])
    with pytest.raises(SearchError, match=r"open: .*/gone answered HTTP 404"):
        tools.open(ids[1])
    huge = tools.open(ids[2])  # cut at the cap, and the agent is told so at the end
    assert (
        "[the page was cut: only its first 2000000 bytes were read]"
        in tools.open(ids[2], page=huge["pages"])["text"]
    )


def test_a_server_that_is_down() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = WebSearch(f"http://127.0.0.1:{port}", timeout_s=0.5)
    with pytest.raises(
        SearchError, match=rf"search: cannot reach http://127\.0\.0\.1:{port} \(ConnectError"
    ):
        SearchTools(backend).search("python")
    backend.close()


@pytest.mark.parametrize("url", ["", "127.0.0.1:8888", "ftp://x", None])
def test_bad_service_urls(url: Any) -> None:
    with pytest.raises(ValueError, match="must be http"):
        WebSearch(url)
