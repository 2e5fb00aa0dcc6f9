"""What a bwrap worker's start costs, as properties that need no timing.

* the worker's envgym modules come from bytecode compiled once by the host (a start compiled
  them from source before), and the jail (bwrap's, and Docker's container) shows only those
  modules, not the whole package;
* a worker after the first imports the gold ``solution.py`` only when ``solve`` needs it;
* ``traceback`` is imported when an error needs formatting, not at every start;
* the worker runs with a glibc malloc setting that keeps its heap from holding freed memory
  (~0.8 MiB of an idle worker's private memory).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from envgym.sandbox import CallError, Limits, open_sandbox
from envgym.sandbox.bwrap import MALLOC_TUNABLES
from envgym.sandbox.worker_stage import PACKAGE_DIR, WORKER_MODULES

TOOLS = '''
import os
import sys


def envgym_modules() -> dict:
    """Each envgym module of the worker: whether its bytecode file exists."""
    return {
        name: bool(getattr(module, "__cached__", None)) and os.path.exists(module.__cached__)
        for name, module in sys.modules.items()
        if name.startswith("envgym.") and getattr(module, "__file__", None)
    }


def main_file() -> str:
    """The file the worker was started from."""
    return sys.modules["__main__"].__file__


def list_dir(path: str) -> list:
    """A directory's entries."""
    return sorted(os.listdir(path))


def bundle_modules() -> list:
    """The bundle's modules imported so far."""
    return sorted(name for name in sys.modules if name.startswith("bundle_"))


def imported(name: str) -> bool:
    """Whether module ``name`` is imported."""
    return name in sys.modules


def fail() -> None:
    """Raise."""
    raise ValueError("as asked")


def environment() -> dict:
    """The worker's environment."""
    return dict(os.environ)
'''

SOLUTION = """
def solve(tools, task):
    return "solved"
"""

LIMITS = Limits(call_timeout_s=20, startup_timeout_s=60)


@pytest.fixture(autouse=True)
def _bwrap_started(unforked: None) -> None:
    """What each bwrap-started worker costs (a forked worker starts no interpreter; the fork
    server imports once what these tests count per start)."""


@pytest.fixture
def bundle(make_bundle: Callable[..., Path], require_backend: Callable[[str], None]) -> Path:
    require_backend("bwrap")
    return make_bundle(TOOLS, solution=SOLUTION)


def _envgym_imports(path: Path) -> set[str]:
    """Modules under envgym that ``path`` imports (at any depth of its code)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("envgym"):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("envgym"))
    return names


def test_the_staged_modules_are_all_the_worker_imports() -> None:
    staged = {"envgym." + rel.removesuffix(".py").replace("/", ".") for rel in WORKER_MODULES}
    packages = {"envgym", "envgym.sandbox"}  # made by the worker's bootstrap, not imported
    for rel in WORKER_MODULES:
        for name in _envgym_imports(PACKAGE_DIR / rel):
            # ``from envgym import runtime`` names envgym and envgym.runtime: one must be staged.
            assert name in staged | packages or name.rpartition(".")[0] in staged, (rel, name)


def test_the_worker_loads_the_code_files_the_bundle_format_names() -> None:
    """One tuple, not copies: the worker cannot import envgym.bundle (jsonschema is not in the
    jail), so the tuple lives in envgym.runtime, which both sides import."""
    import envgym.bundle
    import envgym.runtime
    import envgym.sandbox.process
    import envgym.sandbox.runner

    for module in (envgym.bundle, envgym.sandbox.runner, envgym.sandbox.process):
        assert module.CODE_FILES is envgym.runtime.CODE_FILES, module.__name__


def test_worker_modules_come_from_compiled_code(bundle: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with open_sandbox(bundle, "bwrap", LIMITS) as box:
        box.reset(state)
        modules = box.call_tool("envgym_modules", {})
        assert modules.ok, modules
        assert set(modules.value) >= {"envgym.runtime", "envgym.sandbox.runner"}
        assert all(modules.value.values()), modules.value  # each one has its bytecode file
        assert box.call_tool("main_file", {}).value.endswith("/sandbox/worker.pyc")
        # The jail shows the worker's modules only, not the rest of the package.
        listing = box.call_tool("list_dir", {"path": "/opt/envgym/envgym"})
        assert set(listing.value) <= {"runtime.py", "tool_schema.py", "sandbox", "__pycache__"}


@pytest.mark.docker
def test_a_docker_worker_sees_the_worker_modules_only(
    make_bundle: Callable[..., Path], require_backend: Callable[[str], None], tmp_path: Path
) -> None:
    """The container mounts the same staged modules, not the envgym package (which holds the
    rooms: families' data, the trainer, ...)."""
    require_backend("docker")
    state = tmp_path / "state"
    state.mkdir()
    with open_sandbox(make_bundle(TOOLS, solution=SOLUTION), "docker", LIMITS) as box:
        box.reset(state)
        listing = box.call_tool("list_dir", {"path": "/opt/envgym/envgym"})
        assert listing.ok, listing
        assert set(listing.value) <= {"runtime.py", "tool_schema.py", "sandbox", "__pycache__"}


def test_later_workers_import_the_solution_when_solve_needs_it(
    bundle: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with open_sandbox(bundle, "bwrap", LIMITS) as box:
        box.describe_tools()  # the first worker imports all three files
        box.reset(state)  # a fresh worker
        assert "bundle_solution" not in box.call_tool("bundle_modules", {}).value
        solved = box.solve("solve", {}, None)
        assert solved.outcome.ok, solved.outcome
        assert solved.submission == {"content": "solved"}
        assert "bundle_solution" in box.call_tool("bundle_modules", {}).value


def test_a_deferred_solution_that_fails_names_its_file(
    make_bundle: Callable[..., Path], require_backend: Callable[[str], None], tmp_path: Path
) -> None:
    require_backend("bwrap")
    # Imports in the first worker (no state mounted), fails in an episode's worker.
    broken = "import os\nif os.path.exists('/state/broken'):\n    raise ValueError('broken')\n"
    bundle = make_bundle(TOOLS, solution=broken + SOLUTION)
    state = tmp_path / "state"
    state.mkdir()
    (state / "broken").write_text("")
    with open_sandbox(bundle, "bwrap", LIMITS) as box:
        box.describe_tools()
        box.reset(state)
        assert "bundle_solution" not in box.call_tool("bundle_modules", {}).value
        for _ in range(2):  # the same answer each time, not "not loaded"
            solved = box.solve("solve", {}, None)
            assert solved.outcome.error is CallError.EXCEPTION, solved.outcome
            assert "solution.py line 3: failed to import" in solved.outcome.message
            assert "ValueError: broken" in solved.outcome.message


def test_the_worker_runs_with_the_malloc_tunable(bundle: Path, tmp_path: Path) -> None:
    # What it saves is memory (docs/SANDBOX.md), measured by ``envgym bench scale``; here:
    # that the setting reaches the worker's process, and nothing else of the host with it.
    state = tmp_path / "state"
    state.mkdir()
    with open_sandbox(bundle, "bwrap", LIMITS) as box:
        box.reset(state)
        environment = box.call_tool("environment", {})
        assert environment.ok, environment
        assert environment.value.get("GLIBC_TUNABLES") == MALLOC_TUNABLES
        assert set(environment.value) <= {"PATH", "LANG", "GLIBC_TUNABLES", "PWD"}


def _fds() -> list[str]:
    return sorted(os.listdir("/proc/self/fd"))


def test_an_idle_sandbox_holds_six_host_fds(bundle: Path, tmp_path: Path) -> None:
    # bwrap's stdin and stdout pipes, a pidfd on the sandbox's init and the three /proc files
    # of the after-op check; the launcher's stderr file is closed once the worker answered.
    state = tmp_path / "state"
    state.mkdir()
    before = len(_fds())
    with open_sandbox(bundle, "bwrap", LIMITS) as box:
        box.reset(state)
        assert box.call_tool("bundle_modules", {}).ok
        assert len(_fds()) - before == 6, _fds()
        box.reset(state)  # the next worker: the last one's fds are all given back
        assert box.call_tool("bundle_modules", {}).ok
        assert len(_fds()) - before == 6, _fds()
    assert len(_fds()) == before


def test_traceback_is_imported_only_to_format_an_error(bundle: Path, tmp_path: Path) -> None:
    # 6M instructions and ~150 KiB of every start, for a module only errors need.
    state = tmp_path / "state"
    state.mkdir()
    with open_sandbox(bundle, "bwrap", LIMITS) as box:
        box.reset(state)
        assert box.call_tool("imported", {"name": "traceback"}).value is False
        failed = box.call_tool("fail", {})
        assert failed.error is CallError.EXCEPTION
        assert (
            'File "tools.py", line' in failed.message and "ValueError: as asked" in failed.message
        )
        assert box.call_tool("imported", {"name": "traceback"}).value is True
