"""What the model sees of one execution: Jupyter IOPub messages folded into capped text.

Streams (stdout and stderr, in arrival order) and ``text/plain`` results are kept verbatim up to
``max_chars`` (beyond that: the head, a marker saying how much was cut, and the tail).  Images
become a one-line placeholder with their size, HTML without a plain-text alternative becomes a
placeholder too, and a traceback is shortened to the cell's frame and the last frames.
"""

from __future__ import annotations

import base64
import re
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SITE = re.compile(re.escape(sys.prefix.rstrip("/")) + r"/lib/python\d+\.\d+/site-packages/")
_BASE = re.compile(re.escape(sys.base_prefix.rstrip("/")) + r"/lib/python\d+\.\d+/")


@dataclass(frozen=True)
class KernelError:
    """An exception raised by the executed code."""

    ename: str
    evalue: str
    traceback: str  # shortened, plain text


def _image_placeholder(mime: str, payload: Any) -> str:
    raw = payload if isinstance(payload, str) else ""
    size = len(raw) * 3 // 4  # base64
    dims = ""
    if mime == "image/png" and raw:
        try:
            head = base64.b64decode(raw[:44])
            width, height = struct.unpack(">II", head[16:24])
            dims = f" {width}x{height}"
        except (ValueError, struct.error):
            pass
    return f"<{mime} image{dims}, {size / 1024:.1f} KiB: not shown>"


def render_data(data: dict[str, Any]) -> str:
    """One ``display_data``/``execute_result`` bundle as text for the model."""
    images = [m for m in data if m.startswith("image/")]
    if images:
        return _image_placeholder(images[0], data[images[0]])
    if "text/plain" in data:
        return str(data["text/plain"])
    for mime in ("text/markdown", "text/latex"):
        if mime in data:
            return str(data[mime])
    if "text/html" in data:
        return f"<HTML output, {len(str(data['text/html']))} characters: not shown>"
    kinds = ", ".join(sorted(data)) or "empty"
    return f"<rich output ({kinds}): not shown>"


def shorten_traceback(lines: list[str], ename: str, evalue: str, max_lines: int) -> str:
    """Plain-text traceback: no ANSI, library paths shortened, at most ``max_lines`` lines
    (the first frame — the cell — and the last ones)."""
    text = _ANSI.sub("", "".join(x if x.endswith("\n") else x + "\n" for x in lines))
    text = _BASE.sub("", _SITE.sub("", text))
    out = [ln for ln in text.splitlines() if ln.strip()]
    last = f"{ename}: {evalue}" if evalue else ename
    if not out or out[-1].strip() != last.strip():
        out.append(last)
    if len(out) > max_lines:
        head = out[:3]  # "Traceback ...", the cell frame and its source line
        tail = out[-(max_lines - 4) :]
        out = head + [f"  ... ({len(out) - len(head) - len(tail)} lines omitted)"] + tail
    return "\n".join(out)


@dataclass
class OutputCollector:
    """Accumulates one execution's output with bounded memory."""

    max_chars: int
    flood_bytes: int
    max_traceback_lines: int = 12
    received: int = 0  # characters received in total, kept or not
    dropped: int = 0  # oversized messages refused on the socket, never read
    error: KernelError | None = None
    _head: list[str] = field(default_factory=list)
    _head_len: int = 0
    _tail: str = ""
    _total: int = 0  # characters of output text (kept, cut or in the tail)

    @property
    def flooded(self) -> bool:
        return self.received > self.flood_bytes

    def add_text(self, text: str) -> None:
        self.received += len(text)
        self._total += len(text)
        room = self.max_chars - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
        keep = self.max_chars // 2
        self._tail = (self._tail + text[-keep:])[-keep:]  # the last characters of everything

    def drop(self, limit: int) -> None:
        """An output message over ``limit`` bytes was refused unread: count it as a flood."""
        self.dropped += 1
        self.received = max(self.received, self.flood_bytes + 1, limit + 1)

    def add_message(self, msg_type: str, content: dict[str, Any]) -> None:
        """Fold one IOPub message (already known to belong to this execution)."""
        if msg_type == "stream":
            self.add_text(str(content.get("text", "")))
        elif msg_type in ("execute_result", "display_data", "update_display_data"):
            text = render_data(content.get("data") or {})
            self.add_text(text if text.endswith("\n") else text + "\n")
        elif msg_type == "error":
            ename, evalue = str(content.get("ename", "Error")), str(content.get("evalue", ""))
            tb = [str(x) for x in content.get("traceback") or []]
            self.error = KernelError(
                ename, evalue, shorten_traceback(tb, ename, evalue, self.max_traceback_lines)
            )
            self.received += sum(len(x) for x in tb)
        elif msg_type == "clear_output":
            self._head, self._head_len, self._tail, self._total = [], 0, "", 0

    def render(self) -> str:
        """The output text: everything when it fits, else head + marker + tail; then the error."""
        head = "".join(self._head)
        if self._total <= self.max_chars:
            text = head
        else:
            keep_head = head[: self.max_chars // 2]
            cut = self._total - len(keep_head) - len(self._tail)
            text = f"{keep_head}\n[... {cut} characters of output omitted ...]\n{self._tail}"
        if self.error is not None:
            text = (
                text + "\n" if text and not text.endswith("\n") else text
            ) + self.error.traceback
        return text
