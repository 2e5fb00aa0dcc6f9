"""In-process resets refill the episode's tmpfs in place: pristine state, same size limit, no
unmount per episode (an unmount waits for the kernel's mount lock and an RCU grace period)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from envgym.benchmarks.env_step import _add_bundle
from envgym.bundle import load_bundle
from envgym.bundle_env import BundleEnv
from envgym.state import EpisodeDirs


def _source(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "db.sqlite").write_bytes(b"pristine-db")
    (root / "sub" / "notes.txt").write_text("hello")
    return root


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def test_refill_in_place_restores_the_state_on_the_same_filesystem(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("host file")
    dirs = EpisodeDirs(_source(tmp_path / "src"), quota_bytes=1 << 20)
    try:
        state = dirs.refill()
        held = os.open(state, os.O_RDONLY | os.O_DIRECTORY)  # the directory itself, not its path
        (state / "db.sqlite").write_bytes(b"changed")
        (state / "junk").write_text("left by the episode")
        (state / "sub" / "notes.txt").unlink()
        os.symlink(victim, state / "sub" / "notes.txt")  # never written through
        assert dirs.refill(fresh_filesystem=False) == state
        # The same directory was emptied (a fresh tmpfs would leave "junk" in the held one).
        assert sorted(os.listdir(held)) == ["db.sqlite", "sub"]
        assert _files(state) == ["db.sqlite", "sub", "sub/notes.txt"]
        assert (state / "db.sqlite").read_bytes() == b"pristine-db"
        assert not (state / "sub" / "notes.txt").is_symlink()
        assert victim.read_text() == "host file"
    finally:
        os.close(held)
        dirs.cleanup()


def test_refill_in_place_keeps_the_size_limit(tmp_path: Path) -> None:
    dirs = EpisodeDirs(_source(tmp_path / "src"), quota_bytes=1 << 20)
    try:
        if not dirs.bounded:
            pytest.skip("no mount rights: episode directories are not size-limited here")
        state = dirs.refill()
        for _ in range(2):  # the limit holds, and the space comes back, on every in-place refill
            with pytest.raises(OSError) as err:
                (state / "big").write_bytes(b"x" * (4 << 20))
            assert err.value.errno == errno.ENOSPC
            dirs.refill(fresh_filesystem=False)
            assert _files(state) == ["db.sqlite", "sub", "sub/notes.txt"]
        (state / "fits").write_bytes(b"x" * (512 << 10))
    finally:
        dirs.cleanup()


def test_inprocess_reset_refills_without_a_new_filesystem(tmp_path: Path) -> None:
    env = BundleEnv(load_bundle(_add_bundle(tmp_path / "add")), sandbox="inprocess")
    try:
        env.reset(options={"task": 0})
        state = env._state_path
        held = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
        try:
            (state / "left-over").write_text("by the last episode")
            env.reset(options={"task": 0})
            assert env._state_path == state
            assert os.listdir(held) == ["README"]  # emptied in place, not a new filesystem
        finally:
            os.close(held)
        assert _files(state) == ["README"]
        assert (state / "README").read_text() == "no state\n"
    finally:
        env.close()
    assert not state.exists()
