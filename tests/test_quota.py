"""BoundedDir: a size-limited tmpfs per directory, so a tool cannot fill host RAM."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envgym.sandbox.quota import BoundedDir, quota_supported, sweep_stale

needs_mount = pytest.mark.skipif(
    not quota_supported(), reason="mounting a tmpfs needs root / CAP_SYS_ADMIN"
)
MIB = 2**20


def _mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


@needs_mount
def test_writes_past_the_size_fail_and_do_not_grow_the_base(tmp_path: Path) -> None:
    base_before = shutil.disk_usage(tmp_path).used
    with BoundedDir(4 * MIB, base=tmp_path) as box:
        assert box.bounded and _mounted(box.path)
        written = 0
        with pytest.raises(OSError) as err, open(box.path / "big", "wb") as f:
            for _ in range(16):  # 16 MiB into a 4 MiB directory
                f.write(b"x" * MIB)
                f.flush()
                written += MIB
        assert err.value.errno == errno.ENOSPC
        assert written <= 4 * MIB
        assert box.usage() <= 4 * MIB
        # The data went to the directory's own tmpfs, not to the filesystem around it.
        assert shutil.disk_usage(tmp_path).used - base_before < MIB


@needs_mount
def test_many_small_files_stop_at_the_inode_limit(tmp_path: Path) -> None:
    with BoundedDir(4 * MIB, base=tmp_path) as box:  # 1024 inodes at the minimum
        with pytest.raises(OSError) as err:
            for n in range(100_000):
                (box.path / str(n)).touch()
        assert err.value.errno == errno.ENOSPC


@needs_mount
def test_root_ownership_and_mode(tmp_path: Path) -> None:
    with BoundedDir(MIB, base=tmp_path, uid=4242, gid=4343, mode=0o750) as box:
        st = os.stat(box.path)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (4242, 4343, 0o750)
        box.wipe()  # a fresh tmpfs keeps the options
        st = os.stat(box.path)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (4242, 4343, 0o750)


@needs_mount
def test_wipe_replaces_the_tmpfs_without_following_links(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("host data")
    with BoundedDir(MIB, base=tmp_path) as box:
        (box.path / "sub").mkdir()
        (box.path / "sub" / "f").write_text("episode data")
        os.symlink(victim, box.path / "link")
        old_dev = os.stat(box.path).st_dev
        held = os.open(box.path, os.O_RDONLY | os.O_DIRECTORY)  # a user of the old tmpfs
        try:
            box.wipe()
            assert os.listdir(box.path) == []
            assert os.stat(box.path).st_dev != old_dev
            assert sorted(os.listdir(held)) == ["link", "sub"]  # the old one lives on for its user
        finally:
            os.close(held)
    assert (victim / "keep.txt").read_text() == "host data"


@needs_mount
def test_close_is_idempotent_and_unmounts(tmp_path: Path) -> None:
    box = BoundedDir(MIB, base=tmp_path)
    (box.path / "f").write_text("x")
    box.close()
    box.close()
    assert not box.path.exists() and not _mounted(box.path)
    with pytest.raises(RuntimeError, match="closed"):
        box.wipe()


@needs_mount
def test_stale_mounts_of_dead_processes_are_swept(tmp_path: Path) -> None:
    child = textwrap.dedent(
        f"""
        import os, sys
        from envgym.sandbox.quota import BoundedDir
        box = BoundedDir(1 << 20, base={str(tmp_path)!r})
        (box.path / "f").write_bytes(b"x" * 4096)
        print(box.path, flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    leaked = Path(done.stdout.strip())
    assert leaked.exists() and _mounted(leaked)
    mine = BoundedDir(MIB, base=tmp_path)  # the first use of a base sweeps it
    try:
        assert not leaked.exists() and not _mounted(leaked)
        assert sweep_stale(tmp_path) == []  # a live one of this process survives a sweep
        assert _mounted(mine.path)
    finally:
        mine.close()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"size_bytes": 10}, "size_bytes"),
        ({"size_bytes": "1G"}, "size_bytes"),
        ({"uid": -1}, "uid"),
        ({"mode": 0o70000}, "mode"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        BoundedDir(base=tmp_path, **kwargs)  # type: ignore[arg-type]


def test_missing_base_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        BoundedDir(MIB, base=tmp_path / "nowhere")
