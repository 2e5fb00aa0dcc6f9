"""A Harbor task read from an installed copy: pip byte-compiles every .py of a wheel, data
included, so the shipped dataset gains __pycache__ folders its tasks must not see (the
count-extensions oracle counts the files of its tree)."""

from __future__ import annotations

import shutil
from pathlib import Path

from envgym.envs.harbor.task import load_task

TASK = (
    Path(__file__).resolve().parents[1]
    / "envgym"
    / "envs"
    / "harbor"
    / "dataset"
    / "count-extensions"
)


def test_pycache_folders_are_not_part_of_a_task(tmp_path: Path) -> None:
    task_dir = tmp_path / "count-extensions"
    shutil.copytree(TASK, task_dir, ignore=shutil.ignore_patterns("__pycache__"))
    clean = load_task(task_dir).environment
    for folder in [p for p in (task_dir / "environment").rglob("*") if p.is_dir()]:
        (folder / "__pycache__").mkdir()
        (folder / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00compiled")
    loaded = load_task(task_dir).environment
    assert dict(loaded.files) == dict(clean.files) and loaded.dirs == clean.dirs
