"""Run a repository's tests in its environment, and validate an instance by F2P / P2F.

``run_tests`` runs pytest in the jail (network off, the workspace at /repo, the env read-only)
with a JUnit report written into a scratch folder outside the workspace, and turns what happened
into a :class:`TestRun`.  Nothing that is not a clean pytest run is ever a pass: a timeout, a
crash, a missing or malformed report, "no tests ran" and collection errors each get their own
status, and collection errors also mark the tests of that module as failing
(envgym/envs/swe/outcomes.py).

``validate_instance`` is DeepSeek-V3.2's acceptance rule (§3.2.3, "Code Agent"): an environment
counts as built "only when applying the gold patch results in a non-zero count of
false-to-positive (F2P) test cases ... and a zero count of pass-to-fail (P2F) test cases", run
``repeats`` times per side so that flaky tests are found and excluded instead of deciding.
The whole suite runs on both sides by default (``scope="suite"``): a regression anywhere is a
P2F, and running only the test_patch's files would miss exactly those.

An accepted instance's gold patch is then cut down to the fix (envgym/envs/swe/acceptance.py): each
file ``removable_paths`` names is left out in turn, on a fresh checkout, and a file whose absence
still passes every FAIL_TO_PASS and PASS_TO_PASS test is an ``unrelated_change`` and leaves the gold
patch (kept in the instance's metadata as ``unrelated_patch``).  ``envgym check`` tries the same
files with the same rule, so what synthesis accepts, check does not fail as a partial fix.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from envgym.envs.swe.acceptance import UNRELATED, removable_paths, still_solves, without_path
from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.junit import (
    CHUNK_BYTES,
    JunitError,
    collection_errors,
    parse_junit_chunks,
    test_outcomes,
)
from envgym.envs.swe.outcomes import check_expected, classify
from envgym.envs.swe.patch import parse_patch
from envgym.envs.swe.pyenv import PythonEnv, run_in
from envgym.envs.swe.repair import RepairModel
from envgym.envs.swe.repo import (
    GitError,
    PatchResult,
    apply_patch,
    changed_files,
    checkout,
    select_test_files,
)
from envgym.envs.swe.safe_read import open_regular, read_regular
from envgym.envs.swe.setup_agent import SetupResult, ensure_env
from envgym.sandbox.command_jail import CommandResult, Mount

JAIL_REPORT_DIR = "/junit"
REPORT = "report.xml"
STATUSES = (
    "ok",
    "patch_failed",
    "collection_error",
    "timeout",
    "no_tests",
    "crashed",
    "report_too_large",
)
# The JUnit report is written in the jail: read without following links, at most this many bytes
# (a 150 MiB report once took the host's memory from 61 to 1,746 MiB); over it, the run failed.
MAX_REPORT_BYTES = 64 * 1024**2
# Files whose content decides what an install produces: an instance without a version gets one
# environment per distinct set of them (instances that agree share it).
PACKAGING = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "tox.ini",
    "noxfile.py",
    "Pipfile",
    "requirements*.txt",
    "requirements/*.txt",
    "*requirements*.txt",
)


@dataclass(frozen=True)
class TestRun:
    __test__ = False  # a result type, not a pytest test class

    status: str  # one of STATUSES
    outcomes: Mapping[str, str]  # pytest node id -> "passed" | "failed" | "error" | "skipped"
    detail: str  # why, for a human (and the agent)
    duration_s: float


@dataclass(frozen=True)
class ValidationReport:
    accepted: bool
    status: str  # "accepted" | "rejected" | "checkout_failed" | "setup_failed" |
    reason: str  #   "patch_failed" | "invalid_run"; reason says why in words
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    pass_to_fail: tuple[str, ...]
    flaky: tuple[str, ...]
    runs: tuple[TestRun, ...]  # base runs, gold runs, then one per gold file left out
    setup: SetupResult | None
    instance: SweInstance  # FAIL_TO_PASS / PASS_TO_PASS / version filled in when accepted
    timings: Mapping[str, float] = field(default_factory=dict)
    unrelated: tuple[str, ...] = ()  # gold patch files taken out: not part of the fix


def run_tests(
    workdir: Path, env: PythonEnv, test_ids: Sequence[str] = (), *, timeout_s: float = 900.0
) -> TestRun:
    """Run ``test_ids`` (all tests when empty) of the checkout at ``workdir`` in ``env``."""
    workdir = Path(workdir)
    with tempfile.TemporaryDirectory(prefix="envgym-junit-") as scratch:
        reports = Path(scratch)
        argv = [
            *env.recipe.test_command,
            "-p",
            "no:cacheprovider",
            "-o",
            "junit_family=xunit2",
            "-o",
            "junit_logging=no",
            f"--junitxml={JAIL_REPORT_DIR}/{REPORT}",
            "--continue-on-collection-errors",
            "-q",
            *(["--", *test_ids] if test_ids else []),
        ]
        result = run_in(
            env,
            workdir,
            argv,
            timeout_s=timeout_s,
            extra_mounts=[Mount(reports, JAIL_REPORT_DIR, writable=True)],
        )
        return judge(result, reports, workdir)


def judge(
    result: CommandResult, reports: Path, workdir: Path, *, max_bytes: int = MAX_REPORT_BYTES
) -> TestRun:
    """The :class:`TestRun` of a finished pytest command whose JUnit report the jail wrote to
    ``reports/report.xml`` (read here with ``O_NOFOLLOW``, streaming, at most ``max_bytes``)."""
    took = round(result.duration_s, 3)
    if result.timed_out or result.returncode is None:
        return _judge(result, None, workdir)
    try:
        fd, size = open_regular(reports, REPORT)
    except FileNotFoundError:
        return _judge(result, None, workdir)
    except OSError as err:  # a link, a FIFO, a directory: never read, never a pass
        return TestRun(
            "crashed",
            {},
            f"the JUnit report was not a regular file ({err}); not read\n{_tail(result)}",
            took,
        )
    with os.fdopen(fd, "rb") as file:
        if size > max_bytes:
            return TestRun("report_too_large", {}, f"the JUnit report is {size} bytes, over the {max_bytes}-byte "
                           "limit: it was not read and the run counts as failed (run fewer tests, or make "
                           f"them print less)\n{_tail(result)}", took)  # fmt: skip
        chunks = iter(lambda: file.read(CHUNK_BYTES), b"")
        return _judge(result, _capped(chunks, max_bytes), workdir)


def _capped(chunks: Iterator[bytes], max_bytes: int) -> Iterator[bytes]:
    """``chunks`` until ``max_bytes`` in all (a report that grows while it is read stops there)."""
    left = max_bytes
    for chunk in chunks:
        if left <= 0:
            return
        yield chunk[:left]
        left -= len(chunk)


def _judge(result: CommandResult, report: Iterable[bytes] | None, workdir: Path) -> TestRun:
    took = round(result.duration_s, 3)
    tail = _tail(result)
    if result.timed_out:
        return TestRun(
            "timeout",
            {},
            f"{result.error or 'timeout'}; the whole test run was killed\n{tail}",
            took,
        )
    if result.returncode is None:
        return TestRun("crashed", {}, f"the test command did not run: {result.error}\n{tail}", took)
    rc = result.returncode
    if report is None:
        status = "no_tests" if rc == 5 else "collection_error" if rc in (2, 4) else "crashed"
        return TestRun(status, {}, f"pytest exited {rc} without a JUnit report\n{tail}", took)
    try:
        outcomes = parse_junit_chunks(report, repo_dir=workdir)
    except JunitError as exc:
        return TestRun("crashed", {}, f"pytest exited {rc}: {exc}\n{tail}", took)
    broken = collection_errors(outcomes)
    tests = test_outcomes(outcomes)
    if broken:
        return TestRun(
            "collection_error",
            outcomes,
            f"modules that failed to collect: {', '.join(broken)}\n{tail}",
            took,
        )
    if rc == 5 or not tests:
        return TestRun("no_tests", outcomes, f"no tests ran (pytest exit {rc})\n{tail}", took)
    if rc in (2, 4):
        return TestRun(
            "collection_error", outcomes, f"pytest was interrupted (exit {rc})\n{tail}", took
        )
    if rc not in (0, 1):
        return TestRun(
            "crashed", outcomes, f"pytest exited {rc} (internal error or killed)\n{tail}", took
        )
    summary = next((line for line in reversed(result.stdout.splitlines()) if line.strip()), "")
    return TestRun("ok", outcomes, summary.strip("= "), took)


def _tail(result: CommandResult, chars: int = 3000) -> str:
    text = result.stdout + ("\n" + result.stderr if result.stderr.strip() else "")
    return text[-chars:].strip()


def packaging_version(repo_dir: Path) -> str:
    """A version for instances without one: a digest of the packaging files' contents."""
    files = sorted(
        {
            p.relative_to(repo_dir).as_posix()
            for pattern in PACKAGING
            for p in repo_dir.glob(pattern)
        }
    )
    digest = hashlib.sha256()
    for rel in files:  # the repository is input: a link among them is skipped, never followed
        try:
            data = read_regular(repo_dir, rel, max_bytes=MAX_REPORT_BYTES)
        except OSError:
            continue
        digest.update(rel.encode() + b"\0" + data + b"\0")
    return "deps-" + digest.hexdigest()[:12]


def validate_instance(
    instance: SweInstance,
    *,
    backend: str = "bwrap",
    repeats: int = 2,
    model: RepairModel | None = None,
    scope: str = "suite",
    timeout_s: float = 900.0,
    max_repairs: int = 3,
) -> ValidationReport:
    """Check out the base, set up the env, run the tests with the test_patch, then with the gold
    patch too, ``repeats`` times each; accept iff F2P ≥ 1 and P2F = 0 after flaky exclusion (and
    the instance's own FAIL_TO_PASS / PASS_TO_PASS lists, when given, agree)."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    if scope not in ("suite", "touched"):
        raise ValueError(f"scope must be 'suite' or 'touched', got {scope!r}")
    timings: dict[str, float] = {}
    runs: list[TestRun] = []

    def verdict(status: str, reason: str, setup: SetupResult | None = None) -> ValidationReport:
        return ValidationReport(
            False, status, reason, (), (), (), (), tuple(runs), setup, instance, timings
        )

    scratch = Path(tempfile.mkdtemp(prefix="envgym-validate-"))
    try:
        started = time.monotonic()
        try:
            workspace = checkout(instance, instance.base_commit, scratch / "repo")
        except GitError as exc:
            return verdict("checkout_failed", f"checkout of {instance.base_commit}: {exc}")
        version = instance.version or packaging_version(workspace)
        setup = ensure_env(
            workspace,
            repo_key=instance.repo_url or instance.repo,
            version=version,
            backend=backend,
            model=model,
            max_repairs=max_repairs,
        )
        timings["setup_s"] = round(time.monotonic() - started, 3)
        if not setup.ok or setup.env is None:
            return verdict("setup_failed", f"environment setup failed: {setup.reason}", setup)
        ids = select_test_files(changed_files(instance.test_patch)) if scope == "touched" else []
        if scope == "touched" and not ids:
            return verdict(
                "invalid_run", "scope 'touched': the test_patch touches no test file", setup
            )
        sides: dict[str, list[Mapping[str, str]]] = {}
        for side, patch in (("base", instance.test_patch), ("gold", instance.patch)):
            # an empty test_patch (a synthesized bug: the deciding tests exist already) is nothing
            # to apply; an empty gold patch is still refused (it fixes nothing)
            applied = apply_patch(workspace, patch) if patch.strip() or side == "gold" else None
            if applied is not None and not applied.ok:
                name = "test_patch" if side == "base" else "gold patch"
                runs.append(
                    TestRun("patch_failed", {}, f"{name} does not apply: {applied.reason}", 0.0)
                )
                return verdict("patch_failed", f"{name} does not apply: {applied.reason}", setup)
            started = time.monotonic()
            for attempt in range(repeats):
                run = run_tests(workspace, setup.env, ids, timeout_s=timeout_s)
                runs.append(run)
                if run.status not in ("ok", "collection_error"):
                    return verdict(
                        "invalid_run",
                        f"{side} run {attempt + 1}: {run.status}: "
                        f"{run.detail.splitlines()[0] if run.detail else ''}",
                        setup,
                    )
                sides.setdefault(side, []).append(run.outcomes)
            timings[f"{side}_runs_s"] = round(time.monotonic() - started, 3)
        found = classify(sides["base"], sides["gold"])
        problems = []
        if not found.fail_to_pass:
            problems.append("no FAIL_TO_PASS test (the gold patch fixes no failing test)")
        if found.pass_to_fail:
            problems.append(f"PASS_TO_FAIL: {', '.join(found.pass_to_fail[:20])}")
        mismatch = check_expected(found, instance.fail_to_pass, instance.pass_to_pass)
        if mismatch:
            problems.append(mismatch)
        accepted = not problems
        filled = instance
        unrelated: list[str] = []
        if accepted:
            filled = replace(
                instance,
                fail_to_pass=instance.fail_to_pass or found.fail_to_pass,
                pass_to_pass=instance.pass_to_pass or found.pass_to_pass,
                version=version,
            )
            started = time.monotonic()
            filled, unrelated = _separate_unrelated(
                filled, setup.env, ids, scratch, runs, timeout_s
            )
            timings["separate_s"] = round(time.monotonic() - started, 3)
        reason = "; ".join(problems) or (
            f"{len(found.fail_to_pass)} FAIL_TO_PASS, {len(found.pass_to_pass)} "
            f"PASS_TO_PASS, {len(found.flaky)} flaky excluded"
        )
        reason += "".join(f"; set aside {UNRELATED}[{path}]" for path in unrelated)
        return ValidationReport(
            accepted,
            "accepted" if accepted else "rejected",
            reason,
            found.fail_to_pass,
            found.pass_to_pass,
            found.pass_to_fail,
            found.flaky,
            tuple(runs),
            setup,
            filled,
            timings,
            tuple(unrelated),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _separate_unrelated(
    instance: SweInstance,
    env: PythonEnv,
    ids: Sequence[str],
    scratch: Path,
    runs: list[TestRun],
    timeout_s: float,
) -> tuple[SweInstance, list[str]]:
    """``instance`` with its unrelated gold files taken out (module docstring), and their paths.

    Each try is one run on a fresh checkout of base + test_patch + the gold patch without one
    file.  After a file goes, every remaining one is tried again (two files that each fix the bug
    alone are each unneeded only while the other stays), so at the end no single file named by
    ``removable_paths`` can go: exactly what check's ``partial_fix`` exploits try.  A try that
    does not run cleanly keeps the file (it counts as needed).
    """
    patch, dropped, needed = instance.patch, list[str](), set[str]()
    while todo := [p for p in removable_paths(patch) if p not in needed]:
        path, variant = todo[0], without_path(patch, todo[0])
        tree = scratch / f"without-{len(runs)}"
        try:
            checkout(instance, instance.base_commit, tree)
            applied = [
                apply_patch(tree, text) for text in (instance.test_patch, variant) if text.strip()
            ]
        except GitError as exc:
            applied = [PatchResult(False, str(exc))]
        run = (
            run_tests(tree, env, ids, timeout_s=timeout_s)
            if all(a.ok for a in applied)
            else TestRun("patch_failed", {}, f"the gold patch without {path} does not apply", 0.0)
        )
        shutil.rmtree(tree, ignore_errors=True)
        runs.append(run)
        if run.status in ("ok", "collection_error") and still_solves(
            run.outcomes, instance.fail_to_pass, instance.pass_to_pass
        ):
            patch, needed = variant, set()
            dropped.append(path)
        else:
            needed.add(path)
    if not dropped:
        return instance, []
    aside = "".join(s.text for s in parse_patch(instance.patch) if s.path in dropped)
    return replace(
        instance, patch=patch, metadata={**instance.metadata, "unrelated_patch": aside}
    ), dropped
