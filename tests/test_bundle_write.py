"""envgym/bundle_write.py: the one way builders write a bundle's tasks and code files."""

from __future__ import annotations

from pathlib import Path

import pytest

from envgym.bundle import CODE_FILES
from envgym.bundle_write import copy_code_files, fresh_bundle_dir, write_tasks


def test_tasks_are_utf8_json_lines_in_the_builders_key_order(tmp_path: Path) -> None:
    write_tasks(tmp_path, [{"id": "t1", "prompt": "τ² café"}, {"b": 1, "a": [1.5, None]}])
    # Non-ASCII kept as it is (not \\u escapes), keys not sorted: the bytes the content hash
    # of every bundle built so far was taken over.
    assert (tmp_path / "tasks.jsonl").read_bytes() == (
        '{"id": "t1", "prompt": "τ² café"}\n{"b": 1, "a": [1.5, null]}\n'.encode()
    )


def test_code_files_are_copied_from_the_templates(tmp_path: Path) -> None:
    templates, out = tmp_path / "templates", tmp_path / "out"
    templates.mkdir()
    out.mkdir()
    for name in (*CODE_FILES, "helper.py"):
        (templates / name).write_text(f"# {name}\n")
    copy_code_files(templates, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(CODE_FILES)
    assert (out / "verifier.py").read_text() == "# verifier.py\n"


def test_a_bundle_is_built_only_into_a_fresh_folder(tmp_path: Path) -> None:
    assert fresh_bundle_dir(str(tmp_path / "absent")) == tmp_path / "absent"
    (tmp_path / "empty").mkdir()
    assert fresh_bundle_dir(tmp_path / "empty") == tmp_path / "empty"
    (tmp_path / "empty" / "tasks.jsonl").write_text("")
    with pytest.raises(FileExistsError, match="is not empty"):
        fresh_bundle_dir(tmp_path / "empty")
