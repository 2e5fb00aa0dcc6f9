"""Reading one HTTP answer within a byte cap and one deadline, whatever the server sends.

httpx alone bounds neither: its ``timeout`` is per socket operation (a server sending one byte
every second never times out), and it decodes ``Content-Encoding`` in whole chunks with no
output bound (``gzip, gzip`` over 10 KB decodes to gigabytes in one call).  Here:

* :class:`Deadline` is one request's total budget, across redirects, headers and body.  Each
  socket operation gets what is left as its timeout, the body loop checks it between chunks,
  and a timer shuts the request's sockets down when it runs out, which wakes a read blocked on
  a server that drips its status line one byte at a time.
* :func:`read_body` reads the raw bytes and inflates each ``gzip``/``deflate`` layer itself, at
  most :data:`CHUNK` bytes of output per step, lazily: it stops at the cap, so no more than the
  cap (plus a chunk per layer) is ever decoded.  Other encodings are refused, not guessed.
"""

from __future__ import annotations

import socket
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Self

CHUNK = 64 << 10  # bytes of decoded output per inflate step
MAX_LAYERS = 3  # content encodings stacked on one answer ("gzip, gzip" is two)
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
ACCEPT_ENCODING = "gzip, deflate"  # asked of every server, so it has no reason to send others


class BodyError(Exception):
    """An answer that cannot be read: the message says why; the caller puts the address first."""


class Deadline:
    """The one time budget of a request; a context manager (its timer stops on exit).

    ``trace`` is an httpcore trace hook (``extensions={"trace": deadline.trace}``): it learns the
    sockets the request connects, so that :meth:`_expire` can shut them down."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Self:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def left(self) -> float:
        """Seconds left (raises :class:`BodyError` when none are)."""
        left = self.end - time.monotonic()
        if left <= 0 or self.expired:
            self.expired = True
            raise BodyError("deadline")
        return left

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith(".complete"):  # connect_tcp / start_tls: the stream just opened
            self.watch_stream(info.get("return_value"))

    def watch_stream(self, stream: Any) -> None:
        """Watch the socket of an httpcore network stream (anything else is ignored)."""
        get = getattr(stream, "get_extra_info", None)
        sock = get("socket") if callable(get) else None
        if isinstance(sock, socket.socket):
            self.watch(sock)

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if not self.expired:
                self._sockets.append(sock)
                return
        _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # a blocked recv returns; httpx then closes the socket
    except OSError:
        pass


def encodings_of(header: str) -> list[str]:
    """The content encodings to undo, in the order to undo them (the last applied first)."""
    names = [name.strip().lower() for name in header.split(",") if name.strip()]
    names = [name for name in names if name != "identity"]
    if len(names) > MAX_LAYERS:
        raise BodyError(f"is encoded {len(names)} times over; at most {MAX_LAYERS} layers are read")
    for name in names:
        if name not in _WBITS:
            raise BodyError(
                f"is encoded as {name[:40]!r}, which is not read (gzip and deflate are)"
            )
    return names[::-1]


def _inflate(chunks: Iterable[bytes], encoding: str) -> Iterator[bytes]:
    """Decoded output of one layer, ``CHUNK`` bytes at most per step, pulled lazily."""
    wbits = _WBITS[encoding]
    inflater = zlib.decompressobj(wbits)
    started = False
    for chunk in chunks:
        data = chunk
        while True:
            try:
                out = inflater.decompress(data, CHUNK)
            except zlib.error:
                if (
                    encoding == "deflate" and not started and wbits > 0
                ):  # raw deflate, no zlib header
                    wbits = -zlib.MAX_WBITS
                    inflater = zlib.decompressobj(wbits)
                    continue
                raise BodyError(f"has a corrupt {encoding} encoding") from None
            started = True
            if out:
                yield out
            if inflater.eof and inflater.unused_data:  # another gzip member follows
                data = inflater.unused_data
                inflater = zlib.decompressobj(wbits)
                continue
            data = inflater.unconsumed_tail
            if not data and not out:  # input used up and no output pending
                break
    if started and not inflater.eof:
        raise BodyError(f"has a corrupt {encoding} encoding (it ends early)")


@dataclass(frozen=True)
class Body:
    data: bytes
    cut: bool  # the answer went on past the cap; ``data`` is its beginning


def read_body(raw: Iterable[bytes], encoding_header: str, cap: int, deadline: Deadline) -> Body:
    """The decoded body, at most ``cap`` bytes; raises :class:`BodyError` ("deadline" when the
    deadline passed)."""
    stream: Iterable[bytes] = raw
    for encoding in encodings_of(encoding_header):
        stream = _inflate(stream, encoding)
    body = bytearray()
    for chunk in stream:
        deadline.left()
        room = cap - len(body)
        if len(chunk) > room:
            body += chunk[:room]
            return Body(bytes(body), cut=True)
        body += chunk
    if deadline.expired:  # the timer shut the socket: what looked like the end was the deadline
        raise BodyError("deadline")
    return Body(bytes(body), cut=False)
