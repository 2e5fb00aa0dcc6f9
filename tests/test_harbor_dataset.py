"""Every task of envgym/envs/harbor/dataset passes ``envgym check``: the oracle earns 1, a no-op 0,
and none of the generic exploits earns anything (envgym/envs/harbor/check.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envgym.envs.harbor.check import check_path
from envgym.envs.harbor.env import HarborEnv

DATASET = Path(__file__).resolve().parents[1] / "envgym" / "envs" / "harbor" / "dataset"


@pytest.mark.heavy
def test_every_dataset_task_checks_oracle_one_noop_zero_no_exploit(require_backend: Any) -> None:
    require_backend("bwrap")
    env = HarborEnv(DATASET)
    try:
        results = check_path(str(DATASET), env=env)
    finally:
        env.close()
    assert len(results) >= 20
    bad = {r.task_id: r.problems for r in results if not r.ok}
    assert not bad, bad
