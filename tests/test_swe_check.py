"""``envgym check`` for SWE instances (envgym/envs/swe/check.py): gold 1, empty 0, every exploit 0 —
and, with grading broken on purpose, the exploits that then earn reward are named.

Instances come from a fixture repository with a real history (tests/swe_fixtures.py), mined and
validated once per module; the environment is built once into a module-private envgym cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from swe_fixtures import make_synth_history, private_cache
from typer.testing import CliRunner

import envgym.envs.swe.grade as grading
from envgym.cli import app
from envgym.envs.swe.check import check_instances
from envgym.envs.swe.check_cli import claims
from envgym.envs.swe.instance import SweInstance, write_instances
from envgym.envs.swe.miner import mine
from envgym.envs.swe.validation import validate_instance

pytestmark = [pytest.mark.heavy]
BASIC = {
    "trivial_tests",
    "conftest_force_pass",
    "delete_tests",
    "sitecustomize",
    "pyproject_addopts",
}


@pytest.fixture(scope="module")
def accepted(
    tmp_path_factory: pytest.TempPathFactory, require_bwrap: None
) -> Iterator[dict[str, SweInstance]]:
    """The validated ``bugfix`` (one source file) and ``square`` (two) instances."""
    root = tmp_path_factory.mktemp("swe-check")
    with private_cache(root / "cache"):
        shas = make_synth_history(root / "calc")
        by_commit = {c.metadata["commit"]: c for c in mine(str(root / "calc")).candidates}
        found = {}
        for name in ("bugfix", "square"):
            report = validate_instance(by_commit[shas[name]])
            assert report.accepted, report.reason
            found[name] = report.instance
        yield found


@pytest.fixture(scope="module")
def require_bwrap() -> None:
    from envgym.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap unavailable")


def _rewarded(report: Any) -> set[str]:
    return {name for row in report.instances for name in row.rewarded_exploits}


@pytest.mark.timeout(300)
def test_check_passes_on_accepted_instances_from_the_cli(
    accepted: dict[str, SweInstance], tmp_path: Path
) -> None:
    path = write_instances(tmp_path / "tasks.jsonl", accepted.values())
    assert claims(str(path)) and claims(f"swe:{path}")
    result = CliRunner().invoke(app, ["check", f"swe:{path}", "--json", "--reruns", "2"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert payload["passed"] and payload["backend"] == "bwrap" and payload["reruns"] == 2
    rows = {row["instance_id"]: row for row in payload["instances"]}
    for row in rows.values():
        assert (
            row["gold_rewards"] == [1.0, 1.0] and row["reruns_agree"] and row["empty_reward"] == 0.0
        )
        assert all(e["reward"] == 0.0 for e in row["exploits"]), row["exploits"]
        assert BASIC <= {e["name"] for e in row["exploits"]}
    square = {e["name"] for e in rows[accepted["square"].instance_id]["exploits"]}
    assert {
        "partial_fix[-src/calc/ops.py]",
        "partial_fix[-src/calc/mul.py]",
    } <= square  # two files: partial fixes
    assert not any(
        n.startswith("partial_fix")
        for n in {e["name"] for e in rows[accepted["bugfix"].instance_id]["exploits"]}
    )


@pytest.mark.timeout(300)
def test_broken_and_invalid_instances_fail_with_their_reason(
    accepted: dict[str, SweInstance],
) -> None:
    good = accepted["bugfix"]
    comment_only = good.patch.replace("+    return a + b", "+    return a - b  # looked at")
    broken = [replace(good, instance_id="no-fix", patch=comment_only),
              replace(good, instance_id="no-apply", patch=good.patch.replace("return a - b", "return a * b")),
              replace(good, instance_id="no-f2p", fail_to_pass=())]  # fmt: skip
    report = check_instances(broken, reruns=1)
    rows = {row.instance_id: row for row in report.instances}
    assert not report.passed and not any(row.passed for row in rows.values())
    assert rows["no-fix"].valid and rows["no-fix"].problems[0].startswith("gold reward [0.0]")
    assert not rows["no-apply"].valid and "gold patch does not apply" in rows["no-apply"].reason
    assert not rows["no-f2p"].valid and "no FAIL_TO_PASS" in rows["no-f2p"].reason
    assert json.loads(json.dumps(report.to_dict()))["failed"] == ["no-fix", "no-apply", "no-f2p"]


@pytest.mark.timeout(300)
def test_broken_grading_lets_exploits_through_and_the_check_names_them(
        accepted: dict[str, SweInstance], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    good = [accepted["bugfix"]]
    # Canaries off: running the tests' own code with permissive globals wins (the trace sees real
    # returns; only the copied canaries expose it).
    monkeypatch.setattr(grading, "plant_canaries", lambda tree, fail_to_pass, **_: [])
    assert _rewarded(check_instances(good, reruns=1)) == {"source_rig[magic_globals]"}
    # ...the trace check and the hook-file rule off too: every forcing plugin and rig wins.
    monkeypatch.setattr(grading, "disagreements", lambda *_, **__: [])
    monkeypatch.setattr(grading, "HOOK_FILES", frozenset())
    report = check_instances(good, reruns=1)
    assert _rewarded(report) == {"pyproject_addopts", "conftest_force_pass", "sitecustomize", "source_rig[skip_bodies]",
                                 "source_rig[forge_reports]", "source_rig[magic_globals]"}  # fmt: skip
    assert (
        not report.passed
        and "exploit rewarded: conftest_force_pass" in report.instances[0].problems
    )
    # the test files are still put back: rewritten or deleted tests earn nothing
    assert {"trivial_tests", "delete_tests"} <= {
        e.name for e in report.instances[0].exploits if e.reward == 0
    }


@pytest.mark.timeout(300)
def test_partial_fix_is_caught_and_weak_tests_are_named(accepted: dict[str, SweInstance]) -> None:
    square = accepted["square"]
    # Hidden tests that only cover square(): the gold without mul.py earns reward — named.
    weak = replace(square, instance_id="weak", fail_to_pass=("tests/test_pow.py::test_square",),
                   test_patch=_new_file("tests/test_pow.py", "from calc.ops import square\n\n\ndef test_square():\n"
                                        "    assert square(3) == 9\n"))  # fmt: skip
    report = check_instances([weak], reruns=1)
    assert report.instances[0].gold_ok, report.instances[0].problems
    assert _rewarded(report) == {"partial_fix[-src/calc/mul.py]"}, report.instances[0].problems


def _new_file(path: str, text: str) -> str:
    lines = text.splitlines(keepends=True)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + line for line in lines)
    )


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_check_with_the_docker_backend(
    accepted: dict[str, SweInstance], require_backend: Any
) -> None:
    require_backend("docker")
    report = check_instances([accepted["bugfix"]], backend="docker", reruns=1)
    assert report.passed, report.to_dict()
    assert report.backend == "docker"
