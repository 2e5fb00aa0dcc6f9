"""envgym/envs/search_qa: bundles pass ``envgym check``, episodes search the full index, answers
compare beyond exact match.  Hermetic (the 45-package fixture corpus); ``make("search-qa-v0")`` on
the real corpus is in test_search_build.py (it shares that module's full index)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from search_corpus import dumpavail_text

from envgym.bundle import load_bundle
from envgym.check import check_bundle
from envgym.envs.search_qa.build import build_bundle
from envgym.envs.search_qa.env import SearchQAEnv
from envgym.tools.search import SearchTools
from envgym.tools.search.build import build_at
from envgym.tools.search.debian import parse_packages
from envgym.tools.search.index import Index

REPO = Path(__file__).resolve().parents[1]


def _bundle_module(name: str) -> ModuleType:
    path = REPO / "envgym" / "envs" / "search_qa" / "bundle_files" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_search_qa_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


verifier = _bundle_module("verifier")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "one line",
        "a\n" * 3000,
        "x" * 4500 + "\nshort\n" + "y" * 10,
        "\n".join(f"Field{i}: " + "v" * (i * 37 % 300) for i in range(200)),
    ],
)
def test_the_bundle_stand_in_pages_like_the_host_tool(text: str) -> None:
    """The bundle's stdlib ``open`` (used by envgym check's gold replays) mirrors
    envgym/tools/search's pages, so a gold solution's page numbers mean the same in check and in an
    episode."""
    from envgym.tools.search.pages import paginate

    assert _bundle_module("tools")._pages(text) == paginate(text)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SearchTools]:
    root = tmp_path_factory.mktemp("search-qa")
    packages = list(parse_packages(dumpavail_text().splitlines()))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENVGYM_CACHE", str(root / "cache"))
        index = build_at(root / "cache" / "search" / "fixture", packages)
    return build_bundle(root / "bundle", packages, n=6, seed=0), SearchTools(Index(index))


def _call(name: str, **args: Any) -> dict[str, Any]:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    return {"role": "assistant", "content": "", "tool_calls": [call]}


@pytest.mark.timeout(90)
def test_bundle_passes_envgym_check(world: tuple[Path, SearchTools], require_backend: Any) -> None:
    require_backend("bwrap")
    report = check_bundle(load_bundle(world[0]), sandbox="bwrap", corruptions_per_task=5, reruns=1)
    assert [t.problems for t in report.tasks] == [() for _ in report.tasks]
    assert report.passed and len(report.tasks) == 6
    assert all(t.gold_passed and t.noop_rejected and t.witnesses_valid for t in report.tasks)


@pytest.mark.timeout(60)
def test_episode_searches_the_full_index_and_rewards_an_equivalent_answer(
    world: tuple[Path, SearchTools],
) -> None:
    bundle, tools = world
    snapshot = {
        json.loads(line)["id"]
        for line in (bundle / "state" / "docs.jsonl").read_text().splitlines()
    }
    env = SearchQAEnv(bundle, search=tools, task=0, sandbox="inprocess")
    try:
        obs, _ = env.reset()
        assert [t["function"]["name"] for t in obs["tools"]] == [
            "search",
            "open",
            "find",
            "submit_answer",
        ]
        obs, *_ = env.step(_call("search", query="filler package", k=50))
        found = {hit["id"] for hit in json.loads(obs["messages"][-1]["content"])}
        assert found - snapshot, "search answered from the bundle snapshot, not the full index"
        obs, reward, done, *_ = env.step(_call("find", id="spacerocks", pattern="(a)\\1"))
        assert (
            "find: invalid pattern" in obs["messages"][-1]["content"] and not done and reward == 0
        )
        obs, *_ = env.step(_call("open", id="spacerocks", page=9))
        assert "page 9 is out of range" in obs["messages"][-1]["content"]
        answer = env.task.metadata["answer"]
        obs, reward, done, _, info = env.step(
            _call("submit_answer", answer=f'  "{answer.upper()}". ')
        )
        assert done and reward == 1.0 and info["reward_components"]["answer_correct"] == 1.0
    finally:
        env.close()


@pytest.mark.timeout(60)
def test_wrong_answer_earns_nothing(world: tuple[Path, SearchTools]) -> None:
    env = SearchQAEnv(world[0], search=world[1], task=0, sandbox="inprocess")
    try:
        env.reset()
        _, reward, done, _, info = env.step(_call("submit_answer", answer="spacerocks-not"))
        assert done and reward == 0.0 and info["reward_components"]["answer_correct"] == 0.0
    finally:
        env.close()


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("given", "expected", "aliases", "kind", "ok"),
    [
        ("libfoo1", "libfoo1", [], "name", True),
        ("  'LibFoo1'. ", "libfoo1", [], "name", True),
        ("libfoo", "libfoo1", [], "name", False),
        ("the package is libfoo1", "libfoo1", [], "name", False),
        ("Debian Science Team", "Debian Science Team", ["team@lists.debian.org"], "person", True),
        ("team@lists.debian.org", "Debian Science Team", ["team@lists.debian.org"], "person", True),
        ("Debian Science", "Debian Science Team", ["team@lists.debian.org"], "person", False),
        ("1.0-1", "2:1.0-1", [], "version", True),
        ("1.1", "1.10", [], "version", False),
        ("12", "12", [], "number", True),
        ("twelve", "12", [], "number", True),
        ("12.0", "12", [], "number", True),
        ("13", "12", [], "number", False),
        ("", "libfoo1", [], "name", False),
    ],
)
def test_answer_equivalence(
    given: str, expected: str, aliases: list[str], kind: str, ok: bool
) -> None:
    assert verifier.equivalent(given, expected, aliases, kind) is ok


@pytest.mark.timeout(10)
@pytest.mark.parametrize("answer", [None, 7, ["libfoo1"], {"x": 1}, "   "])
def test_verifier_rejects_hostile_submissions_without_raising(answer: object) -> None:
    task = {"metadata": {"answer": "libfoo1", "aliases": [], "kind": "name"}}
    report = verifier.verify_answer({"answer": answer}, task)
    assert report["checks"][0] == {
        "name": "answer_given",
        "passed": False,
        "detail": "no answer was submitted",
    }
