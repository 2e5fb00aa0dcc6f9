"""A repository whose own git configuration runs programs must not run them on the host.

The fixture's `.git/config` names a command for every program-running key git has (textconv,
clean/smudge filters, external diff, fsmonitor, hooks, pager, editor, ssh, askpass, credential
helper, gpg with log.showSignature, alternateRefsCommand, packObjectsHook, an include.path of
more of the same), and `info/attributes`, `core.attributesFile` and a committed
`.gitattributes` assign the drivers to every file.  Each command touches a marker file.
Everything the SWE family does on the host with a user's repository — mining (`envgym synth
swe`), checkouts, `git apply` and diffs (validation, `envgym check swe:`, grading), the smith
copy, `file://` mirrors, `envgym swe export` in both formats and `envgym swe import` — must
leave no marker.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from swe_history import run_git

from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.interchange import export_harbor, export_jsonl, import_harbor_dir, import_jsonl
from envgym.envs.swe.miner import mine
from envgym.envs.swe.repo import (
    GitError,
    apply_patch,
    checkout,
    diff,
    git,
    open_source,
    resolve_source,
)

OPS = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = OPS.replace("a - b", "a + b", 1)
TEST_SUB = "from calc.ops import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"
TEST = "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
ATTRIBUTES = "* diff=evil filter=evil merge=evil\n"


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _plant(repo: Path, root: Path) -> Path:
    """Make `repo` hostile; returns the folder its commands leave markers in."""
    markers = root / "markers"
    markers.mkdir()
    evil = _script(root / "evil.sh", f'touch "{markers}/$1"\n')
    hooks = root / "hooks"
    hooks.mkdir()
    for name in (
        "pre-commit",
        "post-checkout",
        "post-commit",
        "post-merge",
        "pre-push",
        "reference-transaction",
        "post-index-change",
        "pre-auto-gc",
        "post-rewrite",
        "fsmonitor-watchman",
        "push-to-checkout",
    ):
        _script(hooks / name, f'touch "{markers}/hook-{name}"\n')
        _script(repo / ".git" / "hooks" / name, f'touch "{markers}/githook-{name}"\n')
    fsmonitor = _script(root / "fsmonitor.sh", f'touch "{markers}/fsmonitor"\n')
    (root / "attributes").write_text(ATTRIBUTES)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text(ATTRIBUTES)
    (root / "included").write_text(
        f'[filter "evil"]\n\tprocess = {evil} process\n[diff "evil"]\n\tcachetextconv = true\n'
    )
    with (repo / ".git" / "config").open("a") as config:
        config.write(f"""[diff "evil"]
\ttextconv = {evil} textconv; cat
\tcommand = {evil} diff-command
[filter "evil"]
\tclean = {evil} clean; cat
\tsmudge = {evil} smudge; cat
[merge "evil"]
\tdriver = {evil} merge
[diff]
\texternal = {evil} diff-external
[core]
\tfsmonitor = {fsmonitor}
\thooksPath = {hooks}
\tpager = {evil} pager
\teditor = {evil} editor
\tsshCommand = {evil} ssh
\taskPass = {evil} askpass
\talternateRefsCommand = {evil} alternate-refs
\tgitProxy = {evil} proxy
\tattributesFile = {root / "attributes"}
[log]
\tshowSignature = true
[gpg]
\tprogram = {evil} gpg
[credential]
\thelper = !{evil} credential
[uploadpack]
\tpackObjectsHook = {evil} pack-objects-hook
[include]
\tpath = {root / "included"}
""")
    return markers


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    root = tmp_path_factory.mktemp("hostile")
    repo = root / "calc"
    (repo / "src" / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / ".gitattributes").write_text(ATTRIBUTES)
    (repo / "pyproject.toml").write_text('[project]\nname = "calc"\nversion = "0.1"\n')
    (repo / "src" / "calc" / "__init__.py").write_text("")
    (repo / "src" / "calc" / "ops.py").write_text(OPS)
    (repo / "tests" / "test_ops.py").write_text(TEST_SUB)
    tick = [0]
    run_git(repo, "init", "-q")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", "Start calc", tick=tick)
    shas = [run_git(repo, "rev-parse", "HEAD")]
    (repo / "src" / "calc" / "ops.py").write_text(FIXED)
    (repo / "tests" / "test_add.py").write_text(TEST)
    run_git(repo, "add", "-A")
    run_git(
        repo,
        "commit",
        "-q",
        "-m",
        "Fix add() returning the difference of its arguments "
        "instead of their sum, which every caller of add relies on",
        tick=tick,
    )
    shas.append(run_git(repo, "rev-parse", "HEAD"))
    markers = _plant(repo, root)
    return repo, markers, shas


def _markers(markers: Path) -> list[str]:
    found = sorted(p.name for p in markers.iterdir())
    for path in markers.iterdir():
        path.unlink()
    return found


def test_the_fixture_is_live(hostile: tuple[Path, Path, list[str]]) -> None:
    """Plain git over the repository does run its drivers: the fixture is hostile indeed."""
    repo, markers, shas = hostile
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(repo.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    for args in (
        ["diff", "--no-ext-diff", shas[0], shas[1]],
        ["archive", "-o", str(repo.parent / "a.tar"), shas[0]],
    ):
        subprocess.run(
            ["git", *args], cwd=repo, env=env, capture_output=True, check=False, timeout=60
        )  # the planted process filter makes them fail, after running
    assert {"process", "textconv", "smudge"} & set(_markers(markers))


@pytest.mark.timeout(120)
def test_mining_and_synth_run_nothing_of_the_repository(hostile, tmp_path: Path) -> None:
    repo, markers, shas = hostile
    result = mine(repo)
    assert [c.base_commit for c in result.candidates] == [shas[0]]
    assert "+    return a + b" in result.candidates[0].patch
    from envgym.synth_agents.swe.pipeline import SweSynthConfig, SweSynthesis

    synthesis = SweSynthesis(
        tmp_path / "out",
        SweSynthConfig(repo=str(repo), judge_model="u#m"),
        judge=lambda c: (False, "not this one"),
    )
    assert synthesis.run()["repo"] == str(repo)
    assert _markers(markers) == []


@pytest.mark.timeout(120)
def test_checkout_apply_diff_and_mirrors_run_nothing(
    hostile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What validation, `envgym check swe:` and grading do on the host with a repository."""
    repo, markers, shas = hostile
    work = checkout(repo, shas[0], tmp_path / "work")
    assert (work / "src/calc/ops.py").read_text() == OPS  # no smudge: the committed bytes
    assert "evil.sh" not in (work / ".git" / "config").read_text()
    [candidate] = mine(repo).candidates
    assert apply_patch(work, candidate.patch).ok
    assert "+    return a + b" in diff(work, shas[0])
    git(["status", "--porcelain"], cwd=work)
    full = checkout(repo, shas[1], tmp_path / "full", depth=None)
    git(["log", "-p", "--format=%H %G?", "-2"], cwd=full)
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
    mirror = resolve_source(repo.as_uri())
    checkout(repo.as_uri(), shas[1], tmp_path / "from-mirror")
    assert resolve_source(repo.as_uri(), update=True) == mirror
    with open_source(repo) as view:
        git(["log", "--format=%H", "--end-of-options", "HEAD"], cwd=view)
    assert _markers(markers) == []


@pytest.mark.timeout(120)
def test_the_smith_copy_runs_nothing(hostile, tmp_path: Path) -> None:
    from envgym.envs.swe.smith import _git, _local_copy

    repo, markers, shas = hostile
    source = resolve_source(repo)
    with open_source(source) as view:
        copy = _local_copy(source, view, shas[1], tmp_path / "copy")
    (copy / "src/calc/ops.py").write_text(OPS)
    _git(copy, ["add", "--", "src/calc/ops.py"])
    _git(copy, ["commit", "--quiet", "-m", "mutant"])
    _git(copy, ["diff", "--no-ext-diff", "--no-textconv", "HEAD~1", "HEAD"])
    _git(copy, ["checkout", "--quiet", "--force", "--detach", shas[1]])
    assert _markers(markers) == []


@pytest.mark.timeout(120)
def test_export_both_formats_and_import_run_nothing(hostile, tmp_path: Path) -> None:
    repo, markers, _ = hostile
    [candidate] = mine(repo).candidates
    [task] = export_harbor([candidate], tmp_path / "harbor")
    with tarfile.open(task / "environment/repo.tar") as tar:
        ops = tar.extractfile("src/calc/ops.py")
        assert ops is not None and ops.read().decode() == OPS  # no smudge, no conversion
        assert ".gitattributes" in tar.getnames()
    jsonl = export_jsonl(tmp_path / "swebench.jsonl", [candidate])
    assert import_harbor_dir(tmp_path / "harbor") == [candidate] == import_jsonl(jsonl)
    assert _markers(markers) == []


def test_export_ignore_does_not_drop_files_from_the_snapshot(tmp_path: Path) -> None:
    """The snapshot is the tree as committed: a project's `tests/ export-ignore` (common in
    release tarballs) must not leave the task's image without its tests."""
    repo = tmp_path / "r"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (repo / ".gitattributes").write_text("tests export-ignore\n")
    run_git(repo, "init", "-q")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", "x")
    sha = run_git(repo, "rev-parse", "HEAD")
    instance = SweInstance("r-1", str(repo), sha, "p", "", "")
    [task] = export_harbor([instance], tmp_path / "out")
    with tarfile.open(task / "environment/repo.tar") as tar:
        assert "tests/test_x.py" in tar.getnames()


@pytest.mark.parametrize(
    "url",
    [
        "--upload-pack=touch /tmp/envgym-pwned",
        "ext::sh -c touch% /tmp/envgym-pwned",
        "-oProxyCommand=x",
        "https://example.com/a b",
        "file:///x\nevil",
    ],
)
def test_clone_urls_that_are_options_or_commands_are_refused(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(GitError, match="not a repository URL"):
        resolve_source("owner/name", repo_url=url)
    assert not Path("/tmp/envgym-pwned").exists()


def test_sources_that_borrow_objects_or_are_not_repositories_are_refused(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    run_git(repo, "init", "-q")
    (repo / ".git" / "objects" / "info" / "alternates").write_text("/root/.secret/objects\n")
    with pytest.raises(GitError, match="borrows objects"), open_source(repo):
        pass
    with pytest.raises(GitError, match="not a git repository"):
        resolve_source(tmp_path)
    with pytest.raises(GitError, match="not a revision"):
        mine(repo, rev="--output=/tmp/envgym-pwned")


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_validation_and_check_run_nothing_of_the_repository(hostile, tmp_path: Path) -> None:
    """`envgym synth swe`'s validation and `envgym check swe:` end to end (jail included)."""
    from swe_fixtures import private_cache

    from envgym.envs.swe.check import check_instances
    from envgym.envs.swe.validation import validate_instance
    from envgym.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap unavailable")
    repo, markers, _ = hostile
    [candidate] = mine(repo).candidates
    with private_cache(tmp_path / "cache"):
        report = validate_instance(candidate, repeats=1, scope="touched")
        assert report.accepted, report.reason
        checked = check_instances([report.instance], reruns=1)
    assert checked.instances[0].passed, checked.instances[0].reason
    assert _markers(markers) == []


def test_the_private_git_home_is_removed_when_the_process_exits(tmp_path: Path) -> None:
    """Every process that runs git makes itself an empty HOME (so no user config applies); it
    is removed at exit, and a forked child's exit leaves its parent's in place."""
    import sys

    code = (
        "import os, sys\n"
        "from envgym.envs.swe.git_safe import git_env\n"
        "home = git_env()['HOME']\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print(home, os.path.isdir(home))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    home, alive_after_child = out.stdout.split()
    assert os.path.basename(home).startswith("envgym-git-home-")
    assert alive_after_child == "True"
    assert not os.path.exists(home)
