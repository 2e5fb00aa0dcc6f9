"""SWE-smith-style synthesis: plant a bug that existing tests catch; the fix is the gold patch.

Inspired by SWE-smith (Yang et al., 2025): instead of mining issue–PR pairs, break a working
repository on purpose.  Given a repository whose environment ``ensure_env`` can build:

1. **Local copy.** The repository is cloned into ``workdir`` (default: the envgym cache), where
   every synthesized commit lives on its own branch ``envgym-smith/<instance id>``; the user's
   repository and branches are never written.  The copy's path is the instances' ``repo``.
2. **Trace.** The suite runs once in the jail with ``smith_probe`` (a pytest plugin): per test,
   its outcome and the repository functions it called.  A function is a candidate when a passing
   test ran it; its "covering tests" are those passing tests.
3. **Mutate.** Candidates are shuffled with ``random.Random(seed)`` (functions first, then each
   function's ``mutations.mutations``), one mutation of one function at a time, round-robin over
   functions.  A mutation is kept only if at least one covering test stops passing when the
   covering tests run with it applied (``breaks no passing test`` otherwise).
4. **Emit.** The mutated tree is committed (fixed author dates: same seed → same shas) on top of
   the upstream commit; ``base_commit`` is that commit, ``patch`` the reverse diff (the fix),
   ``test_patch`` empty (the tests already exist), and the problem statement comes from the broken
   tests' names and messages (``smith_statement``: template, or a ``describe`` hook).
5. **Validate.** ``validate_instance`` runs the whole suite on both sides; only accepted instances
   are returned, with its FAIL_TO_PASS (the tests the bug breaks) and PASS_TO_PASS (every other
   test that passes on both sides: a fix that breaks something elsewhere is not a fix).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.cache import cache_root
from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.mutations import FunctionSite, Mutation, functions, mutations
from envgym.envs.swe.pyenv import JAIL_REPO, PythonEnv, command_env, run_in
from envgym.envs.swe.repair import RepairModel
from envgym.envs.swe.repo import GitError, git, is_test_file, open_source, resolve_source
from envgym.envs.swe.setup_agent import ensure_env
from envgym.envs.swe.smith_statement import Describer, FailedTest, write_statement
from envgym.envs.swe.validation import ValidationReport, packaging_version, validate_instance
from envgym.sandbox.command_jail import Mount
from envgym.state import chown_tree

PROBE = Path(__file__).with_name("smith_probe.py")
JAIL_PROBE_DIR, JAIL_OUT_DIR = "/envgym-smith", "/envgym-smith-out"
BRANCH_PREFIX = "envgym-smith/"
MAX_PROBE_BYTES = 256 * 1024 * 1024
MAX_SOURCE_BYTES = 16 * 1024 * 1024
_NOT_SOURCE = re.compile(
    r"(^|/)(conftest|setup|noxfile|fabfile)\.py$|^(docs?|examples?|benchmarks?)/"
)


@dataclass(frozen=True)
class SmithResult:
    instances: tuple[SweInstance, ...]
    rejected: tuple[tuple[str, str], ...]  # (candidate — a mutation, or "(repository)", reason)


@dataclass(frozen=True)
class Probe:
    status: str  # "ok" | "timeout" | "crashed"
    tests: dict[str, dict[str, Any]]  # node id -> {"outcome", "message", "functions"}
    duration_s: float
    detail: str


def smith(
    repo: str | Path,
    *,
    n: int = 1,
    seed: int = 0,
    backend: str = "bwrap",
    rev: str = "HEAD",
    workdir: Path | None = None,
    describe: Describer | None = None,
    max_tries: int | None = None,
    repeats: int = 2,
    timeout_s: float = 900.0,
    model: RepairModel | None = None,
) -> SmithResult:
    """Up to ``n`` validated instances from ``repo`` (a local path or URL); never raises for what
    the repository does — a repository that cannot be set up or traced is one ``rejected`` entry."""
    if rev.startswith("-") or not rev.isprintable():
        raise GitError(f"not a revision: {rev[:100]!r}")
    source = resolve_source(repo)
    # The user's repository is read through a view: its own config never runs anything here.
    with open_source(source) as view:
        base = git(
            ["rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}"], cwd=view
        ).stdout.strip()
        copy = _local_copy(source, view, base, workdir)
    version = packaging_version(copy)
    setup = ensure_env(copy, repo_key=str(copy), version=version, backend=backend, model=model)
    if not setup.ok or setup.env is None:
        return SmithResult((), (("(repository)", f"environment setup failed: {setup.reason}"),))
    trace = probe(copy, setup.env, (), trace=True, timeout_s=timeout_s)
    if trace.status != "ok":
        return SmithResult((), (("(repository)", f"trace run {trace.status}: {trace.detail}"),))
    covering = _covering(trace)
    if not covering:
        return SmithResult((), (("(repository)", "no source function is run by a passing test"),))
    # A mutation can turn a loop infinite: its run gets a few times the whole suite's time.
    mutant_timeout = min(timeout_s, max(30.0, 3 * trace.duration_s + 10.0))
    date = _git(copy, ["show", "-s", "--no-show-signature", "--format=%cI", base]).stdout.strip()
    name = _slug(source)
    instances: list[SweInstance] = []
    rejected: list[tuple[str, str]] = []
    tries = max_tries if max_tries is not None else max(10, 5 * n)
    for mutation, tests in _candidates(copy, covering, seed):
        if len(instances) >= n or tries <= 0:
            break
        tries -= 1
        made, why = try_mutation(
            copy,
            setup.env,
            base,
            date,
            name,
            version,
            seed,
            mutation,
            tests,
            describe,
            mutant_timeout,
        )
        if made is None:
            rejected.append((mutation.describe(), why))
            continue
        report = _validate(made, backend=backend, repeats=repeats, model=model, timeout_s=timeout_s)
        if report[0] is None:
            rejected.append((mutation.describe(), f"validation: {report[1]}"))
        else:
            instances.append(report[0])
    return SmithResult(tuple(instances), tuple(rejected))


def _git(copy: Path, args: list[str], **kwargs: Any) -> Any:
    """Git in the smith copy, its git dir named explicitly (never one found by walking up).

    Jails run the project's tests in the copy with its ``.git`` mounted read-only (`probe`), so
    its config stays the one our clone wrote.
    """
    env = {"GIT_DIR": str(copy / ".git"), "GIT_WORK_TREE": str(copy), **kwargs.pop("env", {})}
    return git(args, cwd=copy, env=env, **kwargs)


def _local_copy(source: Path, view: Path, base: str, workdir: Path | None) -> Path:
    """A clone of ``source`` (through its ``view``) with ``base`` checked out (detached),
    reused across calls."""
    if workdir is None:
        digest = hashlib.sha256(str(source).encode()).hexdigest()[:12]
        workdir = cache_root() / "swe" / "smith" / f"{_slug(source)}-{digest}"
    workdir = Path(workdir)
    dot_git = workdir / ".git"
    if dot_git.is_symlink() or not dot_git.is_dir():
        if workdir.exists() or workdir.is_symlink():
            shutil.rmtree(
                workdir
            ) if workdir.is_dir() and not workdir.is_symlink() else workdir.unlink()
        workdir.parent.mkdir(parents=True, exist_ok=True)
        git(
            [
                "clone",
                "--quiet",
                "--no-hardlinks",
                "--no-checkout",
                "--",
                view.as_uri(),
                str(workdir),
            ]
        )
    if _git(workdir, ["cat-file", "-e", f"{base}^{{commit}}"], check=False).returncode != 0:
        _git(workdir, ["fetch", "--quiet", "--", view.as_uri(), base])
    _git(
        workdir,
        ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--force", "--detach", base],
    )
    _git(workdir, ["clean", "-qfdx"])  # leftovers of an interrupted run
    return workdir


def _slug(source: Path) -> str:
    name = source.name.removesuffix(".git")  # ASCII: it starts instance ids (instance.ID_PATTERN)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).lstrip(".-")[:40] or "repo"


def probe(
    workdir: Path, env: PythonEnv, test_ids: Sequence[str], *, trace: bool, timeout_s: float
) -> Probe:
    """Run ``test_ids`` (all when empty) with ``smith_probe`` loaded; see that module for the output."""
    with tempfile.TemporaryDirectory(prefix="envgym-smith-") as scratch:
        plugin, out = Path(scratch) / "plugin", Path(scratch) / "out"
        plugin.mkdir()
        out.mkdir()
        shutil.copyfile(PROBE, plugin / "envgym_smith_probe.py")
        plugin.chmod(0o755)  # read-only mounts keep their modes: the jail's uid must read them
        (plugin / "envgym_smith_probe.py").chmod(0o644)
        paths = [p for p in command_env(env.recipe).get("PYTHONPATH", "").split(":") if p]
        extra = {
            "PYTHONPATH": ":".join([*paths, JAIL_PROBE_DIR]),
            "ENVGYM_SMITH_TRACE": "1" if trace else "0",
            "ENVGYM_SMITH_OUT": f"{JAIL_OUT_DIR}/probe.json",
        }
        argv = [
            *env.recipe.test_command,
            "-p",
            "no:cacheprovider",
            "-p",
            "envgym_smith_probe",
            "-q",
            "--continue-on-collection-errors",
            "--",
            *test_ids,
        ]
        # The copy's .git read-only: host git runs in the copy, so the tests must not be able
        # to plant a filter, hook or fsmonitor in its config (that would run on the host).
        mounts = [
            Mount(plugin, JAIL_PROBE_DIR),
            Mount(out, JAIL_OUT_DIR, writable=True),
            Mount(workdir / ".git", f"{JAIL_REPO}/.git"),
        ]
        result = run_in(
            env, workdir, argv, timeout_s=timeout_s, extra_env=extra, extra_mounts=mounts
        )
        _reclaim(workdir)
        data = _probe_report(out)
    tail = (result.stdout + result.stderr)[-1500:]
    if result.timed_out:
        return Probe("timeout", {}, result.duration_s, result.error or "timeout")
    if data is None or result.returncode not in (0, 1):
        return Probe("crashed", {}, result.duration_s, f"pytest exited {result.returncode}: {tail}")
    return Probe("ok", data, result.duration_s, "")


def _reclaim(copy: Path) -> None:
    """Take the copy's top folder and ``.git`` back from the jail's uid (a jail hands its writable
    mounts to its uid; ``.git`` was read-only in there, so it is still what we wrote)."""
    if os.geteuid() == 0:  # only root hands mounts to a jail uid (command_io.hand_over)
        os.chown(copy, os.getuid(), os.getgid(), follow_symlinks=False)
        chown_tree(copy / ".git", os.getuid(), os.getgid())


def _probe_report(out: Path) -> dict[str, dict[str, Any]] | None:
    """The probe's per-test entries, or None when its report is absent or malformed.

    The report is the jail's output: a link is not followed, its size is bounded, and only
    entries of the expected shape are kept.
    """
    text = _read_regular(out, "probe.json", MAX_PROBE_BYTES)
    try:
        data = json.loads(text) if text is not None else None
    except (json.JSONDecodeError, RecursionError):
        return None
    tests = data.get("tests") if isinstance(data, dict) else None
    if not isinstance(tests, dict):
        return None
    kept: dict[str, dict[str, Any]] = {}
    for test_id, entry in tests.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("outcome"), str):
            continue
        functions = entry.get("functions")
        message = entry.get("message")
        kept[test_id] = {
            "outcome": entry["outcome"],
            "message": message if isinstance(message, str) else "",
            "functions": [f for f in functions if isinstance(f, str)]
            if isinstance(functions, list)
            else [],
        }
    return kept


def _safe_relpath(path: str) -> bool:
    """A plain path below the repository: relative, no "..", no .git, no empty parts."""
    parts = path.split("/")
    return (
        bool(path)
        and not path.startswith("/")
        and "\0" not in path
        and all(part not in ("", ".", "..") and part.casefold() != ".git" for part in parts)
    )


def _read_regular(root: Path, relpath: str, limit: int) -> str | None:
    """The text of a regular file below ``root``, no link followed at any level; else None."""
    if not _safe_relpath(relpath):
        return None
    *dirs, name = relpath.split("/")
    fds: list[int] = []
    try:
        current = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fds.append(current)
        for part in dirs:
            current = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current
            )
            fds.append(current)
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=current
        )
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENXIO):
            return None
        raise
    finally:
        for opened in fds:
            os.close(opened)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = handle.read(limit + 1)
    return data.decode("utf-8", errors="surrogateescape") if len(data) <= limit else None


def _write_regular(root: Path, relpath: str, text: str) -> None:
    """Replace the regular file ``root/relpath`` (checked by `_read_regular` first) in place."""
    if _read_regular(root, relpath, MAX_SOURCE_BYTES) is None:
        raise OSError(f"{relpath} is not a regular file of the repository")
    fd = os.open(root / relpath, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(text)


def _covering(trace: Probe) -> dict[tuple[str, int], tuple[str, ...]]:
    """``(path, first line)`` of each source function -> the passing tests that ran it."""
    found: dict[tuple[str, int], list[str]] = {}
    for test_id, entry in sorted(trace.tests.items()):
        if entry["outcome"] != "passed":
            continue
        for name in entry["functions"]:
            path, _, line = name.rpartition(":")
            if (
                path.endswith(".py")
                and _safe_relpath(path)
                and line.isdigit()
                and not is_test_file(path)
                and not _NOT_SOURCE.search(path)
            ):
                found.setdefault((path, int(line)), []).append(test_id)
    return {key: tuple(tests) for key, tests in found.items()}


def _candidates(
    copy: Path, covering: dict[tuple[str, int], tuple[str, ...]], seed: int
) -> Iterator[tuple[Mutation, tuple[str, ...]]]:
    """Mutations in seeded order: one per function per round, functions in a shuffled order."""
    rng = random.Random(seed)
    sites: list[tuple[FunctionSite, str]] = []
    for path in sorted({p for p, _ in covering}):
        text = _read_regular(copy, path, MAX_SOURCE_BYTES) or ""
        sites += [(s, text) for s in functions(path, text) if (path, s.first_line) in covering]
    rng.shuffle(sites)
    queues: list[tuple[list[Mutation], tuple[str, ...]]] = []
    for site, text in sites:
        found = mutations(text, site)
        rng.shuffle(found)
        if found:
            queues.append((found, covering[(site.path, site.first_line)]))
    while queues:
        for queue, tests in queues:
            yield queue.pop(0), tests
        queues = [(q, t) for q, t in queues if q]


def try_mutation(
    copy: Path,
    env: PythonEnv,
    base: str,
    date: str,
    name: str,
    version: str,
    seed: int,
    mutation: Mutation,
    tests: tuple[str, ...],
    describe: Describer | None,
    timeout_s: float,
) -> tuple[SweInstance | None, str]:
    """Apply ``mutation``, run its covering tests, and commit it as an instance if any broke."""
    original = _read_regular(copy, mutation.path, MAX_SOURCE_BYTES)
    if original is None:  # the tests replaced it with a link or something else: not ours to write
        return None, "the source file is no longer a regular file of the repository"
    mutated = mutation.apply(original)
    try:
        compile(mutated, mutation.path, "exec")
    except (SyntaxError, ValueError) as exc:
        return None, f"does not compile: {exc}"
    _write_regular(copy, mutation.path, mutated)
    try:
        run = probe(copy, env, tests, trace=False, timeout_s=timeout_s)
    finally:
        _write_regular(copy, mutation.path, original)
    if run.status != "ok":
        return None, f"covering tests {run.status} under the mutation"
    broken = [t for t in tests if run.tests.get(t, {}).get("outcome") != "passed"]
    if not broken:
        return None, f"breaks no passing test ({len(tests)} covering tests still pass)"
    instance_id = f"{name}__smith-{mutation.digest()[:10]}"
    sha = _commit(copy, base, date, mutation.path, mutated, instance_id)
    patch = _git(copy, ["diff", "--no-color", "--no-ext-diff", "--no-textconv", sha, base]).stdout
    failures = [
        FailedTest(t, run.tests.get(t, {}).get("message") or "not run (collection failed?)")
        for t in broken
    ]
    fix_lines = [
        line[1:]
        for line in patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    statement, how = write_statement(name, failures, fix_lines, describe)
    return SweInstance(
        instance_id=instance_id,
        repo=str(copy),
        base_commit=sha,
        problem_statement=statement,
        patch=patch,
        test_patch="",
        version=version,
        created_at=date,
        metadata={
            "source": "smith",
            "seed": seed,
            "upstream_commit": base,
            "branch": BRANCH_PREFIX + instance_id,
            "mutation": mutation.kind,
            "path": mutation.path,
            "function": mutation.function,
            "line": mutation.line,
            "broken_tests": broken,
            "statement": how,
        },
    ), ""


def _commit(copy: Path, base: str, date: str, path: str, text: str, instance_id: str) -> str:
    """Commit ``text`` at ``path`` on top of ``base`` as branch envgym-smith/<id>; back to ``base``.

    The message is neutral (the agent's checkout shows it), and both dates are the upstream
    commit's, so the same mutation gives the same sha on every run.
    """
    dates = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    try:
        _write_regular(copy, path, text)
        _git(copy, ["add", "--", path])
        _git(copy, ["commit", "--quiet", "--no-verify", "-m", "Synthesized task base"], env=dates)
        sha = _git(copy, ["rev-parse", "HEAD"]).stdout.strip()
        _git(copy, ["update-ref", f"refs/heads/{BRANCH_PREFIX}{instance_id}", sha])
    finally:
        _git(
            copy,
            ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--force", "--detach", base],
        )
    return sha


def validate(instance: SweInstance, **options: Any) -> ValidationReport:
    """``validate_instance`` for a synthesized instance (its empty ``test_patch`` applies as nothing)."""
    return validate_instance(instance, **options)


def _validate(instance: SweInstance, **options: Any) -> tuple[SweInstance | None, str]:
    try:
        report = validate(instance, **options)
    except GitError as exc:
        return None, f"git: {exc}"
    return (report.instance, "") if report.accepted else (None, report.reason)
