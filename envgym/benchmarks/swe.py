"""``envgym bench swe``: environment setup on real sdists, and what validation costs over raw tests.

* ``setup_success_rate`` — the setup agent (``ensure_env``, rules only, no model) on pure-Python
  packages from the package registry: each pinned sdist is downloaded (``pip download
  --no-binary :all: --no-deps``), unpacked, committed into a fresh git repository and set up in an
  empty envgym cache; success = environment built and ≥ 1 test collected.  Target ≥ 0.9.  One
  ``setup.<package>`` row per package (1 = built) with the reason in the note.
* ``validation_time_ratio`` — ``validate_instance`` (through ``smith.validate``) wall time per instance with the repository's
  environment cache warm ÷ the raw test time of the same work: the same pytest command, the same
  number of suite runs (base and gold side × ``repeats``), the same venv, run directly on the host
  (no jail, no checkout, no JUnit parsing by us), timed in the same run.  Target ≤ 1.5.
  ``validation_cold_s`` is the first validation of the instance, building its environment
  (a fresh cache key), ``validation_warm_s`` the warm one and ``raw_tests_s`` the baseline.
  Instances come from ``envgym.envs.swe.smith`` (seed 0) on the first packages that set up.
* Every metric again with a ``_docker`` suffix when the Docker engine is up (``--sandbox docker``
  backend); bwrap always.

``--quick``: 2 packages, 1 instance, bwrap only (a smoke run of the same code: the Docker
backend's setup and validation are the same functions with another jail, and a second backend
doubled the quick run's minutes).  sdists are kept in ``<envgym cache>/swe/bench-sdists``;
everything else (environments, smith copies) lives in a temporary cache removed at the end.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from envgym.bench import BenchResult
from envgym.cache import cache_root
from envgym.envs.swe.instance import SweInstance
from envgym.envs.swe.pyenv import PythonEnv
from envgym.envs.swe.repo import apply_patch, checkout, git
from envgym.envs.swe.setup_agent import ensure_env
from envgym.envs.swe.smith import smith, validate
from envgym.envs.swe.validation import packaging_version

# Small pure-Python packages whose sdists ship their tests (checked with pip download here).
PACKAGES = (
    ("inflection", "0.5.1"),
    ("toml", "0.10.2"),
    ("xmltodict", "1.0.4"),
    ("jmespath", "1.1.0"),
    ("parse", "1.22.4"),
    ("ordered-set", "4.1.0"),
    ("decorator", "5.3.1"),
    ("itsdangerous", "2.2.0"),
    ("idna", "3.20"),
    ("python-slugify", "9.2.0"),
    ("semver", "3.1.1"),
    ("pathspec", "1.1.1"),
    ("more-itertools", "11.2.1"),
    ("boltons", "26.2.0"),
    ("funcy", "2.1"),
    ("packaging", "26.3"),
    ("pyparsing", "3.3.3"),
    ("wcwidth", "0.9.4"),
)
REPEATS = 2  # validate_instance's default: each side's suite runs twice


@dataclass(frozen=True)
class SetupRow:
    package: str
    ok: bool
    seconds: float
    reason: str
    repo: Path | None


def run(quick: bool = False) -> BenchResult:
    console = Console(stderr=True)
    packages = PACKAGES[:2] if quick else PACKAGES
    sdists = {name: _sdist(name, version) for name, version in packages}
    metrics: dict[str, float] = {}
    units: dict[str, str] = {}
    notes: dict[str, str] = {}
    for backend in ("bwrap", *(("docker",) if not quick and _docker_up() else ())):
        suffix = "" if backend == "bwrap" else "_docker"
        with (
            tempfile.TemporaryDirectory(prefix="envgym-bench-swe-") as tmp,
            _cache(Path(tmp) / "cache"),
        ):
            rows = [
                _setup(name, sdists[name], Path(tmp) / "repos", backend) for name, _ in packages
            ]
            _print_rows(console, backend, rows)
            good = [r for r in rows if r.ok]
            metrics[f"setup_success_rate{suffix}"] = len(good) / len(rows)
            units[f"setup_success_rate{suffix}"] = "ratio"
            notes[f"setup_success_rate{suffix}"] = (
                f"target >= 0.9; {len(good)}/{len(rows)} sdists, {backend}"
            )
            metrics[f"setup_mean_s{suffix}"] = statistics.mean(r.seconds for r in rows)
            units[f"setup_mean_s{suffix}"] = "s"
            for row in rows:
                key = f"setup.{row.package}{suffix}"
                metrics[key], units[key] = float(row.ok), "ok"
                notes[key] = f"{row.seconds:.0f} s" + (
                    f"; {row.reason[:160]}" if row.reason else ""
                )
            timing = _validation(good[:1] if quick else good[:3], Path(tmp), backend, console)
            for key, (value, unit, note) in timing.items():
                metrics[key + suffix], units[key + suffix], notes[key + suffix] = value, unit, note
    return BenchResult(benchmark="swe", metrics=metrics, units=units, notes=notes)


def _docker_up() -> bool:
    try:
        from envgym.sandbox.docker_backend import docker_client

        docker_client()
    except Exception:  # noqa: BLE001 — no engine, no image, no SDK: bwrap only
        return False
    return True


@contextmanager
def _cache(folder: Path) -> Iterator[None]:
    """An empty envgym cache: setup is measured from scratch, and nothing is left behind."""
    old = os.environ.get("ENVGYM_CACHE")
    os.environ["ENVGYM_CACHE"] = str(folder)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("ENVGYM_CACHE", None)
        else:
            os.environ["ENVGYM_CACHE"] = old


def _sdist(name: str, version: str) -> Path | str:
    """The sdist's path (downloaded once), or why it could not be had."""
    folder = cache_root() / "swe" / "bench-sdists"
    folder.mkdir(parents=True, exist_ok=True)
    stem = name.replace("-", "_").lower()
    found = [
        p
        for p in folder.iterdir()
        if p.name.lower().replace("-", "_").startswith(f"{stem}_{version}.")
    ]
    if found:
        return found[0]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--dest",
            str(folder),
            f"{name}=={version}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = [
        p
        for p in folder.iterdir()
        if p.name.lower().replace("-", "_").startswith(f"{stem}_{version}.")
    ]
    return (
        found[0] if found else f"pip download failed: {(done.stderr or done.stdout).strip()[-300:]}"
    )


def _repository(sdist: Path, into: Path) -> Path:
    """The sdist unpacked and committed: a real repository (``data`` filter: no links out, no owners)."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as archive:
        top = {m.name.split("/", 1)[0] for m in archive.getmembers()}
        archive.extractall(into, filter="data")
    repo = into / sorted(top)[0]
    git(["init", "--quiet"], cwd=repo)
    git(["add", "-A", "-f"], cwd=repo)
    fixed = "2024-01-01T00:00:00+00:00"
    git(
        ["commit", "--quiet", "-m", f"sdist {sdist.name}"],
        cwd=repo,
        env={"GIT_AUTHOR_DATE": fixed, "GIT_COMMITTER_DATE": fixed},
    )
    return repo


def _setup(name: str, sdist: Path | str, root: Path, backend: str) -> SetupRow:
    if isinstance(sdist, str):
        return SetupRow(name, False, 0.0, sdist, None)
    repo = _repository(sdist, root / name)
    started = time.perf_counter()
    result = ensure_env(repo, repo_key=str(repo), version=packaging_version(repo), backend=backend)
    took = time.perf_counter() - started
    partial = next(
        (n for n in result.recipe.notes if n.startswith("accepted with collection errors")), ""
    )
    return SetupRow(name, result.ok, took, result.reason or partial, repo)


def _print_rows(console: Console, backend: str, rows: list[SetupRow]) -> None:
    table = Table(title=f"envgym bench swe: setup ({backend})")
    for column in ("package", "status", "s", "reason"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.package, "ok" if row.ok else "FAILED", f"{row.seconds:.0f}", row.reason[:200]
        )
    console.print(table)


def _validation(
    rows: list[SetupRow], tmp: Path, backend: str, console: Console
) -> dict[str, tuple[float, str, str]]:
    """Synthesize one instance per repository, then time cold, warm and raw."""
    cold, warm, raw, made = [], [], [], []
    started = time.perf_counter()
    for row in rows:
        assert row.repo is not None
        result = smith(row.repo, n=1, seed=0, backend=backend, workdir=tmp / "smith" / row.package)
        made += list(result.instances)
        if not result.instances:
            console.print(
                f"[yellow]smith made no instance from {row.package}: {result.rejected[-1:]}"
            )
    smith_s = time.perf_counter() - started
    for instance in made:
        # A fresh version is a fresh environment key: the first validation builds the env.
        cold.append(
            _timed_validation(replace(instance, version=instance.version + "-cold"), backend)
        )
        warm.append(_timed_validation(instance, backend))
        env = ensure_env(
            Path(instance.repo), repo_key=instance.repo, version=instance.version, backend=backend
        ).env
        assert env is not None
        raw.append(_raw_tests(instance, env, tmp / "raw"))
    if not made:
        return {"smith_instances": (0.0, "count", "no instance to time validation with")}
    ratio = statistics.mean(warm) / statistics.mean(raw)
    return {
        "validation_time_ratio": (
            ratio,
            "ratio",
            f"target <= 1.5; warm validate_instance / raw pytest, "
            f"{2 * REPEATS} suite runs each, {len(made)} instance(s)",
        ),
        "validation_warm_s": (statistics.mean(warm), "s", "per instance, environment cached"),
        "validation_cold_s": (
            statistics.mean(cold),
            "s",
            "per instance, first: builds the environment",
        ),
        "raw_tests_s": (statistics.mean(raw), "s", "baseline: the same pytest runs, host, no jail"),
        "smith_instances": (
            float(len(made)),
            "count",
            ", ".join(i.instance_id for i in made)[:200],
        ),
        "smith_s": (smith_s, "s", "synthesis incl. setup, trace, mutants, validation"),
    }


def _timed_validation(instance: SweInstance, backend: str) -> float:
    started = time.perf_counter()
    report = validate(instance, backend=backend, repeats=REPEATS)
    took = time.perf_counter() - started
    if not report.accepted:
        raise RuntimeError(f"{instance.instance_id} no longer validates: {report.reason}")
    return took


def _raw_tests(instance: SweInstance, env: PythonEnv, scratch: Path) -> float:
    """The suite runs validation makes, run directly with the env's interpreter on a host checkout.

    The editable install points at the jail's /repo; on the host the checkout's own folder (and its
    ``src``) are put on ``PYTHONPATH`` instead, which is what the jail's install resolves to.
    """
    workspace = checkout(instance, instance.base_commit, scratch / instance.instance_id)
    paths = [str(workspace / "src")] if (workspace / "src").is_dir() else []
    for entry in env.recipe.env.get("PYTHONPATH", "").split(":"):
        if entry:
            paths.append(entry if entry.startswith("/") else str(workspace / entry))
    run_env = {
        "PATH": f"{env.venv / 'bin'}:/usr/bin:/bin",
        "VIRTUAL_ENV": str(env.venv),
        "HOME": str(scratch),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUTF8": "1",
        "LANG": "C.UTF-8",
        **{k: v for k, v in env.recipe.env.items() if k != "PYTHONPATH"},
        "PYTHONPATH": ":".join([str(workspace), *paths]),
    }
    argv = [
        *env.recipe.test_command,
        "-p",
        "no:cacheprovider",
        "-o",
        "junit_family=xunit2",
        f"--junitxml={scratch / 'raw-report.xml'}",
        "--continue-on-collection-errors",
        "-q",
    ]
    total = 0.0
    for side in ("base", "gold"):
        if side == "gold" and not apply_patch(workspace, instance.patch).ok:
            raise RuntimeError(
                f"{instance.instance_id}: gold patch does not apply on the raw checkout"
            )
        for _ in range(REPEATS):
            started = time.perf_counter()
            subprocess.run(argv, cwd=workspace, env=run_env, capture_output=True, timeout=900)
            total += time.perf_counter() - started
    shutil.rmtree(workspace, ignore_errors=True)
    return total
