"""``envgym swe export|import`` round trips and which targets ``envgym check`` sends to the SWE check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swe_history import make_history
from typer.testing import CliRunner

from envgym.cli import app
from envgym.envs.swe.check_cli import claims
from envgym.envs.swe.instance import write_instances
from envgym.envs.swe.miner import mine

runner = CliRunner()


@pytest.fixture(scope="module")
def instances_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("swe-cli")
    make_history(root / "calc")
    candidates = mine(str(root / "calc")).candidates
    assert len(candidates) == 2
    return write_instances(root / "instances.jsonl", candidates)


@pytest.mark.timeout(60)
def test_harbor_round_trip_is_byte_exact(
    instances_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --out (git archive runs elsewhere)
    done = runner.invoke(
        app,
        ["swe", "export", "--format", "harbor", str(instances_file), "--out", "tasks", "--json"],
    )
    assert done.exit_code == 0, done.output
    written = json.loads(done.stdout)["written"]
    assert len(written) == 2 and all(
        (Path(w) / "environment" / "repo.tar").is_file() for w in written
    )
    again = runner.invoke(app, ["swe", "export", str(instances_file), "--out", "tasks"])
    assert again.exit_code == 2 and "exists" in again.output  # never silently overwritten
    back = runner.invoke(app, ["swe", "import", "tasks", "--out", "back.jsonl"])
    assert back.exit_code == 0 and "imported 2 instances" in back.output
    assert (tmp_path / "back.jsonl").read_bytes() == instances_file.read_bytes()
    one = runner.invoke(app, ["swe", "import", written[0], "--out", "one.jsonl", "--json"])
    assert json.loads(one.stdout)["instances"] == 1
    assert claims("tasks") and claims(written[0])  # our Harbor export: the SWE check's target


@pytest.mark.timeout(60)
def test_swebench_export_and_import_errors(instances_file: Path, tmp_path: Path) -> None:
    done = runner.invoke(
        app, ["swe", "export", "--format", "swebench", str(instances_file), "--out", str(tmp_path)]
    )
    assert done.exit_code == 0, done.output
    assert (tmp_path / "instances.jsonl").read_bytes() == instances_file.read_bytes()
    cases = ((["swe", "export", "--format", "zip", str(instances_file), "--out", str(tmp_path)], "--format"),
             (["swe", "import", str(instances_file), str(instances_file), "--out", str(tmp_path / "x.jsonl")], "duplicate"),
             (["swe", "import", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "x.jsonl")], "no such file"),
             (["swe", "import", str(tmp_path), "--out", str(tmp_path / "x.jsonl")], "no task directory"))  # fmt: skip
    for args, message in cases:
        failed = runner.invoke(app, args)
        assert failed.exit_code == 2 and message in failed.output, (args, failed.output)


@pytest.mark.timeout(60)
def test_which_targets_the_swe_check_claims(instances_file: Path, tmp_path: Path) -> None:
    assert claims(str(instances_file)) and claims("swe:anything")
    other = tmp_path / "other.jsonl"
    other.write_text('{"id": "t", "prompt": "p"}\n')
    (tmp_path / "bad.jsonl").write_text("not json\n")
    assert (
        not claims(str(other))
        and not claims(str(tmp_path / "bad.jsonl"))
        and not claims(str(tmp_path))
    )
    assert not claims("tau2/mock") and not claims("swe-v0")
    bundle = tmp_path / "bundle"
    (bundle / "t" / "tests").mkdir(parents=True)
    (bundle / "manifest.json").write_text("{}")
    (bundle / "t" / "task.toml").write_text("")
    (bundle / "t" / "tests" / "config.json").write_text("{}")
    assert not claims(str(bundle))  # a bundle is never a SWE target
