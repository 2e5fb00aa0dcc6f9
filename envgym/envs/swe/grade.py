"""The SWE episode's reward: the hidden tests on the agent's final repository state.

The agent's workspace is untrusted, ``.git`` included (a planted ``filter.*.clean`` or
``core.fsmonitor`` would run on the host the moment git touched it), so the host never runs git
there.  Instead :func:`grade`:

1. checks out ``base_commit`` afresh (a trusted repository) and copies the workspace's files over
   its tree — regular files and links as links, never following them, skipping every ``.git`` and
   build junk — so ``git diff`` there is the agent's change (the report's ``patch``);
2. puts back the base version of *protected* paths the agent touched (see :func:`protected_paths`):
   the hidden test patch's files and the files holding FAIL_TO_PASS / PASS_TO_PASS tests (the
   test patch wins: an agent's edits to tests never reach grading), and files that configure or
   hook the test run (``conftest.py``, ``pytest.ini``, ``tox.ini``, ``sitecustomize.py``,
   ``usercustomize.py``, ``*.pth``, ``*.dist-info/``) unless the gold patch itself changes them;
3. applies the test patch (``patch_applied``), plants *canaries* among the tests of each
   FAIL_TO_PASS file — copies of real tests with a planted failure, named and placed like their
   neighbours (canaries.py) — and runs F2P + P2P + canaries through the grader's launcher
   (trace_check.py: pytest started by a read-only boot script whose profiler counts each test
   function's normal returns, in a report signed with a per-run key);
4. rewards 1.0 iff every F2P test passed, no P2P test did anything but pass (a test missing from
   the report — deleted, deselected, renamed — counts as failed), every canary failed, and the
   trace agrees with pytest. A canary that passed or vanished, a test reported passed whose code
   never returned normally, a canary that returned, noted tampering or a missing or forged trace
   mean the run was rigged (a plugin forcing passes, a source module skipping test bodies, a
   rewritten junit file) and the reward is 0 whatever the other outcomes said.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from envgym.envs.swe.acceptance import still_solves
from envgym.envs.swe.canaries import plant_canaries
from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.patch import changed_files
from envgym.envs.swe.repo import GitError, PatchResult, apply_patch, checkout, diff, git
from envgym.envs.swe.trace_check import disagreements, graded_run, locate

HOOK_FILES = frozenset(
    {"conftest.py", "pytest.ini", "tox.ini", "sitecustomize.py", "usercustomize.py"}
)
JUNK_DIRS = frozenset(
    {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", ".eggs"}
)
# (*.egg-info is not junk here but a hook: its entry_points.txt can register a pytest plugin)
MAX_COPY_BYTES = 2 * 1024**3  # a workspace bigger than this is not graded (reward 0)
GRADE_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Grade:
    """The verdict on one final repository state."""

    reward: float
    components: Mapping[str, float]
    report: Mapping[str, Any] = field(default_factory=dict)


def protected_paths(instance: SweInstance, tree: Path) -> list[str]:
    """The paths of ``tree`` put back to ``base_commit`` before the hidden tests run.

    Found by walking the tree, not from git's diff: an agent's ``.gitignore`` could hide a
    planted ``conftest.py`` from git, never from pytest.
    """
    gold = set(changed_files(instance.patch))
    found = set(_test_paths(instance))
    for path in _walk(tree):
        pure = PurePosixPath(path)
        hook = (
            pure.name in HOOK_FILES
            or pure.suffix == ".pth"
            or pure.name.endswith((".dist-info", ".egg-info"))
        )
        if hook and path not in gold:
            found.add(path)
    return sorted(found)


def _test_paths(instance: SweInstance) -> set[str]:
    ids = (*instance.fail_to_pass, *instance.pass_to_pass)
    return set(changed_files(instance.test_patch)) | {i.split("::", 1)[0] for i in ids}


def _walk(tree: Path) -> list[str]:
    """Every path below ``tree`` (relative, POSIX), skipping ``.git``, never entering links."""
    found: list[str] = []
    stack = [tree]
    while stack:
        for entry in os.scandir(stack.pop()):
            if entry.name.casefold() == ".git":
                continue
            found.append(Path(entry.path).relative_to(tree).as_posix())
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return found


def grade(
    instance: SweInstance,
    workspace: Path,
    python_env: Any,
    scratch: Path,
    *,
    timeout_s: float = GRADE_TIMEOUT_S,
) -> Grade:
    """Grade ``workspace`` (the agent's repository) on a fresh checkout under ``scratch``."""
    tree = scratch / "graded"
    if tree.exists():
        shutil.rmtree(tree)
    checkout(instance, instance.base_commit, tree)
    try:
        copied = mirror_tree(workspace, tree)
    except _TooLarge as err:
        return _zero("workspace_too_large", str(err))
    agent_patch = diff(tree, instance.base_commit)
    try:
        dropped = _restore(tree, instance.base_commit, protected_paths(instance, tree))
    except (GitError, OSError) as err:
        return _zero(
            "restore_failed", f"could not put protected paths back: {err}", patch=agent_patch
        )
    # An empty test_patch (synthesized instances: the deciding tests already exist) applies as nothing.
    applied = (
        apply_patch(tree, instance.test_patch)
        if instance.test_patch.strip()
        else PatchResult(True, "")
    )
    base_report = {"patch": agent_patch, "dropped_paths": dropped, "copied_bytes": copied}
    if not applied.ok:
        return _zero("test_patch_failed", applied.reason, **base_report)
    canaries = plant_canaries(tree, instance.fail_to_pass, pass_to_pass=instance.pass_to_pass)
    tests = [*instance.fail_to_pass, *instance.pass_to_pass]
    locations = locate(tree, [*tests, *canaries])  # from our own text, before anything runs
    watched = sorted({t.split("::", 1)[0] for t in (*tests, *canaries)})
    run, trace = _run(tree, python_env, [*tests, *canaries], watched, timeout_s)
    outcomes = dict(run.outcomes)
    f2p = sum(outcomes.get(t) == "passed" for t in instance.fail_to_pass)
    p2p_failed = sum(outcomes.get(t) != "passed" for t in instance.pass_to_pass)
    canary_outcomes = {c: _canary_outcome(c, outcomes) for c in canaries}
    rigged: list[str] = []
    if outcomes:  # a run with no outcomes at all (crashed, report too large) is failed, not rigged
        rigged = [
            f"canary {c} did not fail ({o})" for c, o in canary_outcomes.items() if o != "failed"
        ]
        rigged += disagreements(
            outcomes, tests, canaries, locations, trace
        )  # pytest's word vs the trace
    # The same rule synthesis and check use for what is part of a fix (acceptance.py).
    solved = still_solves(outcomes, instance.fail_to_pass, instance.pass_to_pass) and not rigged
    components = {"f2p_passed": float(f2p), "f2p_total": float(len(instance.fail_to_pass)),
                  "p2p_failed": float(p2p_failed), "patch_applied": 1.0,
                  "tests_ok": float(run.status == "ok"), "canary_ok": float(not rigged)}  # fmt: skip
    detail = "\n".join(
        ["rigged: " + "; ".join(rigged[:10]), run.detail] if rigged else [run.detail]
    )
    report = {**base_report, "tests_status": "rigged" if rigged else run.status, "detail": detail,
              "outcomes": {t: outcomes.get(t, "missing") for t in tests}, "canaries": canary_outcomes,
              "rigged": rigged, "duration_s": run.duration_s}  # fmt: skip
    return Grade(1.0 if solved else 0.0, components, report)


def _canary_outcome(canary: str, outcomes: Mapping[str, str]) -> str:
    """A canary's outcome: "failed" only if it was reported and every instance of it (a copy of a
    parametrized test has several) failed or errored; else the first other outcome, or missing."""
    found = [
        o
        for i, o in outcomes.items()
        if i == canary or (i.startswith(canary + "[") and i.endswith("]"))
    ]
    if not found:
        return "missing"
    return next((o for o in found if o not in ("failed", "error")), "failed")


def _zero(status: str, detail: str, **report: Any) -> Grade:
    components = {"f2p_passed": 0.0, "f2p_total": 0.0, "p2p_failed": 0.0, "patch_applied": 0.0,
                  "tests_ok": 0.0, "canary_ok": 0.0}  # fmt: skip
    return Grade(0.0, components, {**report, "tests_status": status, "detail": detail})


def _run(
    tree: Path, python_env: Any, ids: list[str], watched: list[str], timeout_s: float
) -> tuple[Any, Any]:
    """The tests through trace_check.graded_run: pytest launched by the grader's own boot script
    (hooks in place before the repository is importable), ``-p no:cacheprovider``, and the
    signed trace of which test functions returned normally."""
    return graded_run(tree, python_env, ids, watched, timeout_s=timeout_s)


def _restore(tree: Path, base_commit: str, paths: list[str]) -> list[str]:
    """Put ``paths`` back as they are in ``base_commit`` (removing those it lacks); returns
    the paths that differed (what the agent had changed there)."""
    changed: list[str] = []
    for path in paths:
        target = tree / path
        linked = _linked_parent(tree, path)
        if linked is not None:  # a directory the agent swapped for a link (maybe to a host path)
            linked.unlink()
            changed.append(linked.relative_to(tree).as_posix())
        before = _snapshot(target)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        if git(["ls-tree", "--name-only", base_commit, "--", path], cwd=tree).stdout.strip():
            git(["checkout", base_commit, "--", path], cwd=tree)
        if _snapshot(target) != before:
            changed.append(path)
    return changed


def _linked_parent(tree: Path, path: str) -> Path | None:
    """The first ancestor of ``tree/path`` (below ``tree``) that is a link, if any."""
    current = tree
    for part in PurePosixPath(path).parts[:-1]:
        current = current / part
        if current.is_symlink():
            return current
        if not current.is_dir():
            return None
    return None


def _snapshot(target: Path) -> object:
    """Enough of a path's state to tell whether a restore changed it."""
    if target.is_symlink():
        return ("link", os.readlink(target))
    if target.is_file():
        return ("file", target.read_bytes())
    if target.is_dir():
        return ("dir", sorted(_walk(target)))
    return None


class _TooLarge(Exception):
    pass


def mirror_tree(source: Path, dest: Path, *, max_bytes: int = MAX_COPY_BYTES) -> int:
    """Make ``dest``'s tree (all but its ``.git``) a copy of ``source``'s; returns bytes copied.

    Links are copied as links and never followed; ``.git`` at any depth, build junk and special
    files (FIFOs, sockets, devices) are skipped.  Files are read with ``O_NOFOLLOW``.
    """
    for child in dest.iterdir():
        if child.name == ".git":
            continue
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    copied = 0
    stack = [(source, dest)]
    while stack:
        src_dir, dst_dir = stack.pop()
        for entry in os.scandir(src_dir):
            if (
                entry.name.casefold() == ".git"
                or entry.name in JUNK_DIRS
                or entry.name.endswith((".pyc", ".pyo"))
            ):
                continue
            target = Path(dst_dir) / entry.name
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(entry.path), target)
            elif stat.S_ISDIR(info.st_mode):
                target.mkdir()
                stack.append((Path(entry.path), target))
            elif stat.S_ISREG(info.st_mode):
                copied += info.st_size
                if copied > max_bytes:
                    raise _TooLarge(f"the workspace holds over {max_bytes} bytes")
                _copy_file(Path(entry.path), target, info.st_mode)
    return copied


def _copy_file(src: Path, dst: Path, mode: int) -> None:
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as reader, open(dst, "xb") as writer:
        shutil.copyfileobj(reader, writer, 1024**2)
    os.chmod(dst, 0o755 if mode & 0o111 else 0o644)  # git keeps only the executable bit
