"""Copy-on-reset: the episode path is refilled exactly, on a fresh bounded filesystem, never following links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envgym.state import EpisodeDirs, PristineState, chown_tree


def _make_source(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "db.sqlite").write_bytes(b"pristine-db")
    (root / "sub" / "notes.txt").write_text("hello")
    return root


def test_refill_restores_exact_contents_at_the_same_path_on_a_new_filesystem(
    tmp_path: Path,
) -> None:
    dirs = EpisodeDirs(_make_source(tmp_path / "src"))
    try:
        first = dirs.refill()
        (first / "db.sqlite").write_bytes(b"changed")
        (first / "junk").write_text("left by the episode")
        (first / "sub" / "deeper").mkdir()
        old = os.open(first, os.O_RDONLY | os.O_DIRECTORY)  # what a stale worker still holds
        try:
            second = dirs.refill()
            # The old directory was replaced, not emptied: its holder keeps the old files.
            assert "junk" in os.listdir(old)
        finally:
            os.close(old)
        assert second == first
        files = sorted(p.relative_to(second).as_posix() for p in second.rglob("*"))
        assert files == ["db.sqlite", "sub", "sub/notes.txt"]
        assert (second / "db.sqlite").read_bytes() == b"pristine-db"
    finally:
        dirs.cleanup()
    assert not first.exists()


def test_refill_never_writes_through_symlinks(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("host file")
    outside = tmp_path / "outside"
    outside.mkdir()
    dirs = EpisodeDirs(_make_source(tmp_path / "src"))
    try:
        state = dirs.refill()
        (state / "db.sqlite").unlink()
        os.symlink(victim, state / "db.sqlite")  # hostile code points the db at a host file
        (state / "sub" / "notes.txt").unlink()
        (state / "sub").rmdir()
        os.symlink(outside, state / "sub")  # ... and a directory outside
        dirs.refill()
        assert victim.read_text() == "host file"
        assert list(outside.iterdir()) == []
        assert not (state / "db.sqlite").is_symlink()
        assert (state / "db.sqlite").read_bytes() == b"pristine-db"
    finally:
        dirs.cleanup()


def test_pristine_state_is_read_once(tmp_path: Path) -> None:
    src = _make_source(tmp_path / "src")
    pristine = PristineState(src)
    (src / "db.sqlite").write_bytes(b"edited later")
    dest = tmp_path / "dest"
    dest.mkdir()
    pristine.write_into(dest)
    assert (dest / "db.sqlite").read_bytes() == b"pristine-db"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_chown_tree_never_reaches_host_files(tmp_path: Path) -> None:
    host = tmp_path / "host.txt"
    host.write_text("host")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "mine.txt").write_text("episode")
    os.symlink(host, tree / "link")  # a link to a host file
    os.symlink(tmp_path, tree / "dirlink")  # a link to a host directory
    os.link(host, tree / "hard")  # a host file smuggled in by a hard link
    chown_tree(tree, 54321, 54321)
    assert os.stat(tree / "sub" / "mine.txt").st_uid == 54321
    assert os.stat(tree / "sub").st_uid == 54321 and os.stat(tree).st_uid == 54321
    assert os.stat(host).st_uid == 0 and os.stat(tmp_path).st_uid == 0


def test_episode_quota_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="quota_bytes"):
        EpisodeDirs(_make_source(tmp_path / "src"), quota_bytes=12)
    dirs = EpisodeDirs(_make_source(tmp_path / "src2"), quota_bytes=1 << 20)
    try:
        with pytest.raises(ValueError, match="scratch name"):
            dirs.scratch("../x")
    finally:
        dirs.cleanup()
