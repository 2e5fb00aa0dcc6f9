"""envgym/tools/search/web.py against servers that attack the host: a gzip bomb, a server that drips
one byte at a time forever, redirects httpx cannot parse, answers in encodings and charsets it
should not trust.  Every server is local (127.0.0.1, ``allow_private``) and stopped at the end; no
test asserts a timing — a slow server ends as a ``SearchError``, a bomb as a page cut at the cap
with a note for the agent and a bounded peak of memory.
"""

from __future__ import annotations

import json
import struct
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from local_http import LocalServer

from envgym.tools.search import SearchError, SearchTools
from envgym.tools.search.web import MAX_PAGE_BYTES, WebSearch

pytestmark = pytest.mark.timeout(60)

BOMB_CHUNKS = 256  # of 4 MiB of zeros: the page decodes to 1 GiB
REDIRECTS = {  # path -> where it redirects
    "/to/backslash": "http:\\\\host",  # httpx.InvalidURL
    "/to/drip": "/drip",
    "/to/space": "http://exa mple.com/",
    "/to/port": "http://h:99999/",
}


def _gzip_of_zeros(chunks: int, size: int = 4 << 20) -> bytes:
    """gzip of ``chunks * size`` zero bytes without compressing them all: after a full flush the
    compressor's state is reset, so every further chunk compresses to the same bytes."""
    zero = bytes(size)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = packer.compress(zero) + packer.flush(zlib.Z_FULL_FLUSH)
    repeat = packer.compress(zero) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.flush()[:-8]  # the final block; the trailer is written for the whole stream
    crc = 0
    for _ in range(chunks):
        crc = zlib.crc32(zero, crc)
    return (
        first + repeat * (chunks - 1) + end + struct.pack("<II", crc, (chunks * size) & 0xFFFFFFFF)
    )


def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(data) + packer.flush()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    body = _gzip(_gzip_of_zeros(BOMB_CHUNKS))  # "Content-Encoding: gzip, gzip"
    assert len(body) < 64 << 10
    return body


class Server:
    def __init__(self, bomb: bytes) -> None:
        self.requests: list[str] = []
        self.stop_event = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # http.server names it
                outer.requests.append(self.path)
                path = self.path.split("?")[0]
                if path == "/search":
                    return self._search()
                if path == "/bomb":
                    return self._send(
                        200, bomb, ("Content-Type", "text/html"), ("Content-Encoding", "gzip, gzip")
                    )
                if path == "/small.gz":
                    return self._send(
                        200,
                        _gzip(b"<p>hello gzip</p>"),
                        ("Content-Type", "text/html"),
                        ("Content-Encoding", "gzip"),
                    )
                if path == "/brotli":
                    return self._send(
                        200,
                        b"\x0b\x00\x80hi\x03",
                        ("Content-Type", "text/html"),
                        ("Content-Encoding", "br"),
                    )
                if path == "/corrupt.gz":
                    # a gzip header, then a deflate block of the reserved type 3
                    return self._send(
                        200,
                        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 20,
                        ("Content-Type", "text/html"),
                        ("Content-Encoding", "gzip"),
                    )
                if path == "/rot13":
                    return self._send(
                        200, b"<p>uryyb</p>", ("Content-Type", "text/html; charset=rot13")
                    )
                if path == "/drip":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.end_headers()
                    return self._drip(b"<p>" + b"x" * 10_000)
                if (
                    path == "/drip-headers"
                ):  # the status line and headers themselves, a byte at a time
                    return self._drip(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Pad: " + b"y" * 10_000
                    )
                if path.startswith("/to/"):
                    self.send_response(302)
                    self.send_header("Location", REDIRECTS[path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return self._send(404, b"not found", ("Content-Type", "text/plain"))

            def _search(self) -> None:
                mode = outer.search_mode
                if mode == "bomb":
                    return self._send(
                        200,
                        bomb,
                        ("Content-Type", "application/json"),
                        ("Content-Encoding", "gzip, gzip"),
                    )
                if mode == "drip":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    return self._drip(b'{"results": [' + b" " * 10_000)
                paths = ["/bomb", "/small.gz", "/brotli", "/corrupt.gz", "/rot13", "/drip"]
                paths += ["/drip-headers", *REDIRECTS]
                results = [{"url": outer.base + p, "title": p} for p in paths]
                return self._send(
                    200,
                    json.dumps({"results": results}).encode(),
                    ("Content-Type", "application/json"),
                )

            def _drip(self, data: bytes) -> None:
                for i in range(len(data)):
                    if outer.stop_event.wait(0.2):
                        return
                    try:
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                    except OSError:  # the client gave up: what the test wants
                        return

            def _send(self, status: int, body: bytes, *headers: tuple[str, str]) -> None:
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.search_mode = "ok"
        self.local = LocalServer(Handler)
        self.base = self.local.base

    def stop(self) -> None:
        self.stop_event.set()
        self.local.stop()


@pytest.fixture
def server(bomb: bytes) -> Iterator[Server]:
    s = Server(bomb)
    yield s
    s.stop()


@pytest.fixture
def tools(server: Server) -> Iterator[SearchTools]:
    backend = WebSearch(server.base, timeout_s=1.0, allow_private=True)
    yield SearchTools(backend)
    backend.close()


def _id(tools: SearchTools, path: str) -> str:
    return next(h["id"] for h in tools.search("anything", k=20) if h["id"].endswith(path))


def test_a_gzip_bomb_is_cut_at_the_cap_without_decoding_it_all(tools: SearchTools) -> None:
    url = _id(tools, "/bomb")
    tracemalloc.start()
    try:
        page = tools.open(url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the page is the first MAX_PAGE_BYTES decoded bytes (zeros), with a note that it was cut;
    # memory stays a small multiple of the cap, far from the gigabyte the page decodes to
    assert peak < 8 * MAX_PAGE_BYTES
    last = tools.open(url, page=page["pages"])
    assert f"[the page was cut: only its first {MAX_PAGE_BYTES} bytes were read]" in last["text"]


def test_small_gzip_pages_still_open(tools: SearchTools) -> None:
    assert "hello gzip" in tools.open(_id(tools, "/small.gz"))["text"]
    assert "uryyb" in tools.open(_id(tools, "/rot13"))["text"]  # a charset that is not a text codec


@pytest.mark.parametrize(("path", "message"), [
    ("/brotli", r"open: .*/brotli is encoded as 'br', which is not read \(gzip and deflate are\)"),
    ("/corrupt.gz", r"open: .*/corrupt\.gz has a corrupt gzip encoding"),
    ("/drip", r"open: .*/drip did not answer within 1 s"),
    ("/drip-headers", r"open: .*/drip-headers did not answer within 1 s"),
    ("/to/drip", r"open: .*/to/drip did not answer within 1 s"),
    ("/to/backslash", r"open: .*/to/backslash"),
    ("/to/space", r"open: .*/to/space"),
    ("/to/port", r"open: .*/to/port"),
])  # fmt: skip
def test_hostile_pages_are_search_errors(tools: SearchTools, path: str, message: str) -> None:
    url = _id(tools, path)
    with pytest.raises(SearchError, match=message):
        tools.open(url)


@pytest.mark.parametrize(("mode", "message"), [
    ("bomb", r"search: .* answered more than \d+ bytes"),
    ("drip", r"search: .* did not answer within 1 s"),
])  # fmt: skip
def test_a_hostile_search_service_is_a_search_error(
    server: Server, tools: SearchTools, mode: str, message: str
) -> None:
    server.search_mode = mode
    with pytest.raises(SearchError, match=message):
        tools.search("anything")


def test_the_deadline_covers_the_whole_request(tools: SearchTools) -> None:
    """A redirect to a dripping page shares one deadline: the second hop gets what is left."""
    url = _id(tools, "/to/drip")
    began = time.monotonic()
    with pytest.raises(SearchError, match="did not answer within 1 s"):
        tools.open(url)
    assert time.monotonic() - began < 30  # bounded (a sanity bound, far above the deadline)
