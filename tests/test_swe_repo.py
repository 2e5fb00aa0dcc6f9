"""envgym/envs/swe/repo.py and patch.py: source cache, checkouts, git apply, diffs, patch paths."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from swe_history import OPS_BUGGY, OPS_FIXED, make_history, run_git

from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.patch import changed_files, is_test_file, parse_patch, split_patch
from envgym.envs.swe.repo import GitError, apply_patch, checkout, diff, git, resolve_source


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("history") / "calc"
    return root, make_history(root)


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _gold(repo: Path, sha: str) -> str:
    return run_git(repo, "diff", f"{sha}~1", sha) + "\n"


def _all_shas(work: Path) -> set[str]:
    return set(git(["rev-list", "--all"], cwd=work).stdout.split())


@pytest.mark.timeout(30)
def test_checkout_of_a_local_path_holds_the_commit_and_no_future(history, tmp_path: Path) -> None:
    repo, shas = history
    work = checkout(str(repo), shas["initial"], tmp_path / "w")
    assert (work / "src/calc/ops.py").read_text() == OPS_BUGGY
    assert git(["rev-parse", "HEAD"], cwd=work).stdout.strip() == shas["initial"]
    assert git(["status", "--porcelain"], cwd=work).stdout == ""
    assert _all_shas(work) == {shas["initial"]}  # the fix is not in the object store
    later = checkout(repo, shas["huge"], tmp_path / "later")
    assert _all_shas(later) == {shas["huge"]}  # depth 1: neither past nor future commits
    deep = checkout(repo, shas["docs"], tmp_path / "deep", depth=None)
    assert _all_shas(deep) == {shas["initial"], shas["bugfix"], shas["docs"]}
    instance = SweInstance("i", str(repo), shas["bugfix"], "p", "", "")
    assert (
        checkout(instance, shas["bugfix"], tmp_path / "i") / "src/calc/ops.py"
    ).read_text() == OPS_FIXED


@pytest.mark.timeout(30)
@pytest.mark.skipif(os.geteuid() != 0, reason="handing a tree to another uid needs root")
def test_a_source_another_uid_owns_checks_out(history, tmp_path: Path) -> None:
    # A jail hands the trees it writes to its own uid; the host (root) must still check out of them.
    repo, shas = history
    other = tmp_path / "theirs"
    shutil.copytree(repo, other, symlinks=True)
    for path in [other, *other.rglob("*")]:
        os.lchown(path, 2**20 + 7, 2**20 + 7)
    work = checkout(str(other), shas["bugfix"], tmp_path / "w")
    assert (work / "src/calc/ops.py").read_text() == OPS_FIXED


@pytest.mark.timeout(60)
def test_file_url_is_mirrored_once_and_updated_for_unknown_commits(
    tmp_path: Path, cache: Path
) -> None:
    repo = tmp_path / "upstream"
    shas = make_history(repo)
    url = repo.as_uri()
    mirror = resolve_source(url)
    assert mirror.is_relative_to(cache / "swe" / "mirrors") and (mirror / "HEAD").is_file()
    assert resolve_source(url) == mirror
    work = checkout(url, shas["bugfix"], tmp_path / "w")
    assert (work / "tests/test_add.py").is_file()
    (repo / "NEW.md").write_text("new\n")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", "later")
    later = run_git(repo, "rev-parse", "HEAD")
    via_owner = SweInstance("i", "dev/calc", later, "p", "", "", repo_url=url)
    assert (checkout(via_owner, later, tmp_path / "later") / "NEW.md").read_text() == "new\n"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "repo", ["missing-dir", "file:///nonexistent/repo.git", "owner/name", "not-a-repo"]
)
def test_bad_sources_raise_git_error(tmp_path: Path, repo: str, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not-a-repo").mkdir()
    with pytest.raises(GitError) as caught:
        checkout(repo, "a" * 40, tmp_path / "w")
    if repo == "owner/name":
        assert "repo_url" in str(caught.value)
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())


@pytest.mark.timeout(30)
def test_bad_commits_and_destinations(history, tmp_path: Path) -> None:
    repo, shas = history
    with pytest.raises(GitError, match="is not in"):
        checkout(repo, "b" * 40, tmp_path / "w")
    with pytest.raises(GitError, match="not a commit sha"):
        checkout(repo, "HEAD; rm -rf /", tmp_path / "w")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(GitError, match="not empty"):
        checkout(repo, shas["initial"], tmp_path / "full")
    with pytest.raises(GitError, match="not a git repository"):
        resolve_source(repo / "src")  # inside a repository is not a repository


@pytest.mark.timeout(30)
def test_apply_gold_patch_then_again_fails_with_gits_reason(history, tmp_path: Path) -> None:
    repo, shas = history
    work = checkout(repo, shas["initial"], tmp_path / "w")
    result = apply_patch(work, _gold(repo, shas["bugfix"]))
    assert result.ok and result.reason == ""
    assert set(result.files) == {"src/calc/ops.py", "tests/test_add.py"}
    assert (work / "src/calc/ops.py").read_text() == OPS_FIXED
    again = apply_patch(work, _gold(repo, shas["bugfix"]))
    assert not again.ok and "already exists" in again.reason


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("patch", "words"),
    [
        ("", "empty"),
        ("this is not a diff\n", "no file changes"),
        ("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-nope\n+yes\n", "x.py"),
        ("--- a/../evil.py\n+++ b/../evil.py\n@@ -0,0 +1 @@\n+x\n", "outside"),
        ("--- /dev/null\n+++ b//etc/evil\n@@ -0,0 +1 @@\n+x\n", "outside"),
        ("--- /dev/null\n+++ b/.git/hooks/post-commit\n@@ -0,0 +1 @@\n+x\n", ".git"),
        ("--- /dev/null\n+++ b/sub/.GIT/config\n@@ -0,0 +1 @@\n+x\n", ".git"),
        ("--- /dev/null\n+++ b/link/evil.py\n@@ -0,0 +1 @@\n+x\n", "symlink"),
    ],
)
def test_bad_patches_are_results_not_exceptions(
    history, tmp_path: Path, patch: str, words: str
) -> None:
    repo, shas = history
    work = checkout(repo, shas["initial"], tmp_path / "w")
    outside = tmp_path / "outside"
    outside.mkdir()
    (work / "link").symlink_to(outside)
    before = {p: p.read_bytes() for p in work.rglob("*") if p.is_file() and ".git" not in p.parts}
    result = apply_patch(work, patch)
    assert not result.ok and words in result.reason
    after = {p: p.read_bytes() for p in work.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == before and list(outside.iterdir()) == []
    assert not (tmp_path / "evil.py").exists()


@pytest.mark.timeout(30)
def test_apply_is_all_or_nothing_and_takes_plain_diffs(history, tmp_path: Path) -> None:
    repo, shas = history
    work = checkout(repo, shas["initial"], tmp_path / "w")
    half_bad = (
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# calc\n+# Calc\n"
        "--- a/src/calc/ops.py\n+++ b/src/calc/ops.py\n@@ -1 +1 @@\n-nope\n+yes\n"
    )
    assert not apply_patch(work, half_bad).ok
    assert (work / "README.md").read_text() == "# calc\n"
    assert apply_patch(work, half_bad.split("--- a/src")[0]).ok  # plain diff, no git headers
    assert (work / "README.md").read_text() == "# Calc\n"
    with pytest.raises(GitError):
        apply_patch(tmp_path / "nowhere", half_bad)


@pytest.mark.timeout(30)
def test_diff_has_new_files_not_junk_and_leaves_the_workspace_alone(
    history, tmp_path: Path
) -> None:
    repo, shas = history
    work = checkout(repo, shas["initial"], tmp_path / "w")
    (work / "src/calc/ops.py").write_text(OPS_FIXED)
    (work / "src/calc/new.py").write_text("NEW = 1\n")
    (work / "README.md").unlink()
    for junk in (
        "src/calc/__pycache__/ops.cpython-311.pyc",
        "calc.egg-info/PKG-INFO",
        ".pytest_cache/v/x",
        "stray.pyc",
    ):
        (work / junk).parent.mkdir(parents=True, exist_ok=True)
        (work / junk).write_bytes(b"\0junk")
    status = git(["status", "--porcelain"], cwd=work).stdout
    patch = diff(work, shas["initial"])
    assert changed_files(patch) == ["README.md", "src/calc/new.py", "src/calc/ops.py"]
    assert git(["status", "--porcelain"], cwd=work).stdout == status  # index untouched
    fresh = checkout(repo, shas["initial"], tmp_path / "fresh")
    assert apply_patch(fresh, patch).ok
    assert diff(fresh, shas["initial"]) == patch
    assert diff(checkout(repo, shas["initial"], tmp_path / "clean"), shas["initial"]) == ""


@pytest.mark.timeout(30)
def test_planted_git_config_does_not_run_on_the_host(history, tmp_path: Path) -> None:
    repo, shas = history
    work = checkout(repo, shas["initial"], tmp_path / "w")
    marker = tmp_path / "PWNED"
    git(["config", "filter.evil.clean", f"touch {marker}; cat"], cwd=work)
    git(["config", "diff.noprefix", "true"], cwd=work)
    (work / ".gitattributes").write_text("* filter=evil\n")
    (work / "src/calc/new.py").write_text("NEW = 1\n")
    patch = diff(work, shas["initial"])
    assert apply_patch(work, "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# calc\n+# C\n").ok
    assert not marker.exists()
    assert "+++ b/src/calc/new.py" in patch


@pytest.mark.timeout(30)
def test_git_ignores_the_users_own_config(history, tmp_path: Path, monkeypatch) -> None:
    repo, shas = history
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[diff]\n\tnoprefix = true\n[core]\n\thooksPath = /x\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    out = git(["config", "--show-origin", "--list"], cwd=repo).stdout
    assert str(home) not in out
    assert git(["config", "core.hooksPath"], cwd=repo).stdout.strip() == "/dev/null"


TRICKY = """\
diff --git "a/docs/na\\303\\257ve \\"q\\".txt" "b/docs/na\\303\\257ve \\"q\\".txt"
new file mode 100644
--- /dev/null
+++ "b/docs/na\\303\\257ve \\"q\\".txt"
@@ -0,0 +1 @@
+x
diff --git a/old name.py b/new name.py
similarity index 90%
rename from old name.py
rename to new name.py
diff --git a/src/m.py b/src/m.py
--- a/src/m.py
+++ b/src/m.py
@@ -1,2 +1,2 @@
--- a/not/a/header.py
+++ b/not/either.py
 keep
diff --git a/gone.py b/gone.py
deleted file mode 100644
--- a/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-x
diff --git a/img.png b/img.png
new file mode 100644
Binary files /dev/null and b/img.png differ
"""


@pytest.mark.timeout(10)
def test_changed_files_reads_quoted_renamed_deleted_binary_and_ignores_hunk_lines() -> None:
    assert changed_files(TRICKY) == [
        'docs/naïve "q".txt',
        "old name.py",
        "new name.py",
        "src/m.py",
        "gone.py",
        "img.png",
    ]
    sections = parse_patch(TRICKY)
    assert [s.binary for s in sections] == [False, False, False, False, True]
    assert sections[3].new_path is None and sections[0].old_path is None
    assert "".join(s.text for s in sections) == TRICKY


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("path", "is_test"),
    [
        ("tests/test_a.py", True),
        ("pkg/tests/data/x.json", True),
        ("test/helpers.py", True),
        ("src/test_utils.py", True),
        ("src/thing_test.py", True),
        ("conftest.py", True),
        ("src/pkg/conftest.py", True),
        ("src/testing.py", False),
        ("src/contest.py", False),
        ("docs/tests.md", False),
        ("src/test_data.txt", False),
        ("latest/x.py", False),
    ],
)
def test_which_files_are_tests(path: str, is_test: bool) -> None:
    assert is_test_file(path) is is_test


_names = st.sampled_from(
    [
        "src/a.py",
        "tests/test_a.py",
        "b.py",
        "test/x.py",
        "conftest.py",
        "pkg/b_test.py",
        "docs/c.md",
    ]
)
# Hunk lines whose text looks like headers once the +/-/space prefix is added ("--- a/y").
_lines = st.lists(
    st.tuples(
        st.sampled_from(" -+"), st.sampled_from(["x", "-- a/y", "++ b/z", "@@ q", "-- /dev/null"])
    ),
    min_size=1,
    max_size=4,
)


def _hunk(lines: list[tuple[str, str]]) -> str:
    old = sum(1 for sign, _ in lines if sign != "+")
    new = sum(1 for sign, _ in lines if sign != "-")
    return f"@@ -1,{old} +1,{new} @@\n" + "".join(sign + text + "\n" for sign, text in lines)


@pytest.mark.timeout(60)
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(_names, _lines), max_size=5, unique_by=lambda t: t[0]))
def test_split_patch_partitions_the_files(files: list[tuple[str, list[str]]]) -> None:
    patch = "".join(
        f"diff --git a/{n} b/{n}\n--- a/{n}\n+++ b/{n}\n" + _hunk(ls) for n, ls in files
    )
    source, tests = split_patch(patch)
    assert changed_files(patch) == [n for n, _ in files]
    assert changed_files(tests) == [n for n, _ in files if is_test_file(n)]
    assert changed_files(source) == [n for n, _ in files if not is_test_file(n)]
    assert sorted(source.splitlines() + tests.splitlines()) == sorted(patch.splitlines())
