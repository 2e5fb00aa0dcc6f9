"""scripts/gpu_check.sh on a machine without a GPU: one clear FAIL line and a non-zero exit
before any check runs (the GPU run itself is recorded in docs/GPU.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run_without_a_gpu(**extra: str) -> subprocess.CompletedProcess[str]:
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so the answer is the same on a GPU workstation.
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", **extra}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )


@pytest.mark.timeout(120)
def test_without_a_cuda_device_it_says_so_and_fails() -> None:
    done = _run_without_a_gpu()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FAIL  cuda  no CUDA device" in done.stdout
    assert "torch.cuda.is_available() False" in done.stdout
    assert "PASS" not in done.stdout  # nothing was checked


@pytest.mark.timeout(120)
def test_its_parts_import_even_where_python_leaves_the_script_folder_off_the_path() -> None:
    # gpu_check.py imports gpu_check_*.py from beside it; under PYTHONSAFEPATH Python does not
    # put the script's folder on sys.path, so the wrapper must.  Reaching the CUDA line means
    # every part imported.
    done = _run_without_a_gpu(PYTHONSAFEPATH="1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FAIL  cuda  no CUDA device" in done.stdout, done.stdout + done.stderr
