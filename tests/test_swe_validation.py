"""Environment setup and F2P / P2F validation on fixture git repositories built by the tests.

One pyproject repository ("calc") is set up once per session and shared by every instance
test (they differ only in their patches); its environment lives in a session cache folder.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from swe_fixtures import private_cache
from swe_repos import diff_of, make_repo

from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.setup_agent import SetupResult, ensure_env
from envgym.envs.swe.validation import run_tests, validate_instance

pytestmark = [pytest.mark.heavy]

CALC_FILES = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "calc"
        version = "0.1"
        [project.optional-dependencies]
        test = ["pytest"]
        [tool.setuptools.packages.find]
        where = ["src"]
    """,
    "src/calc/__init__.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    "tests/test_calc.py": "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n\n\n"
    "def test_mul_zero():\n    assert mul(0, 5) == 0\n",
}


@pytest.fixture(scope="session")
def swe_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with private_cache(tmp_path_factory.mktemp("envgym-cache")) as cache:
        yield cache


@pytest.fixture(scope="session")
def calc(
    tmp_path_factory: pytest.TempPathFactory, swe_cache: Path
) -> tuple[Path, str, SetupResult]:
    """The calc repository and its environment, built by two racing callers (one must build)."""
    repo, sha = make_repo(tmp_path_factory.mktemp("calc") / "calc", CALC_FILES)
    results: list[SetupResult] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(ensure_env(repo, repo_key=str(repo), version="1"))
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.ok for r in results), [r.reason for r in results]
    assert sorted(r.cached for r in results) == [False, True]  # built once, the other waited
    return repo, sha, next(r for r in results if not r.cached)


def _instance(
    calc: tuple[Path, str, SetupResult], name: str, test_patch: str, patch: str, **extra: object
) -> SweInstance:
    repo, sha, _ = calc
    return SweInstance(
        instance_id=f"calc__calc-{name}",
        repo=str(repo),
        base_commit=sha,
        problem_statement="add subtracts",
        patch=patch,
        test_patch=test_patch,
        version="1",
        **extra,
    )  # type: ignore[arg-type]


TEST_ADD = {
    "tests/test_add.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
}
FIX = {
    "src/calc/__init__.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
}


@pytest.mark.timeout(240)
def test_setup_records_steps_and_tests_run(
    calc: tuple[Path, str, SetupResult], tmp_path: Path
) -> None:
    source, _, setup = calc
    # A copy: the jail hands the tree it writes to its own uid, and the source must stay root's.
    repo = Path(shutil.copytree(source, tmp_path / "ws", symlinks=True))
    assert [s.name for s in setup.log] == ["venv", "install 1/2", "install 2/2", "smoke test"]
    assert (
        setup.env is not None
        and setup.env.venv.is_dir()
        and setup.recipe.install[0] == "python -m pip install -e '.[test]'"
    )
    run = run_tests(repo, setup.env)
    assert run.status == "ok" and dict(run.outcomes) == {
        "tests/test_calc.py::test_mul": "passed",
        "tests/test_calc.py::test_mul_zero": "passed",
    }
    assert not list(repo.rglob("__pycache__")) and not (repo / ".pytest_cache").exists()


@pytest.mark.timeout(240)
def test_gold_patch_that_fixes_the_failing_test_is_accepted(
    calc: tuple[Path, str, SetupResult],
) -> None:
    repo = calc[0]
    report = validate_instance(_instance(calc, "1", diff_of(repo, TEST_ADD), diff_of(repo, FIX)))
    assert report.accepted, report.reason
    assert report.fail_to_pass == ("tests/test_add.py::test_add",)
    assert report.pass_to_pass == (
        "tests/test_calc.py::test_mul",
        "tests/test_calc.py::test_mul_zero",
    )
    assert report.pass_to_fail == () and report.flaky == ()
    assert (
        report.instance.fail_to_pass == ("tests/test_add.py::test_add",)
        and report.setup
        and report.setup.cached
    )
    # base runs: the new test fails; gold runs: it passes
    assert [r.outcomes["tests/test_add.py::test_add"] for r in report.runs] == [
        "failed",
        "failed",
        "passed",
        "passed",
    ]


@pytest.mark.timeout(240)
def test_given_fail_to_pass_that_does_not_flip_is_named(
    calc: tuple[Path, str, SetupResult],
) -> None:
    repo = calc[0]
    report = validate_instance(
        _instance(
            calc,
            "2",
            diff_of(repo, TEST_ADD),
            diff_of(repo, FIX),
            fail_to_pass=("tests/test_calc.py::test_mul",),
        ),
        repeats=1,
    )
    assert not report.accepted and report.status == "rejected"
    assert "FAIL_TO_PASS test tests/test_calc.py::test_mul does not flip" in report.reason


@pytest.mark.timeout(240)
def test_gold_patch_that_breaks_another_test_is_rejected(
    calc: tuple[Path, str, SetupResult],
) -> None:
    repo = calc[0]
    breaking = {
        "src/calc/__init__.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return 0 if a == 2 else a * b\n"
    }
    report = validate_instance(
        _instance(calc, "3", diff_of(repo, TEST_ADD), diff_of(repo, breaking)), repeats=1
    )
    assert not report.accepted and report.status == "rejected"
    assert report.pass_to_fail == ("tests/test_calc.py::test_mul",)
    assert "PASS_TO_FAIL: tests/test_calc.py::test_mul" in report.reason
    assert report.fail_to_pass == ("tests/test_add.py::test_add",)


@pytest.mark.timeout(240)
def test_a_test_that_alternates_is_flaky_and_excluded(calc: tuple[Path, str, SetupResult]) -> None:
    repo = calc[0]
    flaky = {
        "tests/test_flaky.py": """
        from pathlib import Path

        def test_coin():
            # passes on every other run: a deterministic stand-in for a random test
            counter = Path(__file__).with_name("count.txt")
            n = int(counter.read_text()) if counter.exists() else 0
            counter.write_text(str(n + 1))
            assert n % 2 == 0
    """,
        **TEST_ADD,
    }
    report = validate_instance(_instance(calc, "4", diff_of(repo, flaky), diff_of(repo, FIX)))
    assert report.accepted, report.reason
    assert report.flaky == ("tests/test_flaky.py::test_coin",)
    assert (
        "tests/test_flaky.py::test_coin"
        not in report.fail_to_pass + report.pass_to_pass + report.pass_to_fail
    )
    assert report.fail_to_pass == ("tests/test_add.py::test_add",)


@pytest.mark.timeout(240)
def test_patch_that_does_not_apply_is_patch_failed(calc: tuple[Path, str, SetupResult]) -> None:
    repo = calc[0]
    bad = diff_of(repo, FIX).replace("return a - b", "return a ** b")
    report = validate_instance(_instance(calc, "5", diff_of(repo, TEST_ADD), bad), repeats=1)
    assert not report.accepted and report.status == "patch_failed"
    assert report.runs[-1].status == "patch_failed" and "gold patch does not apply" in report.reason


@pytest.mark.timeout(240)
def test_a_hanging_suite_times_out_and_leaves_nothing_running(
    calc: tuple[Path, str, SetupResult],
) -> None:
    repo = calc[0]
    hang = {
        "tests/test_hang.py": """
        import subprocess, time

        def test_hang():
            subprocess.Popen(["sleep", "987654"])
            time.sleep(600)
    """
    }
    started = time.monotonic()
    report = validate_instance(
        _instance(calc, "6", diff_of(repo, hang), diff_of(repo, FIX)), timeout_s=8
    )
    assert time.monotonic() - started < 60
    assert not report.accepted and report.status == "invalid_run"
    assert report.runs[0].status == "timeout" and "base run 1: timeout" in report.reason
    assert dict(report.runs[0].outcomes) == {}
    leftovers = [
        p
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _cmdline(p).startswith("sleep\x00987654")
    ]
    assert leftovers == []


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_text()
    except OSError:
        return ""


@pytest.mark.timeout(240)
def test_scope_touched_runs_only_the_test_patch_files(calc: tuple[Path, str, SetupResult]) -> None:
    repo = calc[0]
    report = validate_instance(
        _instance(calc, "7", diff_of(repo, TEST_ADD), diff_of(repo, FIX)),
        repeats=1,
        scope="touched",
    )
    assert report.accepted, report.reason
    assert report.fail_to_pass == ("tests/test_add.py::test_add",) and report.pass_to_pass == ()
    assert [set(r.outcomes) for r in report.runs] == [{"tests/test_add.py::test_add"}] * 2


@pytest.mark.timeout(240)
def test_an_empty_test_patch_applies_as_nothing_but_an_empty_gold_patch_is_refused(
    calc: tuple[Path, str, SetupResult],
) -> None:
    repo = calc[
        0
    ]  # synthesized bugs (smith) carry no test patch: their deciding tests exist already
    report = validate_instance(_instance(calc, "8", "", diff_of(repo, FIX)), repeats=1)
    assert report.status == "rejected" and "no FAIL_TO_PASS" in report.reason  # ran both sides
    assert [r.status for r in report.runs] == ["ok", "ok"]
    empty_gold = validate_instance(_instance(calc, "9", diff_of(repo, TEST_ADD), ""), repeats=1)
    assert empty_gold.status == "patch_failed" and "gold patch does not apply" in empty_gold.reason
