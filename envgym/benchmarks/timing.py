"""Small timing helpers shared by benchmarks: medians of repeated calls, in microseconds, and
the spread of those medians over independent repetitions."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


def median_us(fn: Callable[[], object], *, repeat: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000.0


@dataclass(frozen=True)
class Spread:
    """The median of per-repetition medians, and the lowest and highest of them."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            raise ValueError("no repetitions to summarize")
        return cls(statistics.median(values), min(values), max(values))

    def metrics(self, name: str) -> dict[str, float]:
        """``name`` (the median) plus ``name_min`` / ``name_max`` for the table and JSON."""
        return {name: self.median, f"{name}_min": self.low, f"{name}_max": self.high}


def repeated(measure: Callable[[], float], *, reps: int) -> Spread:
    """Run a whole measurement ``reps`` times (each giving one median) and summarize: one
    run beside other load can be off by 2x, the spread shows it."""
    if reps < 1:
        raise ValueError(f"reps must be at least 1, not {reps}")
    return Spread.of([measure() for _ in range(reps)])
