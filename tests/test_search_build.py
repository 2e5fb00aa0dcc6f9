"""Building the search index: cache key, interrupted and killed builds, the real corpus, the bench.

The last three tests (and ``make("search-qa-v0")``) use the machine's real ``apt-cache dumpavail`` corpus (heavy; skipped where
apt has no package lists, failed in CI where scripts/setup.sh provides them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from rich.console import Console
from search_corpus import dumpavail_text

from envgym.tools.search import SearchTools
from envgym.tools.search.build import build_at, corpus_key
from envgym.tools.search.debian import CorpusUnavailable, load_packages, parse_packages
from envgym.tools.search.index import MARKER, Index

REPO = Path(__file__).resolve().parents[1]
BENCH_KEYS = {"index_build_s", "index_mib", "query_p50_ms", "query_p99_ms"}


def _packages() -> list:
    return list(parse_packages(dumpavail_text().splitlines()))


@pytest.mark.timeout(30)
def test_cache_key_follows_the_apt_lists(tmp_path: Path) -> None:
    lists = tmp_path / "lists"
    lists.mkdir()
    empty = corpus_key(lists)
    packages = lists / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages.lz4"
    packages.write_bytes(b"x")
    first = corpus_key(lists)
    assert first != empty and corpus_key(lists) == first
    (lists / "unrelated_InRelease").write_bytes(b"y")
    assert corpus_key(lists) == first  # only Packages files name the corpus
    packages.write_bytes(b"xy")  # an `apt-get update` rewrote the list
    assert corpus_key(lists) != first


@pytest.mark.timeout(30)
def test_failed_build_leaves_nothing_and_the_next_one_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path))
    final = tmp_path / "search" / "entry"

    def broken() -> object:
        yield from _packages()[:10]
        raise KeyboardInterrupt  # an interrupt in the middle of reading the corpus

    with pytest.raises(KeyboardInterrupt):
        build_at(final, broken())
    assert not final.exists() and list(final.parent.iterdir()) == []
    build_at(final, _packages())
    assert (final / MARKER).is_file() and Index(final).size == len(_packages())


_KILLED_BUILDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from envgym.cache import built_once

    def build(folder):
        (folder / "half-written.idx").write_bytes(b"0" * 4096)
        Path(sys.argv[2]).touch()
        time.sleep(60)  # killed here

    built_once(Path(sys.argv[1]), build, marker="index.json")
    """
)


@pytest.mark.timeout(60)
def test_killed_build_restarts_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL skips every ``finally``: the next build must not read or keep the dead one's files."""
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path))
    final, started = tmp_path / "search" / "entry", tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_BUILDER, str(final), str(started)], env=env
    )
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert child.poll() is None and time.monotonic() < deadline, "builder never started"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    leftovers = [p.name for p in final.parent.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(".entry.")  # the dead builder's scratch
    build_at(final, _packages())
    assert sorted(p.name for p in final.parent.iterdir()) == ["entry"]  # swept, and built
    assert not (final / "half-written.idx").exists()
    assert SearchTools(Index(final)).search("spacerocks", 1)[0]["id"] == "spacerocks"


@pytest.fixture(scope="module")
def real_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An envgym cache holding the machine's full default index, built once for this module."""
    try:
        load_packages()
    except CorpusUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("real-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENVGYM_CACHE", str(root))
        from envgym.tools.search.build import default_index

        default_index(Console(stderr=True, quiet=True))
    return root


@pytest.mark.heavy
@pytest.mark.timeout(120)
def test_full_corpus_index_builds_once_and_answers(
    real_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(real_cache))
    from envgym.tools.search.build import default_folder, default_index

    index = default_index()
    assert index.size > 1000 and index.folder == default_folder()
    meta = json.loads((index.folder / MARKER).read_text())
    assert meta["documents"] == index.size and meta["source"] == "apt-cache dumpavail"
    stamp = (index.folder / MARKER).stat().st_mtime_ns
    tools = SearchTools(default_index())  # a second call reuses the entry
    assert (index.folder / MARKER).stat().st_mtime_ns == stamp
    assert tools.search("dpkg package manager", 10)[0]["id"]
    assert tools.open("dpkg")["text"].startswith("Package: dpkg\n")


@pytest.mark.heavy
@pytest.mark.timeout(120)
def test_make_search_qa_v0_on_the_real_corpus(
    real_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert (
        pyproject["project"]["entry-points"]["envgym.envs"]["search-qa"]
        == "envgym.envs.search_qa.registration:register_envs"
    )
    monkeypatch.setenv("ENVGYM_CACHE", str(real_cache))
    import envgym
    from envgym.envs.search_qa.registration import register_envs

    register_envs()  # the installed entry points may predate this checkout's pyproject
    env = envgym.make("search-qa-v0", task=0, sandbox="inprocess")
    try:
        obs, _ = env.reset()
        assert "Question:" in obs["messages"][-1]["content"]
        evidence = env.task.metadata["evidence"][0]
        obs, *_ = env.step(_call("search", query=evidence.replace("-", " "), k=10))
        assert evidence in {hit["id"] for hit in json.loads(obs["messages"][-1]["content"])}
        _, reward, done, *_ = env.step(_call("submit_answer", answer=env.task.metadata["answer"]))
        assert done and reward == 1.0
    finally:
        env.close()


def _call(name: str, **args: object) -> dict[str, object]:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    return {"role": "assistant", "content": "", "tool_calls": [call]}


@pytest.mark.heavy
@pytest.mark.timeout(120)
def test_bench_search_is_registered_and_prints_its_keys(
    real_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert (
        pyproject["project"]["entry-points"]["envgym.benchmarks"]["search"]
        == "envgym.benchmarks.search:run"
    )
    import envgym.bench as bench

    # the installed entry points may predate this checkout's pyproject: run the declared one
    point = EntryPoint("search", "envgym.benchmarks.search:run", bench.GROUP)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench, "available", lambda: {"search": point})
        bench.run_benchmark(
            "search", as_json=True, quick=True, console=Console(stderr=True, quiet=True)
        )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 1
    payload = json.loads(lines[0])
    assert payload["benchmark"] == "search" and BENCH_KEYS <= set(payload["metrics"])
    assert all(isinstance(payload["metrics"][k], (int, float)) for k in BENCH_KEYS)
    assert payload["units"]["index_mib"] == "MiB" and payload["units"]["query_p99_ms"] == "ms"
