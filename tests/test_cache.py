"""envgym/cache.py: one build per entry across threads and processes, nothing half-built."""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from envgym.cache import built_once, cache_root, source_digest, source_keyed_bundle


def _slow_build(out: Path) -> None:
    """Appends to a log outside the entry so the test can count builds across processes."""
    with open(cache_root() / "builds.log", "a") as fh:
        fh.write("x")
    time.sleep(0.3)  # long enough that racing callers overlap
    (out / "data.txt").write_text("ok")
    (out / "manifest.json").write_text("{}")


def _build_in_process(final: str, cache: str) -> str:
    import os

    os.environ["ENVGYM_CACHE"] = cache
    return str(built_once(Path(final), _slow_build))


@pytest.mark.timeout(60)
def test_racing_threads_and_processes_build_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
    final = tmp_path / "cache" / "bundles" / "entry"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as procs, ThreadPoolExecutor(max_workers=3) as threads:
        pending = [
            procs.apply_async(_build_in_process, (str(final), str(tmp_path / "cache")))
            for _ in range(2)
        ]
        got = list(threads.map(lambda _: built_once(final, _slow_build), range(3)))
        got += [Path(p.get(timeout=50)) for p in pending]
    assert got == [final] * 5
    assert (tmp_path / "cache" / "builds.log").read_text() == "x"  # one build, not five
    assert [p.name for p in final.parent.iterdir()] == ["entry"]  # no scratch left behind
    assert (final / "data.txt").read_text() == "ok"


@pytest.mark.timeout(30)
def test_a_failed_build_leaves_nothing_and_the_next_call_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
    final = tmp_path / "cache" / "bundles" / "entry"

    def broken(out: Path) -> None:
        (out / "half.txt").write_text("half")
        raise RuntimeError("generator bug")

    with pytest.raises(RuntimeError, match="generator bug"):
        built_once(final, broken)
    assert list(final.parent.iterdir()) == []

    def forgets_marker(out: Path) -> None:
        (out / "data.txt").write_text("ok")

    with pytest.raises(RuntimeError, match="without writing manifest.json"):
        built_once(final, forgets_marker)
    assert list(final.parent.iterdir()) == []

    final.mkdir()  # a folder without its marker (an older, interrupted layout) is rebuilt
    (final / "stale.txt").write_text("stale")
    assert built_once(final, _slow_build) == final
    assert sorted(p.name for p in final.iterdir()) == ["data.txt", "manifest.json"]


def test_source_digest_covers_names_bytes_and_extra(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    files = [tmp_path / "a.py", tmp_path / "b.py"]
    base = source_digest(tmp_path, files, "v1")
    assert source_digest(tmp_path, files, "v1") == base
    assert source_digest(tmp_path, files, "v2") != base
    (tmp_path / "b.py").write_text("y = 3\n")
    assert source_digest(tmp_path, files, "v1") != base
    (tmp_path / "b.py").write_text("y = 2\n")
    (tmp_path / "b.py").rename(tmp_path / "c.py")
    assert source_digest(tmp_path, [tmp_path / "a.py", tmp_path / "c.py"], "v1") != base


@pytest.mark.timeout(60)
def test_a_source_keyed_bundle_is_rebuilt_when_its_code_or_identity_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
    family, kit = tmp_path / "family", tmp_path / "kit"
    for root in (family, kit, family / "bundle_files"):
        root.mkdir()
    (family / "tasks.py").write_text("LEVELS = 5\n")
    (family / "registration.py").write_text("ID = 'x-v0'\n")
    (family / "bundle_files" / "verifier.py").write_text("STRICT = True\n")
    (kit / "build.py").write_text("DRAWS = 60\n")
    builds: list[Path] = []

    def build(out: Path) -> Path:
        builds.append(out)
        (out / "manifest.json").write_text("{}")
        return out

    def entry(identity: str = "gen-1\0seed0") -> Path:
        skip = frozenset({"registration.py"})
        return source_keyed_bundle("fam-v0", identity, (family, kit), build, skip=skip)

    first = entry()
    assert first.parent == tmp_path / "cache" / "bundles" and first.name.startswith("fam-v0-")
    assert entry() == first and len(builds) == 1  # reused, not rebuilt
    (family / "registration.py").write_text("ID = 'y-v0'\n")
    assert entry() == first  # a skipped module does not shape the bundle
    seen = {first}
    for path, text in [
        (family / "tasks.py", "LEVELS = 6\n"),
        (family / "bundle_files" / "verifier.py", "STRICT = False\n"),  # below the root too
        (kit / "build.py", "DRAWS = 61\n"),  # every root counts
    ]:
        path.write_text(text)
        seen.add(entry())
    seen.add(entry("gen-2\0seed0"))
    assert len(seen) == 5 and len(builds) == 5  # each change is a new entry, built once
