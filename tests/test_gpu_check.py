"""scripts/gpu_check.sh on a machine without a GPU: one clear FAIL line and a non-zero exit
before any check runs (the GPU run itself is recorded in docs/GPU.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(120)
def test_without_a_cuda_device_it_says_so_and_fails() -> None:
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so the answer is the same on a GPU workstation.
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=110, check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FAIL  cuda  no CUDA device" in done.stdout
    assert "torch.cuda.is_available() False" in done.stdout
    assert "PASS" not in done.stdout  # nothing was checked
