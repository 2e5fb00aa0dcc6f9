"""``envgym bench kernels --quick --json`` prints one JSON object with the metric keys that
docs/KERNELS.md lists.

Only the shape of the output is checked: timings and memory on a shared CPU are never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KEYS = {
    "naive_peak_mib",
    "chunked_peak_mib",
    "naive_ms",
    "chunked_ms",
    "moe_loop_ms",
    "moe_grouped_ms",
}


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_bench_kernels_quick_json() -> None:
    envgym = Path(sys.executable).with_name("envgym")
    proc = subprocess.run(
        [str(envgym), "bench", "kernels", "--quick", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    payload = json.loads(lines[0])
    assert payload["benchmark"] == "kernels"
    assert set(payload["metrics"]) == KEYS
    assert all(isinstance(payload["metrics"][k], (int, float)) for k in KEYS)
    assert (
        payload["units"]["naive_peak_mib"] == "MiB" and payload["units"]["moe_grouped_ms"] == "ms"
    )
    assert "machine" in payload
