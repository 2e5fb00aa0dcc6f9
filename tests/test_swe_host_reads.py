"""The host never reads a jail-written or input-written path the ordinary way (it runs as root).

The JUnit report is opened with O_NOFOLLOW and capped before it is parsed (streaming); a gold
patch that creates a link is replayed as a link, never by reading what it points at.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swe_grading_fixtures import make_instance, make_python_env

from envgym.agents import ScriptedAgent, run_episode
from envgym.envs.swe.env import SweEnv
from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.junit import JunitError, parse_junit_chunks
from envgym.envs.swe.pyenv import PythonEnv
from envgym.envs.swe.validation import MAX_REPORT_BYTES, REPORT, judge
from envgym.sandbox.command_jail import CommandResult

SECRET = "HOST_ONLY_7f3a9c"
FIX = ("str_replace", {"path": "calc/ops.py", "old": "(len(xs) + 1)", "new": "len(xs)"})
SUBMIT = ("submit", {})


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root-only host file that reads as a valid JUnit report naming the secret."""
    path = tmp_path_factory.mktemp("host") / "secret.xml"
    path.write_text(f'<testsuites><testsuite name="x"><testcase classname="tests.test_ops" name="{SECRET}"/>'
                    "</testsuite></testsuites>")  # fmt: skip
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def python_env(tmp_path_factory: pytest.TempPathFactory) -> PythonEnv:
    return make_python_env(tmp_path_factory.mktemp("reads-venv"))


def _env(instance: SweInstance, python_env: PythonEnv) -> SweEnv:
    from envgym.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap unavailable")
    return SweEnv(instance, python_env=python_env, max_turns=20)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, python_env: PythonEnv) -> Iterator[SweEnv]:
    made = _env(make_instance(tmp_path_factory.mktemp("reads")), python_env)
    yield made
    made.close()


def _result(code: int = 0) -> CommandResult:
    return CommandResult(argv=("pytest",), returncode=code, stdout="", stderr="", timed_out=False, duration_s=0.1,
                         truncated=False)  # fmt: skip


def _history(env: SweEnv) -> str:
    return json.dumps(env.history) + json.dumps(env.grade_result.report if env.grade_result else {})


# -- the JUnit report ------------------------------------------------------------------------------
def test_a_report_swapped_for_a_link_is_never_read(tmp_path: Path, secret_file: Path) -> None:
    (tmp_path / REPORT).symlink_to(secret_file)
    run = judge(_result(), tmp_path, tmp_path)
    assert run.status == "crashed" and run.outcomes == {} and "not a regular file" in run.detail
    assert SECRET not in run.detail
    (tmp_path / REPORT).unlink()
    os.mkfifo(tmp_path / REPORT)  # a FIFO would block an ordinary open
    assert judge(_result(), tmp_path, tmp_path).status == "crashed"


def test_an_oversize_report_is_not_read_and_counts_as_failed(tmp_path: Path) -> None:
    with open(tmp_path / REPORT, "wb") as report:  # sparse: costs no disk
        report.write(b'<testsuites><testsuite><testcase classname="t" name="test_x"/>')
        report.truncate(MAX_REPORT_BYTES + 1)
    run = judge(_result(), tmp_path, tmp_path)
    assert run.status == "report_too_large" and run.outcomes == {}
    assert (
        f"over the {MAX_REPORT_BYTES}-byte limit" in run.detail and "counts as failed" in run.detail
    )


def test_the_parser_streams_and_still_refuses_a_doctype_in_a_later_chunk() -> None:
    head = b'<testsuites><testsuite name="s">'
    cases = [f'<testcase classname="t" name="test_{i}"><failure message="m">{"x" * 50}</failure></testcase>'.encode()
             for i in range(2000)]  # fmt: skip
    data = head + b"".join(cases) + b"</testsuite></testsuites>"
    chunks = [
        data[i : i + 777] for i in range(0, len(data), 777)
    ]  # boundaries inside tags and text
    outcomes = parse_junit_chunks(chunks)
    assert len(outcomes) == 2000 and set(outcomes.values()) == {"failed"}
    with pytest.raises(JunitError, match="DOCTYPE"):
        parse_junit_chunks(
            [b'<?xml version="1.0"?>\n<!DOCTY', b'PE x [<!ENTITY a "b">]><testsuites/>']
        )
    with pytest.raises(JunitError, match="truncated"):
        parse_junit_chunks(chunks[:-3])


_SWAP_REPORT = """
import os


def pytest_unconfigure(config):
    path = "/junit/report.xml"
    os.remove(path)
    os.symlink({target!r}, path)
"""

_HUGE_REPORT = """
import os


def pytest_unconfigure(config):
    with open("/junit/report.xml", "r+b") as report:
        report.truncate({size})
"""


@pytest.mark.timeout(300)
def test_the_agents_run_tests_never_shows_a_host_file_through_a_swapped_report(
    env: SweEnv, secret_file: Path
) -> None:
    env.reset()
    conftest = _SWAP_REPORT.format(target=str(secret_file))
    run_episode(env, ScriptedAgent([("create", {"path": "conftest.py", "content": conftest}),
                                    ("run_tests", {"paths_or_ids": ["tests/test_ops.py"]}), SUBMIT]))  # fmt: skip
    replies = [m["content"] for m in env.history if m["role"] == "tool"]
    assert "status: crashed" in replies[1] and "not a regular file" in replies[1], replies[1]
    assert SECRET not in _history(env)


@pytest.mark.timeout(300)
def test_an_oversize_report_is_named_to_the_agent_and_grades_as_failed(env: SweEnv) -> None:
    env.reset()
    huge = _HUGE_REPORT.format(size=MAX_REPORT_BYTES + 10)
    rig = "\nimport atexit, os\n\n\ndef _grow():\n    if os.path.exists('/junit/report.xml'):\n" \
          f"        with open('/junit/report.xml', 'r+b') as f:\n            f.truncate({MAX_REPORT_BYTES + 10})\n\n\n" \
          "atexit.register(_grow)\n"  # fmt: skip
    result = run_episode(env, ScriptedAgent([("create", {"path": "conftest.py", "content": huge}),
                                             ("run_tests", {"paths_or_ids": ["tests/test_ops.py"]}), FIX,
                                             ("bash", {"command": f"cat >> calc/ops.py <<'EOF'\n{rig}EOF"}), SUBMIT]))  # fmt: skip
    replies = [m["content"] for m in env.history if m["role"] == "tool"]
    assert "status: report_too_large" in replies[1] and "counts as failed" in replies[1], replies[1]
    assert env.grade_result is not None
    assert result.reward == 0.0 and env.grade_result.report["tests_status"] == "report_too_large"


# -- the gold replay -------------------------------------------------------------------------------
def _link_section(path: str, target: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 120000\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    )


@pytest.mark.timeout(300)
def test_a_gold_link_to_a_host_file_is_replayed_as_a_link(tmp_path: Path, python_env: PythonEnv,
                                                          secret_file: Path) -> None:  # fmt: skip
    instance = make_instance(tmp_path, extra_gold=_link_section("notes.txt", str(secret_file)))
    env = _env(instance, python_env)
    try:
        env.reset()
        calls = env.gold_calls()
        assert SECRET not in json.dumps(calls)
        link: Any = next(args["command"] for name, args in calls if name == "bash")
        assert "ln -sfn" in link and str(secret_file) in link
        result = run_episode(env, ScriptedAgent(calls))
        assert result.reward == 1.0, env.grade_result.report if env.grade_result else None
        assert SECRET not in _history(env)
    finally:
        env.close()


# -- recipe detection reads the repository, which is input --------------------------------------
def test_recipe_detection_does_not_read_through_links(tmp_path: Path) -> None:
    from envgym.envs.swe.recipe import detect_recipe

    host = tmp_path / "host.ini"
    host.write_text(f"[testenv]\ndeps = {SECRET.lower()}\n[pytest]\naddopts = --{SECRET}\n")
    host.chmod(0o600)
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (repo / "tox.ini").symlink_to(host)
    (repo / "pytest.ini").symlink_to(host)
    recipe = detect_recipe(repo)
    assert SECRET.lower() not in json.dumps(recipe.to_json()).lower()
