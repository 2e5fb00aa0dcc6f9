"""A tiny SWE instance and its venv for the grading tests (test_swe_forge, test_swe_host_reads).

``calc``: ``mean`` divides by n + 1; the hidden test patch adds ``test_mean``.  Built with plain
git (no envgym helper), and a venv with pytest copied in from ours (no network).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.pyenv import PythonEnv
from envgym.envs.swe.recipe import Recipe

TEST_HEAD = "from calc.ops import add, mean\n" + "".join(
    f"\n\ndef test_add_{i}():\n    assert add({i}, 1) == {i + 1}\n" for i in range(4)
)
BUGGY = "def add(a, b):\n    return a + b\n\n\ndef mean(xs):\n    return sum(xs) / (len(xs) + 1)\n"
FIXED = BUGGY.replace("(len(xs) + 1)", "len(xs)")
NEW_TEST = "\n\ndef test_mean():\n    xs = [1, 2, 3]\n    assert mean(xs) == 2\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo,
                          check=True, capture_output=True, text=True, timeout=60).stdout  # fmt: skip


def make_instance(root: Path, *, extra_gold: str = "") -> SweInstance:
    """The calc instance in a fresh repository under ``root``; ``extra_gold`` is appended to the
    gold patch (a section git would not produce from a work tree, e.g. a link)."""
    repo = root / "calc"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    for rel, text in {
        "calc/__init__.py": "",
        "calc/ops.py": BUGGY,
        "tests/test_ops.py": TEST_HEAD,
    }.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc" / "ops.py").write_text(FIXED)
    patch = git(repo, "diff", "--no-ext-diff")
    git(repo, "checkout", "-q", "--", ".")
    (repo / "tests" / "test_ops.py").write_text(TEST_HEAD + NEW_TEST)
    test_patch = git(repo, "diff", "--no-ext-diff")
    git(repo, "checkout", "-q", "--", ".")
    return SweInstance(instance_id="calc-1", repo=str(repo), base_commit=base,
                       problem_statement="calc.ops.mean([1, 2, 3]) returns 1.5 instead of 2.",
                       patch=patch + extra_gold, test_patch=test_patch,
                       fail_to_pass=("tests/test_ops.py::test_mean",),
                       pass_to_pass=("tests/test_ops.py::test_add_0", "tests/test_ops.py::test_add_3"))  # fmt: skip


def make_python_env(root: Path) -> PythonEnv:
    """What ensure_env would build for calc, without the network: pytest copied from ours."""
    target = root / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = (
        target
        / "lib"
        / f"python{sys.version_info.major}.{sys.version_info.minor}"
        / "site-packages"
    )
    wanted = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments")
    for name in (*wanted, "py.py"):
        source = ours / name
        if source.exists():
            (shutil.copytree if source.is_dir() else shutil.copy)(source, theirs / name)
    for info in ours.glob("*.dist-info"):
        if info.name.split("-")[0].lower() in wanted:
            shutil.copytree(info, theirs / info.name)
    return PythonEnv(
        backend="bwrap",
        key="grading-test",
        venv=target,
        image=None,
        recipe=Recipe(env={"PYTHONPATH": "."}),
    )
