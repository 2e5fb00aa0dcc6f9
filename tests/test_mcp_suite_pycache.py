"""The MCP suite's loader reads folders, not a package listing: a ``__pycache__`` an installer or
an import leaves beside a task's verify.py is neither a task, a category nor initial state."""

from __future__ import annotations

import shutil
from pathlib import Path

from envgym.envs.mcp_suite import layout, snapshot, suite


def _with_caches(root: Path) -> None:
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        (folder / "__pycache__").mkdir(exist_ok=True)
        (folder / "__pycache__" / "verify.cpython-311.pyc").write_bytes(b"\\x00compiled")


def test_pycache_folders_are_not_tasks_or_categories(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(layout.TASKS_DIR, tasks, ignore=shutil.ignore_patterns("__pycache__"))
    clean = {c: len(layout.load_category(*c, tasks_dir=tasks)) for c in layout.categories(tasks)}
    _with_caches(tasks)
    assert layout.categories(tasks) == sorted(clean)
    for (service, category), n in clean.items():
        loaded = layout.load_category(service, category, tasks_dir=tasks)
        assert len(loaded) == n and all(t.folder.name != "__pycache__" for t in loaded)


def test_pycache_folders_are_not_initial_state(tmp_path: Path) -> None:
    states = tmp_path / "initial_state"
    shutil.copytree(layout.STATE_DIR, states, ignore=shutil.ignore_patterns("__pycache__"))
    _with_caches(states)
    dest = snapshot.materialize("filesystem", "project_notes", tmp_path / "ep", states=states)
    assert (dest / "src" / "app.py").is_file()
    assert not list(dest.rglob("__pycache__"))


def test_pycache_files_do_not_change_the_suite_digest(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "mcp_suite"  # a copy: the digest names files relative to the package
    shutil.copytree(layout.ROOT, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(suite, "_PACKAGE", package)
    monkeypatch.setattr(suite, "_FILES", package / "bundle_files")
    monkeypatch.setattr(layout, "TASKS_DIR", package / "tasks")
    monkeypatch.setattr(layout, "STATE_DIR", package / "initial_state")
    before = suite._digest("sqlite", "shop")
    _with_caches(tmp_path)
    assert suite._digest("sqlite", "shop") == before
    (layout.TASKS_DIR / "sqlite" / "shop" / "add_customer" / "meta.json").write_text("{}")
    assert suite._digest("sqlite", "shop") != before  # the digest does read the data
