"""A wheel built from the repository works where the checkout is not: it holds every data file
the packages read (the MCP suite's tasks and initial states among them), and, installed into a
fresh venv, ``envgym list``, ``show`` and ``check`` work for one env of every registered family,
run from a folder outside the checkout.

Nothing is downloaded: the wheel is built without build isolation (the venv's setuptools) and
installed with ``--no-deps``; its dependencies (torch…) are the main venv's, reached through a
``.pth`` line naming its site-packages.  A plain path line does not run that folder's own
``.pth`` files, so the main venv's editable envgym (the checkout) stays out of sight.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from test_make_keywords import FAMILY_ENVS

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[1]
# One env per family of the ``envgym.envs`` entry points (test_make_keywords checks the list is
# complete), with what its check must print.  τ²'s mock domain carries a task a do-nothing agent
# passes, which its check names as a problem (exit 1); the oracle's pass line is what is asserted.
CHECKS = {
    "trip-planning-v0": "PASSED",
    "code-interpreter-v0": "PASSED",
    "retail-orders-v0": "PASSED",
    "meeting-scheduling-v0": "PASSED",
    "shipment-logistics-v0": "PASSED",
    "search-qa-v0": "PASSED",
    "tau2-mock-v0": "9/9 tasks pass the gold check",
    "mcp-suite-filesystem-v0": "PASSED: 7/7 tasks pass",
    "mcp-suite-git-v0": "PASSED: 7/7 tasks pass",
    "mcp-suite-sqlite-v0": "PASSED: 7/7 tasks pass",
}
# swe-v0 is checked on instances (``envgym check swe:PATH``, below); ``envgym show`` takes
# bundle-backed envs only, and swe-v0 has no bundle (an instance is given to ``make``).
LISTED = [*CHECKS, "swe-v0"]
# harbor:PATH is a scheme, not a listed id: shown and checked on the installed dataset (below).
SCHEMES = ["harbor"]
# Not part of a source tree's data: caches and build outputs.
SKIP_DIRS = {"__pycache__", ".git", "build", "dist"}


def _package_roots() -> list[Path]:
    """The top-level package folders pyproject's ``packages.find`` includes."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(
        d
        for d in ROOT.iterdir()
        if (d / "__init__.py").is_file() and any(fnmatch.fnmatch(d.name, p) for p in patterns)
    )


def source_files() -> list[str]:
    """Every file under the package folders, as wheel paths (caches and hidden folders left out)."""
    found: list[str] = []
    for root in _package_roots():
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
            found += [(Path(folder) / f).relative_to(ROOT).as_posix() for f in files]
    return sorted(found)


def _copy_source(dest: Path) -> Path:
    """The checkout's pyproject, README, LICENSE and package folders: a build leaves its build/
    and egg-info here, not in the checkout another test may be reading."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns(*SKIP_DIRS, "*.pyc")
    for root in _package_roots():
        shutil.copytree(root, dest / root.name, ignore=ignore, symlinks=True)
    return dest


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float):
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the wheel, the fresh venv it is installed in, the environment to run that venv with)."""
    base = tmp_path_factory.mktemp("wheel")
    src = _copy_source(base / "src")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    done = _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(base / "out"), str(src)],
        base, env, 600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "Deprecat" not in said and "BuildBackendWarning" not in said, said  # e.g. license
    (wheel,) = (base / "out").glob("envgym-*.whl")

    venv = base / "venv"
    done = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, env, 120)
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        base, env, 60,
    ).stdout.strip()  # fmt: skip
    # after the venv's own site-packages: the wheel's envgym is found first, torch & co. here
    main_site = sysconfig.get_paths()["purelib"]
    Path(purelib, "zz_main_venv.pth").write_text(main_site + "\n")
    done = _run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        base, env, 600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    tau2 = env.get("ENVGYM_TAU2_PYTHON") or str(ROOT / ".venv-tau2" / "bin" / "python")
    env["ENVGYM_TAU2_PYTHON"] = tau2  # τ²'s interpreter lives beside the checkout, not the wheel
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return wheel, venv, env


def test_every_family_is_run() -> None:
    ids = {
        env_id.partition(":")[0] if ":" in env_id else env_id for env_id, _ in FAMILY_ENVS.values()
    }
    assert ids <= {*LISTED, *SCHEMES}


def test_the_wheel_holds_every_file_of_the_packages(built) -> None:
    wheel, _, _ = built
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = source_files()
    data = [f for f in wanted if not f.endswith(".py")]
    # the walk sees the suite
    assert any(f.startswith("envgym/envs/mcp_suite/tasks/") for f in data)
    assert any(f.startswith("envgym/envs/mcp_suite/initial_state/") for f in data)
    missing = [f for f in wanted if f not in names]
    assert not missing, f"{len(missing)} files missing from the wheel, e.g. {missing[:10]}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_the_wheel_installs_one_top_level_name(built, tmp_path: Path) -> None:
    """Only ``envgym``: the rooms live under it, since ``envs``, ``tools``, ``trainer``,
    ``kernels`` and ``benchmarks`` are names of unrelated PyPI distributions."""
    wheel, venv, env = built
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if ".dist-info/" not in n}
    assert tops == {"envgym"}, sorted(tops)
    code = (
        "import importlib.metadata as m; print(m.distribution('envgym').read_text('top_level.txt'))"
    )
    done = _run([str(venv / "bin" / "python"), "-c", code], tmp_path, env, 120)
    assert done.returncode == 0 and done.stdout.split() == ["envgym"], done.stdout + done.stderr


def test_the_installed_wheel_is_what_runs(built, tmp_path: Path) -> None:
    _, venv, env = built
    code = (
        "import envgym, envgym.envs.mcp_suite.layout as l; "
        "print(envgym.__file__); print(l.TASKS_DIR); "
        "print(sum(len(l.load_category(s, c)) for s, c in l.categories())); "
        "print(len(list(l.TASKS_DIR.rglob('__pycache__'))))"
    )
    done = _run([str(venv / "bin" / "python"), "-c", code], tmp_path, env, 120)
    assert done.returncode == 0, done.stderr
    envgym_file, tasks_dir, n_tasks, n_caches = done.stdout.split()
    site = str(venv / "lib")
    assert envgym_file.startswith(site) and tasks_dir.startswith(site), done.stdout
    # pip byte-compiled verify.py & co. into __pycache__ folders beside the tasks: not tasks
    assert int(n_caches) > 0 and int(n_tasks) == 21, done.stdout


@pytest.mark.timeout(300)
def test_list_and_show_every_family_outside_the_checkout(built, tmp_path: Path) -> None:
    _, venv, env = built
    envgym = str(venv / "bin" / "envgym")
    listed = _run([envgym, "list"], tmp_path, {**env, "COLUMNS": "300"}, 120)
    assert listed.returncode == 0, listed.stderr
    for env_id in LISTED:
        assert env_id in listed.stdout, f"{env_id} not listed:\n{listed.stdout}"
    for env_id in CHECKS:
        shown = _run([envgym, "show", env_id], tmp_path, env, 120)
        assert shown.returncode == 0, f"show {env_id}: {shown.stdout[-2000:]}{shown.stderr[-2000:]}"


@pytest.mark.timeout(3000)
@pytest.mark.parametrize("env_id", sorted(CHECKS))
def test_check_every_family_outside_the_checkout(built, tmp_path: Path, env_id: str) -> None:
    _, venv, env = built
    done = _run([str(venv / "bin" / "envgym"), "check", env_id], tmp_path, env, 900)
    out = " ".join((done.stdout + done.stderr).split())
    assert CHECKS[env_id] in out, f"check {env_id} (rc {done.returncode}): {out[-3000:]}"
    if CHECKS[env_id] == "PASSED":
        assert done.returncode == 0, out[-3000:]


@pytest.mark.timeout(900)
def test_check_swe_instances_outside_the_checkout(built, tmp_path: Path) -> None:
    from envgym.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap unavailable (the SWE check's default backend)")
    from swe_fixtures import make_synth_history, private_cache

    from envgym.envs.swe.instance import write_instances
    from envgym.envs.swe.miner import mine
    from envgym.envs.swe.validation import validate_instance

    _, venv, env = built
    with private_cache(tmp_path / "cache") as cache:  # the instance's environment is built here
        shas = make_synth_history(tmp_path / "calc")
        by_commit = {c.metadata["commit"]: c for c in mine(str(tmp_path / "calc")).candidates}
        report = validate_instance(by_commit[shas["bugfix"]])
        assert report.accepted, report.reason
    path = write_instances(tmp_path / "tasks.jsonl", [report.instance])
    argv = [str(venv / "bin" / "envgym"), "check", f"swe:{path}", "--json", "--reruns", "1"]
    done = _run(argv, tmp_path, {**env, "ENVGYM_CACHE": str(cache)}, 800)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    payload = json.loads(done.stdout.strip().splitlines()[-1])
    assert payload["passed"] and payload["instances"][0]["gold_rewards"] == [1.0]


@pytest.mark.timeout(600)
def test_show_and_check_the_installed_harbor_dataset(built, tmp_path: Path) -> None:
    _, venv, env = built
    code = (
        "import envgym.envs.harbor as h, pathlib; "
        "print(pathlib.Path(h.__file__).parent / 'dataset')"
    )
    found = _run([str(venv / "bin" / "python"), "-c", code], tmp_path, env, 120)
    dataset = Path(found.stdout.strip())
    assert dataset.is_relative_to(venv) and (dataset / "word-count" / "task.toml").is_file()
    target = f"harbor:{dataset}"
    envgym = str(venv / "bin" / "envgym")
    shown = _run([envgym, "show", target], tmp_path, {**env, "COLUMNS": "300"}, 120)
    assert shown.returncode == 0 and "word-count" in shown.stdout, shown.stdout + shown.stderr
    done = _run([envgym, "check", target], tmp_path, {**env, "COLUMNS": "300"}, 500)
    assert done.returncode == 0 and "word-count" in done.stdout, (done.stdout + done.stderr)[-3000:]
