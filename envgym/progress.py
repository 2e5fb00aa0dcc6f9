"""The one rich progress bar the long-running commands share (eval, synth, sft, train).

Same columns everywhere — description, bar, done/total, elapsed, remaining — so the commands
read alike; ``before``/``after`` add a command's own columns (a fixed label, a metrics field).
Drawn on ``console`` (the commands pass their stderr console: stdout stays for results/JSON).
:func:`print_stages` is the stage/count/note table the synthesis commands end with.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


def progress_bar(
    console: Console,
    *,
    before: Sequence[ProgressColumn | str] = (),
    after: Sequence[ProgressColumn | str] = (),
) -> Progress:
    """A non-transient :class:`rich.progress.Progress` with the shared columns."""
    return Progress(
        *before,
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *after,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
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
