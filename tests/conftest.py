"""Shared fixtures: tiny throwaway bundles and the Docker engine for ``@pytest.mark.docker``."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envgym.heap import release_freed

REPO = Path(__file__).resolve().parents[1]

# triton.jit decides at decoration time whether a kernel is interpreted, and triton's own
# library functions are decorated when triton is first imported — by whichever test module
# imports it first during collection. Without a GPU the kernels can only run interpreted, so the
# whole session decides so up front (a GPU machine keeps compiled kernels).
if not Path("/dev/nvidia0").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def make_bundle(tmp_path: Path) -> Callable[..., Path]:
    """``make_bundle(tools, solution="", verifier="")``: a bundle dir with state/db.sqlite.

    The database has ``items(name, price)`` and a one-row ``counter(n)`` table.
    """
    made = 0

    def make(tools: str, solution: str = "", verifier: str = "") -> Path:
        nonlocal made
        made += 1
        root = tmp_path / f"bundle{made}"
        (root / "state").mkdir(parents=True)
        db = sqlite3.connect(root / "state" / "db.sqlite")
        db.execute("CREATE TABLE items (name TEXT PRIMARY KEY, price INTEGER)")
        db.executemany("INSERT INTO items VALUES (?, ?)", [("apple", 3), ("pear", 5), ("plum", 2)])
        db.execute("CREATE TABLE counter (n INTEGER)")
        db.execute("INSERT INTO counter VALUES (0)")
        db.commit()
        db.close()
        (root / "tools.py").write_text(textwrap.dedent(tools))
        (root / "solution.py").write_text(textwrap.dedent(solution))
        (root / "verifier.py").write_text(textwrap.dedent(verifier))
        (root / "tasks.jsonl").write_text('{"id": "t", "gold": "do not leak me"}\n')
        return root

    return make


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def unforked(monkeypatch: pytest.MonkeyPatch) -> None:
    """bwrap workers each started by a bwrap of its own, not forked (the root hosts' default):
    for tests that read that launch's process handles.  Forked workers have their own tests
    (test_sandbox_fork*.py)."""
    monkeypatch.setenv("ENVGYM_SANDBOX_FORK", "0")


@pytest.fixture
def require_backend(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``require_backend(name)``: skip (fail in CI) when that sandbox backend cannot run here."""

    def require(name: str) -> None:
        if name == "docker":
            request.getfixturevalue("docker_engine")
        elif name == "bwrap":
            from envgym.sandbox.bwrap import bwrap_available

            if not bwrap_available():
                message = "bubblewrap (/usr/bin/bwrap able to create namespaces) unavailable"
                pytest.fail(message) if _in_ci() else pytest.skip(message)

    return require


_docker_problem: list[str | None] = []  # filled once per session, when docker tests are collected


def _start_docker() -> str | None:
    """Run scripts/docker_setup.sh (idempotent); the problem in words, or None.

    Under pytest-xdist every worker collects, so the workers take turns: the second finds the
    engine the first started instead of racing it for the same socket and image build.
    """
    try:
        with open("/tmp/envgym-docker-setup.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = subprocess.run(
                ["bash", str(REPO / "scripts" / "docker_setup.sh")],
                capture_output=True,
                text=True,
                timeout=1800,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr or done.stdout)[-1500:]


# Test files whose heavy tests each hold several GiB (a vLLM engine, a Ray cluster, a training
# run): at most one of them runs at a time, whatever the number of workers. The demo (in
# test_cli.py, the longest test) is a group of its own so that it overlaps these.
_BIG_MEMORY = frozenset(
    {
        "test_models_vllm.py",
        "test_rollout_ray.py",
        "test_train_bench.py",
        "test_distributed.py",
        "test_train_ranks.py",
        "test_kernels_bench.py",
        "test_sft.py",
        "test_search_qa_cold_start.py",
    }
)


@pytest.fixture(scope="module", autouse=True)
def _release_freed_memory() -> Iterator[None]:
    # A worker runs many model tests one after another; glibc keeps what each freed (gigabytes
    # after a training test), which the other worker's demo and Ray's OOM killer then count as
    # used. Give it back after each module.
    yield
    release_freed()


# tryfirst: pytest-xdist reads the groups in its own collection hook, which otherwise runs first.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The suite runs on two pytest-xdist workers with --dist loadgroup (scripts/test.sh): a
    # group runs whole on one worker, so a module's fixtures are built once. Heavy tests of the
    # big-memory files share one group (one at a time, so two never meet in CI's memory); other
    # heavy tests are grouped by file. Groups are handed out in the order of their first test,
    # so heavy groups go first (the longest work starts early and light files fill the gaps at
    # the end, instead of a heavy file starting last on a worker while the other sits idle).
    def group(item: pytest.Item) -> str:
        if not item.get_closest_marker("heavy"):
            return item.path.name
        return "big-memory" if item.path.name in _BIG_MEMORY else f"heavy-{item.path.name}"

    rank = {"heavy-test_cli.py": 0, "big-memory": 0}
    for item in items:
        name = group(item)
        item.add_marker(pytest.mark.xdist_group(name))
        rank.setdefault(name, 1 if name.startswith("heavy-") else 2)
    items.sort(key=lambda item: rank[group(item)])  # stable: files keep their own order


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    # pytest-xdist's loadgroup marks a test's group by a suffix on its node id (every test here
    # has a group); a pytest whose node ids ignore that write (9.2) has the tests handed out one by
    # one, silently: big-memory tests then meet in memory and module fixtures are built once per
    # worker. Stop rather than run like that.
    if node.config.getoption("dist") != "loadgroup":
        return
    if ids and not any("@" in nodeid for nodeid in ids):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} dropped pytest-xdist's test groups (--dist loadgroup): "
            "install the pytest pinned in pyproject.toml's test extra"
        )


def pytest_collection_finish(session: pytest.Session) -> None:
    # Outside any test, so a first-time image build (debootstrap, a minute or more) does not
    # count against the first docker test's timeout.
    if any(item.get_closest_marker("docker") for item in session.items):
        _docker_problem.append(_start_docker())


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The engine scripts/docker_setup.sh started; skip without one (fail with ``CI=true``)."""
    problem = _docker_problem[0] if _docker_problem else _start_docker()
    if problem is not None:
        message = f"Docker engine unavailable (scripts/docker_setup.sh failed): {problem}"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)
    from envgym.sandbox.docker_backend import engine_url

    return engine_url()
