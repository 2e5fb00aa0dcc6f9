"""The host's end of a worker's channel: the line protocol with wall-clock deadlines.

Newline-delimited compact JSON over the worker's fds, ``poll`` on non-blocking fds, no
threads: one request is one ``write``, one ``poll`` and usually one ``read`` on each side.
:class:`WorkerHandle` is what a backend's launch returns (the fds, how to kill the worker and
why it died).  Split from process.py, which drives workers through it.
"""

from __future__ import annotations

import abc
import itertools
import json
import os
import select
import signal
import time
from typing import Any

from envgym.sandbox.base import CallError

_encode = json.JSONEncoder(separators=(",", ":")).encode


class WorkerDied(Exception):
    """The worker is gone or unusable; the call gets ``kind`` and the worker is discarded."""

    def __init__(self, kind: CallError, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class WorkerHandle(abc.ABC):
    """One launched worker, as the host sees it."""

    read_fd: int
    write_fd: int

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill the worker and everything it started, release its fds; idempotent.

        Returns when nothing of the sandbox runs any more (or after a bounded wait), so the
        state can be handed to a new worker without a writer of the old one racing it."""

    @abc.abstractmethod
    def death(self) -> tuple[CallError, str]:
        """After EOF or :meth:`kill`: why the worker ended, in words fit for an agent."""

    @abc.abstractmethod
    def diagnostics(self) -> str:
        """Host-side details (stderr of the launcher, ...) for startup failures."""

    def quiet(self) -> bool:
        """Checked by the host from outside after each op: True when the worker is one thread
        and nothing else of the sandbox runs.  Backends that cannot see inside say True."""
        return True


def signal_death(signum: int) -> tuple[CallError, str]:
    if signum == signal.SIGXCPU:
        return CallError.TIMEOUT, "the sandbox used up its CPU-time limit and was restarted"
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return CallError.CRASH, f"the sandbox process crashed ({name}) and was restarted"


class Connection:
    """Newline-delimited JSON over a worker's fds, with deadlines."""

    def __init__(self, handle: WorkerHandle, max_line: int) -> None:
        self.handle = handle
        self.max_line = max_line
        os.set_blocking(handle.read_fd, False)
        os.set_blocking(handle.write_fd, False)
        self._readable = select.poll()
        self._readable.register(handle.read_fd, select.POLLIN)
        self._writable = select.poll()
        self._writable.register(handle.write_fd, select.POLLOUT)
        self._ids = itertools.count(1)
        self._buffer = bytearray()
        self._pending = 1  # replies owed: the hello, then one per request

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        return self.read_reply(self.send(message, deadline, timeout), deadline, timeout)

    def send(self, message: dict[str, Any], deadline: float, timeout: float) -> int:
        """Write one request; returns its id (read the reply later with :meth:`read_reply`)."""
        rid = next(self._ids)
        message["id"] = rid
        self._write((_encode(message) + "\n").encode(), deadline, timeout)
        self._pending += 1
        return rid

    def read_reply(self, rid: int, deadline: float, timeout: float) -> dict[str, Any]:
        line = self._read_line(deadline, timeout)
        try:
            reply = json.loads(line)
        except ValueError:
            raise WorkerDied(
                CallError.PROTOCOL, "the sandbox sent a malformed reply and was restarted"
            ) from None
        if not isinstance(reply, dict) or reply.get("id") != rid:
            raise WorkerDied(
                CallError.PROTOCOL, "the sandbox sent an unexpected reply and was restarted"
            )
        self._pending -= 1
        if not self._pending and self._buffer:
            # Bytes nobody asked for: something besides the worker loop wrote to the channel,
            # so later replies cannot be trusted either.
            raise WorkerDied(
                CallError.PROTOCOL,
                "the sandbox wrote extra data to its reply channel and was restarted",
            )
        return reply

    def _write(self, data: bytes, deadline: float, timeout: float) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.handle.write_fd, view) :]
            except BlockingIOError:
                self._wait(self._writable, deadline, timeout)
            except (BrokenPipeError, ConnectionResetError):
                raise WorkerDied(*self.handle.death()) from None

    def _read_line(self, deadline: float, timeout: float) -> bytes:
        buffer = self._buffer
        scanned = 0
        while True:
            end = buffer.find(b"\n", scanned)
            if end >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                return line
            scanned = len(buffer)
            if scanned > self.max_line:
                raise WorkerDied(
                    CallError.PROTOCOL, "the sandbox sent an oversized reply and was restarted"
                )
            # Poll first: the reply is rarely there yet, and a failing read costs an exception.
            self._wait(self._readable, deadline, timeout)
            try:
                chunk = os.read(self.handle.read_fd, 1 << 16)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise WorkerDied(*self.handle.death())
            if not buffer and chunk.find(b"\n") == len(chunk) - 1:
                return chunk[:-1]  # the common case: exactly one whole reply, no copying
            buffer += chunk

    def _wait(self, poller: select.poll, deadline: float, timeout: float) -> None:
        # A passed deadline means "wait no longer", not "ignore what already arrived": a
        # worker's greeting that waited while the model thought for minutes is still good.
        remaining = max(0.0, deadline - time.monotonic())
        if (
            not poller.poll(int(remaining * 1000) + (remaining > 0))
            and time.monotonic() >= deadline
        ):
            raise WorkerDied(
                CallError.TIMEOUT,
                f"the call took longer than {timeout:g} s and was stopped; the sandbox was restarted",
            )
