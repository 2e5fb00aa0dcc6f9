"""How a pure-Python project installs and tests: the ``Recipe``, and its rule-based detection.

Detection only *reads* files (TOML, INI and Python ``ast``, never executing anything from the
repository): the recipe it returns is a list of shell commands that the setup agent then runs
inside a jail.  Every decision is written into ``notes`` so a failed setup can be understood, and
repairs (``envgym/envs/swe/repair.py``) extend the same recipe.
"""

from __future__ import annotations

import ast
import configparser
import hashlib
import json
import re
import shlex
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from envgym.envs.swe.safe_read import read_text_or_none

HOST_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
MAX_READ_BYTES = 4 * 1024**2  # a packaging or test file bigger than this is treated as absent
TEST_EXTRAS = ("test", "tests", "testing")  # preferred; "dev" only when none of them exists
# Flags in a pytest ``addopts`` that fail with "unrecognized arguments" unless a plugin is installed.
ADDOPTS_PLUGINS = {
    "--cov": "pytest-cov",
    "-n": "pytest-xdist",
    "--numprocesses": "pytest-xdist",
    "--dist": "pytest-xdist",
    "--timeout": "pytest-timeout",
    "--benchmark": "pytest-benchmark",
    "--reruns": "pytest-rerunfailures",
    "--mypy": "pytest-mypy",
    "--flake8": "pytest-flake8",
    "--doctest-rst": "pytest-doctestplus",
    "--doctest-plus": "pytest-doctestplus",
    "--randomly": "pytest-randomly",
    "--hypothesis": "hypothesis",
    "--mpl": "pytest-mpl",
}
# ini options that only a plugin knows (pytest warns, and with --strict-config fails, without it).
INI_PLUGINS = {
    "asyncio_mode": "pytest-asyncio",
    "timeout": "pytest-timeout",
    "django_settings_module": "pytest-django",
    "mock_use_standalone_module": "pytest-mock",
}
RECIPE_KEYS = frozenset({"python", "install", "test_command", "test_framework", "env", "notes"})


@dataclass(frozen=True)
class Recipe:
    """How to install a project and run its tests; commands run in the repo with the venv first on PATH."""

    python: str = HOST_PYTHON
    install: tuple[str, ...] = ()
    test_command: tuple[str, ...] = ("python", "-m", "pytest")
    test_framework: str = "pytest"
    env: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Frozen in fact, not only in name: a read-only, ordered copy of env, tuples everywhere.
        object.__setattr__(self, "env", MappingProxyType(dict(sorted(dict(self.env).items()))))
        for name in ("install", "test_command", "notes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_json(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "install": list(self.install),
            "test_command": list(self.test_command),
            "test_framework": self.test_framework,
            "env": dict(self.env),
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recipe:
        unknown = set(data) - RECIPE_KEYS
        if unknown:
            raise ValueError(f"unknown recipe keys: {sorted(unknown)}")
        return cls(
            python=str(data.get("python", HOST_PYTHON)),
            install=tuple(str(c) for c in data.get("install", ())),
            test_command=tuple(
                str(c) for c in data.get("test_command", ("python", "-m", "pytest"))
            ),
            test_framework=str(data.get("test_framework", "pytest")),
            env={str(k): str(v) for k, v in dict(data.get("env", {})).items()},
            notes=tuple(str(n) for n in data.get("notes", ())),
        )

    def key(self) -> str:
        """sha256 of everything that shapes the environment; notes only explain, so they are left out."""
        content = self.to_json()
        del content["notes"]
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def noted(self, *notes: str) -> Recipe:
        return replace(self, notes=self.notes + notes)


def detect_recipe(repo_dir: Path) -> Recipe:
    """Read ``repo_dir``'s packaging and test configuration and decide how to install and test it."""
    repo_dir = Path(repo_dir)
    notes: list[str] = []
    install: list[str] = []
    env: dict[str, str] = {}
    pyproject = _read_toml(repo_dir / "pyproject.toml", notes)
    setup_cfg = _read_ini(repo_dir / "setup.cfg", notes)
    tox_ini = _read_ini(repo_dir / "tox.ini", notes)

    requirements = _requirement_files(repo_dir, notes)
    install += [f"python -m pip install -r {shlex.quote(r)}" for r in requirements]

    tox_deps = _tox_deps(repo_dir, tox_ini, notes)
    nox_deps = _nox_deps(repo_dir, notes)
    extra_deps = [d for d in tox_deps + nox_deps if d not in requirements]
    if extra_deps:
        install.append("python -m pip install " + " ".join(shlex.quote(d) for d in extra_deps))

    project_cmd = _project_install(repo_dir, pyproject, setup_cfg, notes)
    if project_cmd:
        install.append(project_cmd)
    elif (repo_dir / "src").is_dir():
        env["PYTHONPATH"] = "src"  # relative: resolved against the repo (the command's workdir)
        notes.append("no packaging metadata and a src/ folder: PYTHONPATH=src")
    else:
        notes.append(
            "no packaging metadata: tests import from the repo root (python -m pytest puts it on sys.path)"
        )

    framework = _framework(repo_dir, pyproject, setup_cfg, tox_ini, notes)
    plugins = _pytest_plugins(repo_dir, pyproject, setup_cfg, tox_ini, notes)
    test_command = Recipe().test_command
    if "python_files" not in _pytest_config(
        pyproject, setup_cfg, tox_ini, repo_dir
    ) and not _test_files(repo_dir):
        loose = _loose_test_files(repo_dir)
        if loose:  # tests/test.py, tests.py: pytest's default python_files would collect nothing
            test_command = (*test_command, "-o", f"python_files={LOOSE_TEST_FILES}")
            notes.append(
                f"no test_*.py / *_test.py but {loose[0].relative_to(repo_dir)}: python_files={LOOSE_TEST_FILES}"
            )
    # pytest last: a version the project pins in its extras/requirements is already satisfied then.
    install.append("python -m pip install " + " ".join(["pytest", *plugins]))
    notes.append("pytest is always installed (it also collects unittest cases)")
    return Recipe(
        install=tuple(install),
        test_command=test_command,
        test_framework=framework,
        env=env,
        notes=tuple(notes),
    )


def _read(path: Path) -> str | None:
    """A repository file's text, or None when it is missing, a link, not a regular file or over
    MAX_READ_BYTES: the repository is input, and a link in it (``tox.ini -> /root/...``) must not
    put a host file into the recipe, its notes or a repair prompt."""
    return read_text_or_none(path.parent, path.name, max_bytes=MAX_READ_BYTES)


def _read_toml(path: Path, notes: list[str]) -> dict[str, Any]:
    text = _read(path)
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        notes.append(f"{path.name} is not valid TOML ({exc}); ignored")
        return {}


def _read_ini(path: Path, notes: list[str]) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    text = _read(path)
    if text is not None:
        try:
            parser.read_string(text)
        except configparser.Error as exc:
            notes.append(f"{path.name} does not parse ({type(exc).__name__}); ignored")
            return configparser.ConfigParser(interpolation=None)
    return parser


def _requirement_files(repo_dir: Path, notes: list[str]) -> list[str]:
    """Runtime requirements plus test ones; dev ones only when no test file exists; never docs."""
    candidates = sorted(
        {
            p.relative_to(repo_dir).as_posix()
            for pattern in (
                "requirements*.txt",
                "*requirements*.txt",
                "requirements/*.txt",
                "tests/requirements*.txt",
            )
            for p in repo_dir.glob(pattern)
            if p.is_file()
        }
    )
    runtime = [c for c in candidates if Path(c).stem in ("requirements", "base", "install", "main")]
    tests = [c for c in candidates if "test" in c.lower() and c not in runtime]
    dev = [c for c in candidates if "dev" in Path(c).stem.lower() and c not in runtime + tests]
    chosen = runtime + (tests or dev)
    skipped = [c for c in candidates if c not in chosen]
    if chosen:
        notes.append(f"requirement files installed: {', '.join(chosen)}")
    if skipped:
        notes.append(
            f"requirement files not installed (docs/other or dev beside test): {', '.join(skipped)}"
        )
    return chosen


def _tox_deps(repo_dir: Path, tox_ini: configparser.ConfigParser, notes: list[str]) -> list[str]:
    """``[testenv] deps`` lines that are plain requirements; tox substitutions are skipped."""
    if not tox_ini.has_option("testenv", "deps"):
        return []
    deps: list[str] = []
    for line in tox_ini.get("testenv", "deps").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or "{" in line or line.startswith(("-c", "-e", ".")):
            continue
        if line.startswith("-r"):
            continue  # requirement files are found by name (_requirement_files)
        if re.match(r"^[\w.\-!,{}]+:\s", line):
            continue  # a tox factor-conditional line ("py38: mock", "unit-!py315t: matplotlib")
        deps.append(line)
    if deps:
        notes.append(f"tox.ini [testenv] deps: {', '.join(deps)}")
    if tox_ini.has_option("testenv", "commands"):
        notes.append(
            f"tox.ini test commands (for reference, not run): {tox_ini.get('testenv', 'commands').strip()!r}"
        )
    return deps


def _nox_deps(repo_dir: Path, notes: list[str]) -> list[str]:
    """String literals passed to ``session.install(...)`` in noxfile.py (read with ast, not run)."""
    noxfile = repo_dir / "noxfile.py"
    text = _read(noxfile)
    if text is None:
        return []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        notes.append("noxfile.py does not parse; ignored")
        return []
    deps: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "install"
        ):
            for arg in node.args:
                if (
                    isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and re.fullmatch(
                        r"[A-Za-z0-9][A-Za-z0-9_.\-]*(\[[\w,\-]+\])?([<>=!~]=?[\w.*]+)?", arg.value
                    )
                    and arg.value not in deps
                ):
                    deps.append(arg.value)
    notes.append(f"noxfile.py present; session.install literals: {', '.join(deps) or 'none'}")
    return deps


def _project_install(
    repo_dir: Path,
    pyproject: Mapping[str, Any],
    setup_cfg: configparser.ConfigParser,
    notes: list[str],
) -> str | None:
    """``pip install -e .[extras]`` when the repo is an installable project, else None."""
    project = pyproject.get("project") if isinstance(pyproject.get("project"), Mapping) else None
    has_backend = isinstance(pyproject.get("build-system"), Mapping)
    has_setup = (repo_dir / "setup.py").is_file() or setup_cfg.has_section("metadata")
    if not (project or has_setup or (has_backend and pyproject.get("tool", {}).get("poetry"))):
        return None
    extras: set[str] = set()
    if project is not None:
        optional = project.get("optional-dependencies")
        extras |= set(optional) if isinstance(optional, Mapping) else set()
        notes.append(
            f"pyproject.toml [project] {project.get('name', '?')!r}, build backend "
            f"{pyproject.get('build-system', {}).get('build-backend', 'setuptools (default)')}"
        )
        requires = str(project.get("requires-python", ""))
        if requires:
            notes.append(f"requires-python {requires!r}; the host interpreter is {HOST_PYTHON}")
    if setup_cfg.has_section("options.extras_require"):
        extras |= set(setup_cfg.options("options.extras_require"))
    extras |= _setup_py_extras(repo_dir / "setup.py")
    chosen = [e for e in TEST_EXTRAS if e in extras] or (["dev"] if "dev" in extras else [])
    target = f".[{','.join(chosen)}]" if chosen else "."
    if chosen:
        notes.append(f"extras installed: {', '.join(chosen)} (of {', '.join(sorted(extras))})")
    # Editable: the env is shared by every checkout of the repo, mounted at the same path, so the
    # tests must import the workspace's source, not a copy frozen into site-packages.
    notes.append("project installed editable (tests must import the checked-out source)")
    return f"python -m pip install -e {shlex.quote(target)}"


def _setup_py_extras(setup_py: Path) -> set[str]:
    """String keys of an ``extras_require={...}`` dict literal in setup.py (ast; never executed)."""
    text = _read(setup_py)
    if text is None:
        return set()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    keys: set[str] = set()
    for node in ast.walk(tree):
        value = None
        keyword = isinstance(node, ast.keyword) and node.arg == "extras_require"
        assigned = isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and "extras" in t.id.lower() for t in node.targets
        )
        if keyword or assigned:
            value = node.value
        if isinstance(value, ast.Dict):
            keys |= {
                k.value
                for k in value.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
    return keys


def _pytest_config(
    pyproject: Mapping[str, Any],
    setup_cfg: configparser.ConfigParser,
    tox_ini: configparser.ConfigParser,
    repo_dir: Path,
) -> dict[str, str]:
    """The pytest ini options from whichever file pytest itself would read them."""
    options = pyproject.get("tool", {}).get("pytest", {}).get("ini_options")
    if isinstance(options, Mapping):
        return {
            k: " ".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in options.items()
        }
    pytest_ini = configparser.ConfigParser(interpolation=None, strict=False)
    for name in ("pytest.ini", ".pytest.ini"):
        text = _read(repo_dir / name)
        if text is not None:
            try:
                pytest_ini.read_string(text)
            except configparser.Error:
                return {}
            if pytest_ini.has_section("pytest"):
                return dict(pytest_ini.items("pytest"))
    for parser, section in ((tox_ini, "pytest"), (setup_cfg, "tool:pytest")):
        if parser.has_section(section):
            return dict(parser.items(section))
    return {}


def _framework(
    repo_dir: Path,
    pyproject: Mapping[str, Any],
    setup_cfg: configparser.ConfigParser,
    tox_ini: configparser.ConfigParser,
    notes: list[str],
) -> str:
    if _pytest_config(pyproject, setup_cfg, tox_ini, repo_dir):
        notes.append("pytest configuration found: framework pytest")
        return "pytest"
    uses_pytest = uses_unittest = False
    for path in _test_files(repo_dir):
        text = _read(path) or ""
        uses_pytest |= bool(
            re.search(r"^\s*(import pytest|from pytest)|@pytest\.", text, re.MULTILINE)
        )
        uses_unittest |= "unittest" in text and "TestCase" in text
    if uses_unittest and not uses_pytest:
        notes.append("tests are unittest.TestCase only: framework unittest, run through pytest")
        return "unittest"
    notes.append(
        "framework pytest"
        + ("" if uses_pytest else " (no test imports pytest; pytest collects plain test functions)")
    )
    return "pytest"


def _test_files(repo_dir: Path, limit: int = 200) -> list[Path]:
    found: list[Path] = []
    for pattern in ("test_*.py", "*_test.py"):
        for path in repo_dir.rglob(pattern):
            if ".git" not in path.parts and path.is_file():
                found.append(path)
                if len(found) >= limit:  # enough to decide; huge repos stay quick
                    return found
    return found


LOOSE_TEST_FILES = "test*.py tests.py *_test.py"


def _loose_test_files(repo_dir: Path, limit: int = 20) -> list[Path]:
    """Test modules pytest's default pattern misses (``test.py``, ``tests.py``, ``testing.py``)
    that define tests (a ``def test`` or a ``TestCase``)."""
    found: list[Path] = []
    for path in sorted(repo_dir.rglob("test*.py")):
        text = _read(path) if ".git" not in path.parts else None
        if text is None:
            continue
        if re.search(r"^\s*def test|TestCase", text, re.MULTILINE):
            found.append(path)
            if len(found) >= limit:
                break
    return found


def _pytest_plugins(
    repo_dir: Path,
    pyproject: Mapping[str, Any],
    setup_cfg: configparser.ConfigParser,
    tox_ini: configparser.ConfigParser,
    notes: list[str],
) -> list[str]:
    """Plugins the pytest configuration cannot run without (addopts flags, required_plugins, ini keys)."""
    config = _pytest_config(pyproject, setup_cfg, tox_ini, repo_dir)
    plugins: list[str] = []
    for token in (
        shlex.split(config.get("addopts", ""), posix=True) if config.get("addopts") else []
    ):
        flag = token.split("=", 1)[0]
        plugin = ADDOPTS_PLUGINS.get(flag) or next(
            (p for f, p in ADDOPTS_PLUGINS.items() if f.startswith("--") and flag.startswith(f)),
            None,
        )
        if plugin and plugin not in plugins:
            plugins.append(plugin)
    plugins += [p for p in config.get("required_plugins", "").split() if p not in plugins]
    plugins += [p for k, p in INI_PLUGINS.items() if k in config and p not in plugins]
    if plugins:
        notes.append(f"pytest plugins the configuration needs: {', '.join(plugins)}")
    return plugins
