"""An append-only JSONL journal that survives ``kill -9`` at any byte.

Each record is one line written with a single ``write`` and ``fsync``-ed before ``append``
returns, so a record is either wholly on disk or (at worst) a torn last line.  Opening the
journal drops a torn last line (no newline, or not JSON) by truncating the file to the last
complete line; nothing that was acknowledged is ever lost.  Records are keyed: ``(type, key)``
is unique, and :meth:`Journal.append` refuses to write a key twice, so a resumed run cannot
duplicate one either.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


class JournalError(RuntimeError):
    """The journal cannot be used (a key written twice, a corrupt middle line)."""


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], dict[str, Any]] = {}
        self._recover()

    def _recover(self) -> None:
        if not self.path.exists():
            self.path.touch()
            return
        data = self.path.read_bytes()
        good = data.rfind(b"\n") + 1  # everything after the last newline is a torn write
        lines = data[:good].splitlines()
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
                key = (str(record["type"]), str(record["key"]))
            except (ValueError, KeyError, TypeError):
                if number == len(lines):  # a torn write that happened to end in a newline
                    good = len(b"\n".join(lines[:-1])) + (1 if number > 1 else 0)
                    break
                raise JournalError(f"{self.path} line {number} is not a journal record") from None
            self._records[key] = record
        if good < len(data):
            with open(self.path, "r+b") as fh:
                fh.truncate(good)
                fh.flush()
                os.fsync(fh.fileno())

    def get(self, type_: str, key: str) -> dict[str, Any] | None:
        return self._records.get((type_, key))

    def records(self, type_: str) -> list[dict[str, Any]]:
        return [r for (t, _), r in self._records.items() if t == type_]

    def append(self, type_: str, key: str, record: dict[str, Any]) -> None:
        """Write one record durably; a key already written raises :class:`JournalError`."""
        full = {"type": type_, "key": key, **record}
        line = (json.dumps(full, ensure_ascii=False, default=str) + "\n").encode()
        with self._lock:
            if (type_, key) in self._records:
                raise JournalError(f"journal record {type_}/{key} is already written")
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            self._records[(type_, key)] = full
