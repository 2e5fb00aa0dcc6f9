"""The SWE agent's host-side file tools: confinement, exact-match edits, bounded output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envgym.envs.swe.file_tools import FileLimits, FileToolError, Workspace

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 1\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    return Workspace(root)


def test_view_file_numbers_lines_and_ranges(ws: Workspace) -> None:
    out = ws.view("pkg/mod.py")
    assert "     1\tdef f():" in out and "     6\t    return 1" in out
    assert ws.view("/repo/pkg/mod.py", 2, 2) == "     2\t    return 1"
    with pytest.raises(FileToolError, match="invalid line range"):
        ws.view("pkg/mod.py", 10, 12)


def test_view_directory_lists_without_git(ws: Workspace) -> None:
    out = ws.view(".")
    assert "pkg/" in out and "pkg/mod.py" in out and ".git" not in out


@pytest.mark.parametrize(
    "path",
    [
        "../secret.txt",
        "/etc/passwd",
        "/repo/../secret.txt",
        "pkg/../../secret.txt",
        ".git/HEAD",
        "/repo/.git/config",
        "pkg/../.GIT/HEAD",
    ],
)
def test_paths_outside_or_in_git_are_refused(ws: Workspace, path: str) -> None:
    for attempt in (lambda: ws.view(path), lambda: ws.create(path, "x"),
                    lambda: ws.str_replace(path, "secret", "public")):  # fmt: skip
        with pytest.raises(FileToolError, match="outside the repository|off limits|leads outside"):
            attempt()
    assert (ws.root.parent / "secret.txt").read_text() == "top secret\n"


def test_symlinks_out_of_the_workspace_are_refused(ws: Workspace) -> None:
    os.symlink(ws.root.parent / "secret.txt", ws.root / "link.txt")
    os.symlink("/etc", ws.root / "etc")
    os.symlink(
        ws.root.parent / "nowhere.txt", ws.root / "dangling.txt"
    )  # create would write through it
    for path in ("link.txt", "etc/passwd", "etc"):
        with pytest.raises(FileToolError, match="leads outside"):
            ws.view(path)
    with pytest.raises(FileToolError, match="leads outside"):
        ws.create("dangling.txt", "planted")
    with pytest.raises(FileToolError, match="leads outside"):
        ws.str_replace("link.txt", "secret", "public")
    assert not (ws.root.parent / "nowhere.txt").exists()
    assert "no matches" in ws.search("top secret")  # search does not follow links either
    os.symlink(ws.root / "pkg" / "mod.py", ws.root / "inside.py")  # a link within the repo is fine
    assert "def f" in ws.view("inside.py")


def test_str_replace_needs_exactly_one_match(ws: Workspace) -> None:
    with pytest.raises(FileToolError, match="occurs 2 times"):
        ws.str_replace("pkg/mod.py", "return 1", "return 2")
    with pytest.raises(FileToolError, match="0 matches"):
        ws.str_replace("pkg/mod.py", "return 3", "return 2")
    assert "line 3" in ws.str_replace(
        "pkg/mod.py", "\n\ndef g():\n    return 1", "\n\ndef g():\n    return 2"
    )
    assert (ws.root / "pkg" / "mod.py").read_text().endswith("def g():\n    return 2\n")
    with pytest.raises(FileToolError, match="does not exist"):
        ws.str_replace("pkg/none.py", "a", "b")


def test_create_makes_parents_and_keeps_limits(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, FileLimits(max_write_bytes=10, max_read_bytes=20))
    assert ws.create("a/b/c.txt", "hello\n").startswith("created a/b/c.txt")
    assert (tmp_path / "a" / "b" / "c.txt").read_text() == "hello\n"
    with pytest.raises(FileToolError, match="over the 10-byte limit"):
        ws.create("big.txt", "x" * 11)
    (tmp_path / "huge.txt").write_text("y" * 21)
    with pytest.raises(FileToolError, match="over the 20-byte limit"):
        ws.view("huge.txt")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(FileToolError, match="not a regular file"):
        ws.view("fifo")  # would block a naive open()
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01")
    with pytest.raises(FileToolError, match="binary"):
        ws.view("bin.dat")


def test_search_is_bounded_and_linear(ws: Workspace) -> None:
    assert ws.search("return 1") == "pkg/mod.py:2: return 1\npkg/mod.py:6: return 1"
    assert "invalid pattern" in _error(lambda: ws.search(r"(a)\1"))
    (ws.root / "long.txt").write_text("a" * 50_000 + "!")
    assert "no matches" in ws.search(r"(a+)+$")  # catastrophic for backtracking engines
    (ws.root / "many.txt").write_text("hit\n" * 500)
    assert "more than 100 matches" in ws.search("hit")


def _error(call: object) -> str:
    try:
        call()  # type: ignore[operator]
    except FileToolError as err:
        return str(err)
    return ""
