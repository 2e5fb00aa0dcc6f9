"""The one rich progress bar the long-running commands share (eval, synth, sft, train).

Same columns everywhere — description, bar, done/total, elapsed, remaining — so the commands
read alike; ``before``/``after`` add a command's own columns (a fixed label, a metrics field).
Drawn on ``console`` (the commands pass their stderr console: stdout stays for results/JSON).
On a console that is not a terminal (output piped to a file, a CI log, ``| tee``) rich draws
nothing until the end, so a long run looked hung there: the bar then also prints a plain line —
whenever a task's done count changes, and every :func:`line_interval` seconds while it runs
otherwise (with its other fields, e.g. eval's turns and tokens inside the running episodes).
:func:`print_stages` is the stage/count/note table the synthesis commands end with.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.errors import MarkupError
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

#: seconds between two piped lines that only repeat a task's fields; $ENVGYM_PROGRESS_SECONDS
LINE_INTERVAL_S = 10.0


def line_interval() -> float:
    """$ENVGYM_PROGRESS_SECONDS (≥ 0) or :data:`LINE_INTERVAL_S`."""
    raw = os.environ.get("ENVGYM_PROGRESS_SECONDS", "")
    try:
        value = float(raw)
    except ValueError:
        return LINE_INTERVAL_S
    return value if value >= 0 else LINE_INTERVAL_S


class LineProgress(Progress):
    """A :class:`Progress` that also prints plain lines when its console is not a terminal."""

    def __init__(self, *columns: ProgressColumn | str, interval_s: float, **kwargs: Any) -> None:
        super().__init__(*columns, **kwargs)
        self.interval_s = interval_s
        self._printed: dict[TaskID, tuple[tuple[float, float | None, str], float]] = {}
        self._beat: threading.Thread | None = None
        self._stopping = threading.Event()
        # guards _printed only: printing under Progress._lock could deadlock with Live's refresh
        self._line_lock = threading.Lock()

    def start(self) -> None:
        super().start()
        if not (self.console.is_terminal or self.console.is_jupyter) and self.interval_s > 0:
            # a heartbeat: a task that is running but not moving (a model's long turn) still
            # prints a line every interval, so a piped log never looks hung
            self._stopping.clear()
            self._beat = threading.Thread(target=self._heartbeat, daemon=True)
            self._beat.start()

    def stop(self) -> None:
        beat = self._beat
        if beat is not None:
            self._stopping.set()
            beat.join(timeout=5)
            self._beat = None
        super().stop()

    def _heartbeat(self) -> None:
        while not self._stopping.wait(max(self.interval_s, 1.0)):
            with self._lock:
                running = [t.id for t in self._tasks.values() if t.started and not t.finished]
            for task_id in running:
                self._line(task_id)

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        super().update(task_id, **kwargs)
        self._line(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._line(task_id)

    def _line(self, task_id: TaskID) -> None:
        if self.console.is_terminal or self.console.is_jupyter:
            return  # the live bar shows it
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return
            description = _plain(task.description)
            counts = (task.completed, task.total, description)
            fields = [str(v) for v in task.fields.values() if isinstance(v, str | int) and v != ""]
            elapsed = task.elapsed or 0.0
        now = time.monotonic()
        with self._line_lock:
            last = self._printed.get(task_id)
            if last is not None and last[0] == counts and now - last[1] < self.interval_s:
                return
            self._printed[task_id] = (counts, now)
        done = f"{task.completed:g}" + (f"/{task.total:g}" if task.total is not None else "")
        line = " · ".join([f"{description}: {done}", *fields, f"{elapsed:.0f} s"])
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)


def _plain(markup: str) -> str:
    try:
        return Text.from_markup(markup).plain
    except MarkupError:
        return markup


def progress_bar(
    console: Console,
    *,
    before: Sequence[ProgressColumn | str] = (),
    after: Sequence[ProgressColumn | str] = (),
) -> Progress:
    """A non-transient :class:`rich.progress.Progress` with the shared columns (and plain lines
    when ``console`` is not a terminal)."""
    return LineProgress(
        *before,
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *after,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        interval_s=line_interval(),
    )


def print_stages(title: str, rows: Sequence[tuple[str, str, str]]) -> Console:
    """Print a synthesis run's ``(stage, count, note)`` rows on stdout; returns that console."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=title)
    for col in ("stage", "count", "note"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return console
