"""The one rich progress bar the long-running commands share (eval, synth, sft, train).

Same columns everywhere — description, bar, done/total, elapsed, remaining — so the commands
read alike; ``before``/``after`` add a command's own columns (a fixed label, a metrics field).
Drawn on ``console`` (the commands pass their stderr console: stdout stays for results/JSON).
"""

from __future__ import annotations

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


def progress_bar(console: Console, *, before: Sequence[ProgressColumn | str] = (),
                 after: Sequence[ProgressColumn | str] = ()) -> Progress:
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
