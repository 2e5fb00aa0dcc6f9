"""`envgym check` reaches the benchmark families' own checks (τ²'s oracle, the MCP suite's gold
calls + verify.py) instead of the bundle check, and `family/domain` ids resolve in the registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envgym import registry

ROOT = Path(__file__).resolve().parents[1]
ENVGYM = [sys.executable, "-m", "envgym.cli"]


def _check(target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENVGYM, "check", target], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)  # fmt: skip


@pytest.mark.timeout(300)
def test_check_tau2_mock_runs_the_oracle_and_reports_the_data_defect() -> None:
    done = _check("tau2/mock")
    out = " ".join((done.stdout + done.stderr).split())
    assert "envgym check tau2/mock" in out  # the oracle's table, not a bundle check
    assert "9/9 tasks pass the gold check" in out
    # a task a do-nothing agent passes measures no skill: named as a problem, the check fails
    assert "problem: create_task_1_nl_eval: an agent that does nothing" in out
    assert "FAILED:" in out and done.returncode == 1
    # τ²'s mock data defect (no gold action for an env assertion) is named, not hidden
    assert "update_task_with_history_and_env_assertions: gold supplied by envgym" in out


@pytest.mark.timeout(300)
def test_check_an_mcp_suite_env_runs_the_suite_check() -> None:
    done = _check("mcp-suite-filesystem-v0")
    assert "PASSED: 7/7 tasks pass" in done.stdout + done.stderr
    assert done.returncode == 0


@pytest.mark.timeout(60)
def test_family_slash_domain_ids_resolve() -> None:
    assert registry.spec("tau2/airline").id == "tau2-airline-v0"
    with pytest.raises(KeyError, match="no environment 'tau2-nowhere'"):
        registry.spec("tau2/nowhere")
