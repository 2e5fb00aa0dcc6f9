"""Waiting for one fd to become readable, for any fd number.

``select.select`` takes fds below ``FD_SETSIZE`` (1024) only: a host process with a thousand
open sockets or sandboxes gets ``ValueError: filedescriptor out of range in select()`` from it.
``poll`` has no such bound.  Stdlib only.
"""

from __future__ import annotations

import math
import select
from typing import Protocol


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


def wait_readable(fd: int | _HasFileno, timeout_s: float | None) -> bool:
    """True once ``fd`` is readable (or hung up / in error: a read will tell), False on timeout."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    millis = None if timeout_s is None else max(0, math.ceil(timeout_s * 1000))
    try:
        return bool(poller.poll(millis))
    except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
        return False
