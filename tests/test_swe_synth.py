"""``envgym synth swe`` (envgym/synth_agents/swe): a real history mined and validated into accepted
instances and named rejections; a killed run resumes without redoing work; other settings are
refused; a judge's rejections are named.  One module-private envgym cache (one env build)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swe_fixtures import make_synth_history, private_cache
from typer.testing import CliRunner

import envgym.envs.swe.validation as validation
from envgym.cli import app
from envgym.envs.swe.instance import read_instances
from envgym.synth_agents.swe.pipeline import SweSynthConfig, SweSynthesis

pytestmark = [pytest.mark.heavy]


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after the raise runs (BaseException: no handler catches it)."""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    from envgym.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap unavailable")
    root = tmp_path_factory.mktemp("swe-synth")
    with private_cache(root / "cache"):
        yield root / "calc", make_synth_history(root / "calc")


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids validate_instance is called with (the pipeline imports it at call time)."""
    calls: list[str] = []
    real = validation.validate_instance

    def spy(instance: Any, **kwargs: Any) -> Any:
        calls.append(instance.instance_id)
        return real(instance, **kwargs)

    monkeypatch.setattr(validation, "validate_instance", spy)
    return calls


@pytest.mark.timeout(300)
def test_synth_mines_validates_and_resumes_after_a_kill(repo: tuple[Path, dict[str, str]], tmp_path: Path,
                                                        counted: list[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    path, shas = repo
    out = tmp_path / "out"
    config = SweSynthConfig(repo=str(path))
    spy = validation.validate_instance

    def dies_on_second(instance: Any, **kwargs: Any) -> Any:
        if len(counted) == 1:
            raise Killed
        return spy(instance, **kwargs)

    monkeypatch.setattr(validation, "validate_instance", dies_on_second)
    with pytest.raises(Killed):
        SweSynthesis(out, config).run()
    first = list(counted)
    assert (
        len(first) == 1 and len(read_instances(out / "instances.jsonl")) <= 1
    )  # outputs kept up to date
    monkeypatch.setattr(validation, "validate_instance", spy)
    payload = SweSynthesis(out, config).run()
    assert not set(first) & set(counted[1:]), "a validated candidate was validated again"
    assert (
        len(counted) == 1 + payload["candidates"] - 1
    )  # each candidate validated exactly once overall
    accepted = read_instances(out / "instances.jsonl")
    ids = {i.metadata["commit"]: i for i in accepted}
    assert {shas["bugfix"], shas["merge"], shas["square"]} <= set(ids) and shas["exact"] not in ids
    bugfix = ids[shas["bugfix"]]
    assert bugfix.fail_to_pass == ("tests/test_add.py::test_add",) and bugfix.version.startswith(
        "deps-"
    )
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    by_commit = {r.get("commit"): r for r in rejected}
    assert (
        by_commit[shas["huge"]]["category"] == "too large"
        and by_commit[shas["vague"]]["stage"] == "mine"
    )
    assert by_commit[shas["binary"]]["category"] == "binary changes"
    exact = next(r for r in rejected if r["stage"] == "validate")
    assert (
        exact["instance_id"].endswith(shas["exact"][:10])
        and exact["category"] == "no FAIL_TO_PASS test"
    )
    assert payload["rejected_validation"] == {"no FAIL_TO_PASS test": 1} and payload[
        "accepted"
    ] == len(accepted)
    assert (
        payload["rejected_heuristic"]["description too short"] == 2
        and payload["setup_failures"] == {}
    )

    # The CLI on the finished run: nothing is validated again; --json is one object.
    counted.clear()
    done = CliRunner().invoke(
        app, ["synth", "swe", "--repo", str(path), "--out", str(out), "--json"]
    )
    assert done.exit_code == 0, done.output
    assert (
        json.loads(done.stdout.strip().splitlines()[-1])["accepted"] == len(accepted)
        and counted == []
    )
    # Other settings into the same --out: refused, with the reason.
    refused = CliRunner().invoke(
        app, ["synth", "swe", "--repo", str(path), "--out", str(out), "--repeats", "3"]
    )
    assert refused.exit_code == 2 and "other settings" in refused.output
    with pytest.raises(ValueError, match="other settings"):
        SweSynthesis(out, SweSynthConfig(repo=str(path), sandbox="docker"))


@pytest.mark.timeout(120)
def test_judge_rejections_are_named_and_not_validated(repo: tuple[Path, dict[str, str]], tmp_path: Path,
                                                      counted: list[str]) -> None:  # fmt: skip
    path, _ = repo
    asked: list[str] = []

    def judge(candidate: Any) -> tuple[bool, str]:
        asked.append(candidate.instance_id)
        return False, "the statement names no observable behaviour"

    config = SweSynthConfig(
        repo=str(path), max_candidates=2, judge_model="http://judge.invalid/v1#m"
    )
    payload = SweSynthesis(tmp_path, config, judge=judge).run()
    assert payload["rejected_judge"] == {"judge": 2} and payload["accepted"] == 0 and counted == []
    SweSynthesis(tmp_path, config, judge=judge).run()  # resumed: the judge is not asked again
    assert len(asked) == 2
    rows = [json.loads(line) for line in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in rows if r["stage"] == "judge"] == [
        "judge: the statement names no observable behaviour"
    ] * 2


@pytest.mark.timeout(60)
def test_bad_options_are_refused(tmp_path: Path) -> None:
    runner = CliRunner()
    for args, message in ((["synth", "swe", "--out", str(tmp_path)], "needs --repo"),
                          (["synth", "swe", "--repo", str(tmp_path), "--sandbox", "inprocess"], "bwrap' or 'docker"),
                          (["synth", "swe", "--repo", str(tmp_path), "--judge-model", "http://x/v1"], "URL#model"),
                          (["synth", "trip planning", "--n", "1"], "--out is required")):  # fmt: skip
        done = runner.invoke(app, args)
        assert done.exit_code == 2 and message in done.output, (args, done.output)
