"""SWE-smith-style synthesis (envgym/envs/swe/smith.py): mutations, kept only when a passing test
breaks, validated, replayable in swe-v0; and ``envgym bench swe --quick``.

The fixture repository "stats" has well-tested functions (``mean``, ``clamp``) and a weakly
tested one (``is_positive``, only ever called with 5: a boundary mutation breaks nothing).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swe_fixtures import private_cache
from swe_repos import make_repo

from envgym.agents import ScriptedAgent, run_episode
from envgym.envs.swe.env import SweEnv
from envgym.envs.swe.mutations import KINDS, FunctionSite, functions, mutations
from envgym.envs.swe.repo import apply_patch, checkout, git
from envgym.envs.swe.setup_agent import ensure_env
from envgym.envs.swe.smith import SmithResult, smith, try_mutation
from envgym.envs.swe.smith_statement import FailedTest, template_statement, write_statement
from envgym.envs.swe.validation import packaging_version, run_tests

STATS = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "stats"
        version = "0.1"
        [tool.setuptools.packages.find]
        where = ["src"]
    """,
    "src/stats/__init__.py": "def mean(xs):\n    return sum(xs) / len(xs)\n\n\n"
    "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n\n\n"
    "def is_positive(x):\n    return x > 0\n",
    "tests/test_stats.py": "from stats import clamp, is_positive, mean\n\n\n"
    "def test_mean():\n    assert mean([1, 2, 3]) == 2\n\n\n"
    "def test_clamp_low():\n    assert clamp(-1, 0, 5) == 0\n\n\n"
    "def test_clamp_high():\n    assert clamp(9, 0, 5) == 5\n\n\n"
    "def test_clamp_mid():\n    assert clamp(3, 0, 5) == 3\n\n\n"
    "def test_is_positive():\n    assert is_positive(5)\n",
}

SAMPLE = '''class A:
    @staticmethod
    def f(x, ys):
        """doc 1"""
        if x < 3 and not ys:  # héllo
            return x + 1
        return [y * 2 for y in range(len(ys))]

    def g(self, s: int = 4):
        def inner():
            return s - 1
        return f"{s + 1}" + "%d" % s
'''


@pytest.mark.timeout(30)
def test_every_mutation_compiles_and_changes_only_its_span() -> None:
    sites = {s.qualname: s for s in functions("a.py", SAMPLE)}
    assert set(sites) == {"A.f", "A.g", "A.g.<locals>.inner"}
    assert sites["A.f"].first_line == 2  # co_firstlineno: the decorator's line
    found = mutations(SAMPLE, sites["A.f"])
    assert {m.kind for m in found} == set(KINDS)
    for mutation in found:
        mutated = mutation.apply(SAMPLE)
        compile(mutated, "a.py", "exec")
        assert mutated[: mutation.start] == SAMPLE[: mutation.start]
        assert mutated.endswith(SAMPLE[mutation.end :])
        assert ast.dump(ast.parse(mutated)) != ast.dump(ast.parse(SAMPLE))
    assert "(x >= 3)" in {m.replacement for m in found}
    assert "((x < 3) or (not ys))" in {m.replacement for m in found}


@pytest.mark.timeout(30)
def test_mutations_skip_docstrings_nested_scopes_fstrings_and_text_operators() -> None:
    sites = {s.qualname: s for s in functions("a.py", SAMPLE)}
    outer = mutations(SAMPLE, sites["A.g"])
    # inner's `s - 1` belongs to inner; the f-string and the "%d" % s formatting are not arithmetic
    assert [m.kind for m in outer] == ["return_none"]
    assert {m.replacement for m in mutations(SAMPLE, sites["A.g.<locals>.inner"])} >= {
        "(s + 1)",
        "return None",
    }
    assert not any("doc" in m.original for m in mutations(SAMPLE, sites["A.f"]))
    assert mutations(SAMPLE, FunctionSite("a.py", "A.f", 99, 100)) == []


@pytest.mark.timeout(30)
def test_statement_template_and_unusable_model_replies_fall_back() -> None:
    failures = [
        FailedTest("tests/t.py::test_mean", "assert 1.5 == 2\nmore"),
        FailedTest("tests/t.py::test_x", ""),
    ]
    text = template_statement("stats", failures)
    assert (
        "`tests/t.py::test_mean`: assert 1.5 == 2" in text
        and "more" not in text
        and "2 tests of stats" in text
    )
    fix = ["    return sum(xs) / len(xs)"]
    good = "Title: mean is wrong\n\nmean([1, 2, 3]) returns 1.5 but the docs say it should be 2."
    assert write_statement("stats", failures, fix, lambda r, f: good) == (good, "model")
    bad_replies: list[Any] = [
        None,
        42,
        "too short",
        "diff --git a/x b/x\n" + good,
        good + " Use `return sum(xs) / len(xs)`.",
    ]
    for reply in bad_replies:
        statement, how = write_statement("stats", failures, fix, lambda r, f, reply=reply: reply)
        assert statement == text and how.startswith("template ("), (reply, how)

    def broken(repo: str, f: Any) -> str:
        raise RuntimeError("model down")

    assert (
        write_statement("stats", failures, fix, broken)[1]
        == "template (describer failed: RuntimeError)"
    )


@pytest.fixture(scope="module")
def smith_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with private_cache(tmp_path_factory.mktemp("envgym-cache")) as cache:
        yield cache


@pytest.fixture(scope="module")
def stats_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("stats") / "stats", STATS)[0]


@pytest.fixture(scope="module")
def made(
    stats_repo: Path, smith_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> SmithResult:
    return smith(stats_repo, n=2, seed=3, workdir=tmp_path_factory.mktemp("w") / "copy")


def _branches(repo: Path) -> list[str]:
    return git(["for-each-ref", "--format=%(refname)"], cwd=repo).stdout.split()


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_instances_are_valid_base_breaks_and_gold_fixes(
    made: SmithResult, stats_repo: Path, require_backend: Any, tmp_path: Path
) -> None:
    require_backend("bwrap")
    assert len(made.instances) >= 1, made.rejected
    assert _branches(stats_repo) == [
        r for r in _branches(stats_repo) if not r.startswith("refs/heads/envgym-smith")
    ]
    for index, inst in enumerate(made.instances):
        copy = Path(inst.repo)
        assert inst.test_patch == "" and inst.fail_to_pass and inst.metadata["source"] == "smith"
        assert set(inst.fail_to_pass).isdisjoint(inst.pass_to_pass)
        assert f"refs/heads/envgym-smith/{inst.instance_id}" in _branches(copy)
        assert (
            inst.metadata["path"] not in inst.problem_statement
        )  # test names may name the function; the file never
        env = ensure_env(copy, repo_key=str(copy), version=inst.version).env
        assert env is not None
        work = checkout(inst, inst.base_commit, tmp_path / str(index))
        assert (
            git(["log", "--format=%s"], cwd=work).stdout.strip() == "Synthesized task base"
        )  # no hint
        base = run_tests(work, env, inst.fail_to_pass)
        assert all(base.outcomes.get(t) == "failed" for t in inst.fail_to_pass), base
        assert apply_patch(work, inst.patch).ok
        gold = run_tests(work, env, [*inst.fail_to_pass, *inst.pass_to_pass])
        assert all(
            gold.outcomes.get(t) == "passed" for t in [*inst.fail_to_pass, *inst.pass_to_pass]
        ), gold


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_a_mutation_that_breaks_no_test_is_rejected(
    made: SmithResult, require_backend: Any
) -> None:
    require_backend("bwrap")
    copy = Path(made.instances[0].repo)
    text = (copy / "src/stats/__init__.py").read_text()
    site = next(s for s in functions("src/stats/__init__.py", text) if s.qualname == "is_positive")
    weak = next(m for m in mutations(text, site) if m.replacement == "(x >= 0)")
    strong = next(m for m in mutations(text, site) if m.replacement == "return None")
    env = ensure_env(copy, repo_key=str(copy), version=packaging_version(copy)).env
    assert env is not None
    tests = ("tests/test_stats.py::test_is_positive",)
    base = git(["rev-parse", "HEAD"], cwd=copy).stdout.strip()
    args = (base, "2024-01-01T00:00:00+00:00", "stats", "v", 0)
    kept, why = try_mutation(copy, env, *args, weak, tests, None, 60.0)
    assert kept is None and why.startswith("breaks no passing test"), why
    kept, why = try_mutation(copy, env, *args, strong, tests, None, 60.0)
    assert kept is not None and kept.metadata["broken_tests"] == list(tests), why
    assert git(["status", "--porcelain"], cwd=copy).stdout == ""  # the copy is back at its base


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_same_seed_same_instances(
    made: SmithResult, stats_repo: Path, tmp_path: Path, require_backend: Any
) -> None:
    require_backend("bwrap")
    again = smith(stats_repo, n=2, seed=3, workdir=tmp_path / "copy")

    def key(result: SmithResult) -> list[tuple[Any, ...]]:
        return [
            (
                i.instance_id,
                i.base_commit,
                i.patch,
                i.fail_to_pass,
                i.pass_to_pass,
                i.problem_statement,
            )
            for i in result.instances
        ]

    assert key(again) == key(made) and again.rejected == made.rejected


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_gold_replay_earns_1_and_an_empty_submission_0(
    made: SmithResult, require_backend: Any
) -> None:
    require_backend("bwrap")
    env = SweEnv(made.instances[0], max_turns=20)
    try:
        env.reset()
        assert run_episode(env, ScriptedAgent(env.gold_calls())).reward == 1.0
        assert run_episode(env, ScriptedAgent([("submit", {})])).reward == 0.0
    finally:
        env.close()


@pytest.mark.heavy
@pytest.mark.timeout(1200)
def test_bench_quick_prints_one_json_object(require_backend: Any, tmp_path: Path) -> None:
    require_backend("bwrap")
    done = subprocess.run(
        [sys.executable, "-m", "envgym.cli", "bench", "swe", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=1150,
        env={**os.environ, "ENVGYM_CACHE": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(done.stdout)
    assert payload["benchmark"] == "swe" and set(payload) == {
        "benchmark",
        "metrics",
        "units",
        "machine",
    }
    for key in ("validation_time_ratio", "setup_success_rate", "validation_cold_s"):
        assert isinstance(payload["metrics"][key], float) and payload["units"][key]
