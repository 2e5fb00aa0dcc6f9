"""Building trip-planning bundles: layout, options, the cached default bundle, envgym check."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from envgym.bundle import load_bundle
from envgym.envs.trip_planning import build as build_module
from envgym.envs.trip_planning.build import _check_witnesses, build_bundle, default_bundle_dir
from envgym.envs.trip_planning.tasks import generate_tasks
from envgym.envs.trip_planning.world import load_world

# Builds with level-5 tasks, each re-drawn until the stronger baselines fail it: the
# default 12-task bundle took 117-140 s of wall time at load 3-6 on two cores.
pytestmark = pytest.mark.timeout(600)


def test_bundle_layout_and_manifest(tmp_path: Path) -> None:
    root = build_bundle(tmp_path / "trip", seed=7, n_tasks=5)
    assert sorted(p.name for p in root.iterdir()) == [
        "manifest.json",
        "solution.py",
        "state",
        "tasks.jsonl",
        "tools.py",
        "verifier.py",
    ]
    assert [p.name for p in (root / "state").iterdir()] == ["db.sqlite"]
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["schema_version"] == 1 and manifest["category"] == "trip planning"
    assert manifest["provenance"]["agent"] == "procedural:trip_planning"
    assert manifest["provenance"]["seed"] == 7 and manifest["provenance"]["model"] is None
    bundle = load_bundle(root)  # schemas, content hash, functions named by tasks
    assert [t.id for t in bundle.tasks][0] == "hangzhou-3day" and len(bundle.tasks) == 6
    for name in ("tools.py", "solution.py", "verifier.py"):
        template = Path(build_module.__file__).parent / "bundle_files" / name
        assert (root / name).read_bytes() == template.read_bytes()


def test_options(tmp_path: Path) -> None:
    root = build_bundle(
        tmp_path / "a", seed=1, n_tasks=4, difficulties=(4,), include_worked_example=False
    )
    tasks = load_bundle(root).tasks
    assert [t.difficulty for t in tasks] == [4, 4, 4, 4]
    with pytest.raises(FileExistsError):
        build_bundle(root, seed=1)
    with pytest.raises(ValueError, match="at least one task"):
        build_bundle(tmp_path / "b", n_tasks=0, include_worked_example=False)
    with pytest.raises(ValueError, match="difficulties"):
        build_bundle(tmp_path / "c", difficulties=(6,))


def test_witnesses_are_checked_by_the_shipped_verifier(tmp_path: Path) -> None:
    root = build_bundle(tmp_path / "trip", seed=0, n_tasks=2, include_worked_example=False)
    generated = generate_tasks(load_world(root / "state" / "db.sqlite"), seed=0, n_tasks=2)
    (root / "verifier.py").write_text(
        "def verify_trip(submission, task):\n"
        "    return {'checks': [{'name': 'always', 'passed': False, 'detail': 'no'}]}\n"
    )
    with pytest.raises(RuntimeError, match="witness of trip-001-d1 rejected"):
        _check_witnesses(root, generated)


def test_default_bundle_is_built_once_and_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
    with ThreadPoolExecutor(max_workers=4) as pool:
        dirs = list(pool.map(lambda _: default_bundle_dir(), range(4)))
    assert len(set(dirs)) == 1
    root = dirs[0]
    assert root.parent == tmp_path / "cache" / "bundles" and root.name.startswith(
        "trip-planning-v0-"
    )
    assert [p.name for p in root.parent.iterdir()] == [root.name]  # no half-built leftovers
    load_bundle(root)

    def no_rebuild(*args: object, **kwargs: object) -> Path:
        raise AssertionError("the cached bundle should have been reused")

    monkeypatch.setattr(build_module, "build_bundle", no_rebuild)
    assert default_bundle_dir() == root


def test_failed_default_build_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path))

    def broken(out_dir: Path, **kwargs: object) -> Path:
        (Path(out_dir) / "state").mkdir()
        raise RuntimeError("generator bug")

    monkeypatch.setattr(build_module, "build_bundle", broken)
    with pytest.raises(RuntimeError, match="generator bug"):
        default_bundle_dir()
    assert list((tmp_path / "bundles").iterdir()) == []


def test_default_bundle_dir_changes_with_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path))
    seeds: list[int] = []

    def marker_only(out: Path, seed: int) -> Path:
        # The key is what is tested, not the build (other tests build the real bundle).
        seeds.append(seed)
        (out / "manifest.json").write_text("{}")
        return out

    monkeypatch.setattr(build_module, "build_bundle", marker_only)
    assert default_bundle_dir(seed=0).name != default_bundle_dir(seed=1).name
    assert seeds == [0, 1]


def test_envgym_check_passes_in_process(tmp_path: Path) -> None:
    from envgym.check import check_bundle

    root = build_bundle(tmp_path / "trip", seed=2, n_tasks=5)
    report = check_bundle(load_bundle(root), sandbox="inprocess", corruptions_per_task=20, reruns=2)
    problems = {t.task_id: t.problems for t in report.tasks if not t.passed}
    assert report.passed, problems
