"""Per-step training metrics: TensorBoard, CSV, PNG curves, the run record, a rich display.

One step's metrics are a flat ``{name: float}`` (docs/TRAINER.md lists them: reward, pass rate,
KL, clip fractions, OPSM-masked fraction, IS ratios before/after truncation, routing-flip rate,
entropy, lengths, timings, what dynamic sampling and the staleness bound dropped).
:class:`MetricsLog` writes each step to

* ``metrics.csv`` — one row per step; new columns rewrite the header (the file is small);
* ``tb/`` — TensorBoard event files (``torch.utils.tensorboard``), one scalar per metric;
* ``curves.png`` — the main curves (matplotlib, Agg backend: no display needed);
* ``run.json`` — the run record (:class:`RunRecord`), and its row in the envgym store's
  ``training_runs`` table when ``metrics.store`` names a store (``Store.record_training_run``,
  upserted on the run key; see docs/TRAINER.md).

On resume, rows after the checkpoint's step are dropped (they belong to the killed tail).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CSV_NAME, PNG_NAME, RUN_NAME = "metrics.csv", "curves.png", "run.json"

# Panels of curves.png: (title, metric names); a panel shows whichever of its metrics exist.
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward / pass rate", ("reward_mean", "pass_rate", "heldout_pass_rate")),
    ("KL", ("kl",)),
    ("entropy", ("entropy", "entropy_bonus")),
    (
        "clip / mask fractions",
        ("clip_low_fraction", "clip_high_fraction", "dual_clip_fraction", "opsm_masked_fraction"),
    ),
    ("IS ratio π_old/π_engine", ("tis_ratio_mean", "tis_ratio_mean_truncated")),
    ("lengths (tokens)", ("response_len_mean", "seq_len_mean")),
    ("loss / grad norm", ("loss", "grad_norm")),
    ("routing flips", ("routing_flip_rate",)),
)


class MetricsLog:
    """Writes each step's metrics (see the module docstring)."""

    def __init__(
        self, directory: str | Path, *, tensorboard: bool = True, plot: bool = True
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.plot = plot
        self.rows: list[dict[str, float]] = _read_csv(self.dir / CSV_NAME)
        self._writer: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.dir / "tb"))

    def truncate(self, step: int) -> None:
        """Forget rows after ``step`` (a resume from that step's checkpoint)."""
        kept = [r for r in self.rows if r.get("step", 0) <= step]
        if len(kept) != len(self.rows):
            self.rows = kept
            self._rewrite()

    def log(self, metrics: dict[str, float]) -> None:
        if "step" not in metrics:
            raise ValueError("metrics need a 'step'")
        row = {k: float(v) for k, v in metrics.items()}
        self.rows.append(row)
        columns = _columns(self.rows[:-1])
        path = self.dir / CSV_NAME
        if set(row) - set(columns) or not path.exists():
            self._rewrite()
        else:
            with path.open("a", newline="") as fh:
                csv.DictWriter(fh, fieldnames=columns).writerow(_csv_row(row, columns))
        if self._writer is not None:
            step = int(row["step"])
            for key, value in row.items():
                if key != "step" and math.isfinite(value):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()
        if self.plot:
            plot_curves(self.rows, self.dir / PNG_NAME)

    def _rewrite(self) -> None:
        columns = _columns(self.rows)
        tmp = self.dir / f".{CSV_NAME}.tmp"
        with tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            for r in self.rows:
                writer.writerow(_csv_row(r, columns))
        tmp.replace(self.dir / CSV_NAME)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _columns(rows: list[dict[str, float]]) -> list[str]:
    seen: dict[str, None] = {"step": None}
    for r in rows:
        seen.update(dict.fromkeys(r))
    return list(seen)


def _csv_row(row: dict[str, float], columns: list[str]) -> dict[str, str]:
    return {c: (repr(row[c]) if c in row else "") for c in columns}


def _read_csv(path: Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        rows = csv.DictReader(fh)
        return [{k: float(v) for k, v in r.items() if v not in ("", None)} for r in rows]


def plot_curves(rows: list[dict[str, float]], path: Path) -> None:
    """The :data:`PANELS` that have data, against the step, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(t, [k for k in keys if any(k in r for r in rows)]) for t, keys in PANELS]
    panels = [(t, keys) for t, keys in panels if keys]
    if not panels:
        return
    cols = 2
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(10, 2.6 * nrows), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels):
        for key in keys:
            pts = [(r["step"], r[key]) for r in rows if key in r and math.isfinite(r[key])]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", markersize=3, label=key)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)


# -- the run record ----------------------------------------------------------------------------
@dataclass
class RunRecord:
    """One training run, as the store's ``training_runs`` table holds it (docs/TRAINER.md)."""

    run_key: str  # sha256 of the config (minus ``steps``): a resumed run keeps its key
    model: str
    envs: list[str]
    config: dict[str, Any]
    status: str = "running"  # running | finished | failed
    step: int = 0
    policy_version: int = 0
    metrics_dir: str = ""
    checkpoint_dir: str = ""
    last_metrics: dict[str, float] = field(default_factory=dict)
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    updated_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


def write_run(record: RunRecord, directory: str | Path, store_url: str | None = None) -> bool:
    """Write ``run.json``; with a ``store_url`` also upsert the run's ``training_runs`` row
    (``Store.record_training_run``; NaN metrics become null there).  Returns whether a store
    row was written."""
    record.updated_at = datetime.now(UTC).isoformat()
    path = Path(directory) / RUN_NAME
    tmp = path.with_name(f".{RUN_NAME}.tmp")
    tmp.write_text(json.dumps(asdict(record), indent=1, sort_keys=True, default=str))
    tmp.replace(path)
    if store_url is None:
        return False
    from envgym.store import Store

    # One short connection per write: a run lasts hours and a step's write is one upsert, so
    # holding nothing open between steps is cheaper than surviving a dropped connection.
    with Store(store_url) as store:
        store.record_training_run(**asdict(record))
    return True


def read_run(directory: str | Path) -> dict[str, Any] | None:
    path = Path(directory) / RUN_NAME
    return json.loads(path.read_text()) if path.exists() else None


# -- the progress display ------------------------------------------------------------------------
SHOWN = (
    ("reward", "reward_mean"),
    ("pass", "pass_rate"),
    ("kl", "kl"),
    ("ent", "entropy"),
    ("clip", "clip_high_fraction"),
    ("len", "response_len_mean"),
)


class ProgressDisplay:
    """A rich progress bar over the steps whose description carries the latest metrics."""

    def __init__(self, total: int, *, console: Any = None, start: int = 0) -> None:
        from rich.console import Console

        from envgym.progress import progress_bar

        self.progress = progress_bar(console or Console(stderr=True), before=("[bold]GRPO[/]",))
        self.task = self.progress.add_task("", total=total, completed=start)

    def __enter__(self) -> ProgressDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def phase(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def update_report(self, report: Any) -> None:
        """``on_step`` callback of envgym.trainer.loop.Trainer (a StepReport)."""
        self.update(report.metrics)

    def update(self, metrics: dict[str, float]) -> None:
        parts = [f"{label} {metrics[key]:.3g}" for label, key in SHOWN if key in metrics]
        if metrics.get("skipped"):
            parts.insert(0, "[yellow]skipped[/]")
        self.progress.update(
            self.task, completed=int(metrics["step"]), description=" · ".join(parts)
        )
