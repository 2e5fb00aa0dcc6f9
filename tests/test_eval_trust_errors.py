"""An evaluation whose episodes mostly errored says so: exit 1, the first error's message, and
— when errored episodes came from the store — the hint that ``--retry-errors`` reruns them.

The CLI runs in process (typer's runner: its output is not a terminal) with the policy loader
swapped for the scripted test double, so no model runs; everything else is the real command.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_eval import SCRIPT
from test_rollout_doubles import ScriptedPolicy
from typer.testing import CliRunner

from envgym.cli import app
from envgym.evaluate import runner as eval_runner

runner = CliRunner()


def use_policy(monkeypatch: pytest.MonkeyPatch, fail: Callable[[str, int], str | None]) -> None:
    def load(*args: Any, **kwargs: Any) -> ScriptedPolicy:
        return ScriptedPolicy(lambda task, sample: SCRIPT, fail=fail)  # type: ignore[arg-type]

    monkeypatch.setattr(eval_runner, "load_policy", load)


def eval_cli(db: Path, *extra: str) -> Any:
    args = ["eval", "trip-planning-v0", "--model", "random", "--db", f"sqlite:///{db}"]
    return runner.invoke(app, [*args, "--max-turns", "4", *extra])


def always(session: str, turn: int) -> str | None:
    return "policy"


def never(session: str, turn: int) -> str | None:
    return None


def test_a_run_where_every_episode_errored_exits_1_with_the_first_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_policy(monkeypatch, always)
    done = eval_cli(tmp_path / "e.db", "--limit", "2", "-k", "2")
    assert done.exit_code == 1, done.output
    assert "4 of 4 episodes errored" in done.stderr and "errors dominate" in done.stderr
    assert "policy: server returned HTTP 500 three times for " in done.stderr
    assert "--retry-errors" not in done.stderr  # nothing was reused: they were run now


def test_cached_errors_say_retry_errors_and_it_clears_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = tmp_path / "e.db"
    use_policy(monkeypatch, always)
    assert eval_cli(db, "--limit", "2").exit_code == 1
    use_policy(monkeypatch, never)  # the cause is fixed…
    cached = eval_cli(db, "--limit", "2")  # …but the stored errors are reused
    assert cached.exit_code == 1
    assert "hint: 2 errored episodes were reused from the store" in cached.stderr
    assert "rerun with --retry-errors" in cached.stderr
    retried = eval_cli(db, "--limit", "2", "--retry-errors")
    assert retried.exit_code == 0, retried.output
    assert "errored" not in retried.stderr and "--retry-errors" not in retried.stderr


def test_errors_dominate_only_past_half(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def first_sample(session: str, turn: int) -> str | None:
        return "policy" if session.endswith("#0") else None

    use_policy(monkeypatch, first_sample)
    half = eval_cli(tmp_path / "half.db", "--limit", "1", "-k", "2")  # 1 of 2: not more than half
    assert half.exit_code == 0, half.output
    assert "warning: 1 of 2 episodes errored" in half.stderr
    assert "HTTP 500 three times for " in half.stderr
    most = eval_cli(tmp_path / "most.db", "--limit", "1")  # 1 of 1
    assert most.exit_code == 1 and "errors dominate" in most.stderr
    as_json = eval_cli(tmp_path / "most.db", "--limit", "1", "--json")  # stdout stays one object
    assert as_json.exit_code == 1 and as_json.stdout.count("\n") == 1
    assert '"reused_errored": 1' in as_json.stdout and "--retry-errors" in as_json.stderr
