"""``envgym bench scale`` smoke test: tiny levels on both backends; never asserts timings."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import pytest

from envgym.benchmarks import scale
from envgym.bundle import load_bundle


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["inprocess", "bwrap", "bwrap-fork", "bwrap-fork-source"])
def test_a_level_runs_and_leaves_nothing_behind(
    backend: str, require_backend: Callable[[str], None]
) -> None:
    require_backend("bwrap" if backend.startswith("bwrap") else backend)
    if "-fork" in backend and os.geteuid() != 0:
        pytest.skip("forked workers need a root host")
    from envgym.envs.trip_planning.build import default_bundle_dir

    row = scale.run_level(load_bundle(default_bundle_dir()), backend, 2, 2)
    assert row["episodes"] == 4 and row["errored_episodes"] == 0, row["first_error"]
    assert row["leaked_processes"] == 0
    for key in ("reset_p50_ms", "reset_p99_ms", "resets_per_s", "step_p50_ms", "steps_per_s"):
        assert isinstance(row[key], float) and math.isfinite(row[key]) and row[key] > 0, key
    if backend.startswith("bwrap"):
        assert row["sandboxes_per_env"] >= 1 and row["pss_mib_per_sandbox"] > 0
        # The interpreters alone: part of the sandboxes' PSS (bwrap and its init are the rest).
        assert 0 < row["worker_pss_mib"] < row["pss_mib_per_sandbox"]
    from envgym.sandbox.bwrap import BwrapSandbox

    assert BwrapSandbox.loads_bytecode  # a "-source" level restores the default


def test_bad_knobs_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVGYM_SCALE_LEVELS", "1,lots")
    with pytest.raises(ValueError, match="ENVGYM_SCALE_LEVELS must be comma-separated"):
        scale._ints("ENVGYM_SCALE_LEVELS", (1,))
    monkeypatch.setenv("ENVGYM_SCALE_LEVELS", "0")
    with pytest.raises(ValueError, match="between 1 and 4096"):
        scale._ints("ENVGYM_SCALE_LEVELS", (1,))
