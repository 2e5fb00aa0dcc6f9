"""``envgym bench train --quick --json``: the benchmark contract's keys (never its timings)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

KEYS = ("naive_peak_rss_gib", "efficient_peak_rss_gib", "naive_step_s", "efficient_step_s")


@pytest.mark.heavy
@pytest.mark.timeout(1200)
def test_bench_train_quick_json_has_the_contract_keys() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "envgym.cli", "bench", "train", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=1150,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1  # exactly one JSON object on stdout (DESIGN.md)
    payload = json.loads(lines[0])
    assert payload["benchmark"] == "train"
    metrics, units = payload["metrics"], payload["units"]
    for key in KEYS:
        assert key in metrics and math.isfinite(metrics[key]) and metrics[key] > 0, key
        assert units[key] == ("GiB" if key.endswith("_gib") else "s")
    # both variants trained on the same batch: the same loss, up to float rounding
    assert metrics["loss_abs_diff"] < 1e-4 and metrics["entropy_abs_diff"] < 1e-3


def test_bench_train_child_refuses_bad_shapes() -> None:
    from envgym.benchmarks.train import main

    with pytest.raises(SystemExit):
        main(["--child", "efficient", "--tokens", "10"])
    with pytest.raises(SystemExit):
        main(["--child", "sideways"])
