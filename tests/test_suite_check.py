"""``envgym check SUITE``: a seeded sample of a suite's bundles through the full check, extra
baselines per level, verifier mutation per bundle, rule coverage counted against the tasks'
conditions, and a tampered bundle named as a failure.

One small real suite (two spec categories, one bundle of two tasks each, bwrap) is built once
per module; the figures of the 1,000-bundle suite are in docs/SUITES.md.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envgym.check import CheckReport, TaskCheck
from envgym.cli import app
from envgym.suite_check import BundleResult, sample_bundles, spec_rules
from envgym.suite_manifest import load_suite
from envgym.synth_agents.suite import SuiteConfig, build_suite

pytestmark = pytest.mark.timeout(600)
runner = CliRunner()


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from envgym.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap unavailable")
    out = tmp_path_factory.mktemp("suite") / "s"
    config = SuiteConfig(
        categories=("library loans", "airline seats"), per_category=1, tasks_per_bundle=2
    )
    build_suite(config, out, store=None)
    return out


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["check", *args])
    return result.exit_code, result.output


def test_sample_of_a_real_suite_passes_with_every_figure(suite_dir: Path) -> None:
    code, out = _invoke(str(suite_dir), "--sample", "2", "--baseline", "shallow_spec", "--json")
    assert code == 0, out
    report = json.loads(out.strip().splitlines()[-1])
    assert (report["sampled"], report["bundles_passed"], report["tasks_passed"]) == (2, 2, 4)
    assert report["exploits"]["accepted"] == 0 and report["exploits"]["tried"] > 0
    rules = report["spec_rule_coverage"]
    assert rules["rules"] == rules["covered"] >= 2 * 2 * 3  # valid_json, exists, objective each
    for name in ("task_baseline", "shallow_spec"):
        assert sum(v["tasks"] for v in report["baselines"][name].values()) == 4
    # the shallow solver (best row by the objective among the rows meeting the task's own
    # attribute conditions) solves every level-1 task: the compiler's levels 1-2 need no more
    assert report["baselines"]["shallow_spec"]["1"]["share"] == 1.0


def test_mutation_runs_per_sampled_bundle(suite_dir: Path) -> None:
    code, out = _invoke(
        str(suite_dir), "--sample", "1", "--seed", "2", "--mutation", "--max-mutants", "4",
        "--json",
    )  # fmt: skip
    assert code == 0, out
    m = json.loads(out.strip().splitlines()[-1])["mutation"]
    assert (m["bundles"], m["mutants"], m["paying_survivors"]) == (1, 4, 0)
    assert m["killed"] == m["behaviour_changing"]


def test_a_tampered_bundle_is_a_named_failure(suite_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "s"
    shutil.copytree(suite_dir, copy)
    bundle = copy / load_suite(copy).bundles[0].path
    verifier = bundle / "verifier.py"
    verifier.write_text(verifier.read_text() + "\n# changed after the suite listed it\n")
    code, out = _invoke(str(copy), "--json")
    assert code == 1
    report = json.loads(out.strip().splitlines()[-1])
    assert report["bundles_passed"] == 1
    [failure] = report["failures"]
    assert failure["path"] == load_suite(copy).bundles[0].path
    assert "does not load" in failure["why"] and "content hash" in failure["why"]


def test_sample_options_are_refused_on_a_single_bundle(suite_dir: Path) -> None:
    bundle = suite_dir / load_suite(suite_dir).bundles[0].path
    code, out = _invoke(str(bundle), "--sample", "3")
    assert code == 2 and "are for a suite" in out
    code, out = _invoke(str(suite_dir), "--sample", "-1")
    assert code == 2 and "--sample must be 0 (all) or more" in out


def test_sampling_is_seeded_and_bounded(suite_dir: Path) -> None:
    suite = load_suite(suite_dir)
    assert sample_bundles(suite, 0, 0) == list(suite.bundles)
    assert sample_bundles(suite, 5, 0) == list(suite.bundles)
    one = [sample_bundles(suite, 1, seed)[0].path for seed in range(8)]
    assert one == [sample_bundles(suite, 1, seed)[0].path for seed in range(8)]
    assert len(set(one)) == 2  # eight seeds reach both bundles


def test_spec_rules_come_from_the_conditions() -> None:
    meta = {
        "target": "book",
        "constraints": [{"rule": "min_pages"}, {"rule": "author_country"}],
        "objective": {"rule": "best_year"},
        "report": {"rule": "pages_correct"},
        "action": None,
        "declared_rules": ["valid_json"],  # what the compiler wrote is not what is counted
    }
    assert spec_rules(meta) == [
        "valid_json", "book_exists", "min_pages", "author_country", "best_year", "pages_correct",
    ]  # fmt: skip
    assert spec_rules({"declared_rules": ["x"]}) == []  # not a compiled spec task
    assert spec_rules({"constraints": "min_pages"}) == []


def test_a_rule_without_a_witness_fails_the_bundle() -> None:
    task = TaskCheck("t", 1, True, True, 20, 20, True, 3, rules_covered=("valid_json",))
    report = CheckReport("b", "sha256:x", (task,))
    ok = BundleResult("p", "c", check=report, spec_rules=1, spec_rules_covered=1)
    short = BundleResult("p", "c", check=report, spec_rules=2, spec_rules_covered=1)
    assert ok.passed == report.passed and not short.passed
