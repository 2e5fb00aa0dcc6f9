"""The offline MCP suite (envgym/envs/mcp_suite, docs/MCP.md "Offline MCP suite").

* the MCPMark-layout loader reads every task and refuses malformed folders by name;
* snapshots materialize deterministically (the git snapshot's commit ids are the ones the
  verifiers embed);
* ``verify.py`` runs isolated, with a timeout, its exit code the verdict, a hang or a kill an
  error (never a rejection);
* every task passes the suite check through the real servers: gold passes, no-op fails;
  a wrong gold plan or a missing one fails the check;
* the servers can write nothing outside the episode state (``ATTACH DATABASE`` elsewhere);
* a real server killed mid-episode is an error observation and is restarted, state kept.

The three servers (npm filesystem, PyPI git and sqlite in their own venvs) are installed once
into the envgym cache; one env per service is shared by the module's tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

import pytest

from envgym import runtime
from envgym.envs.mcp_suite import layout, servers, snapshot
from envgym.envs.mcp_suite.check import categories_of, check_task
from envgym.envs.mcp_suite.registration import CATEGORIES
from envgym.envs.mcp_suite.suite import make_env

FILES = Path(layout.ROOT) / "bundle_files"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _verifier():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_suite_verifier", FILES / "verifier.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the loader (no servers) --------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_every_task_loads_in_mcpmark_layout() -> None:
    tasks = [t for s, c in layout.categories() for t in layout.load_category(s, c)]
    assert len(tasks) >= 20
    by_service = {s: sum(t.service == s for t in tasks) for s in servers.SERVICES}
    assert all(n >= 5 for n in by_service.values()), by_service
    for t in tasks:
        assert {
            "task_id",
            "task_name",
            "category_id",
            "category_name",
            "difficulty",
            "mcp",
            "tags",
        } <= set(t.meta)
        assert t.service in t.meta["mcp"] and t.meta["task_id"] == t.folder.name
        assert t.gold and t.description and "sys.exit(1)" in t.verify_source
    assert len({t.id for t in tasks}) == len(tasks)


def _task_folder(root: Path, **meta_overrides) -> Path:
    folder = root / "tasks" / "sqlite" / "shop" / "t1"
    folder.mkdir(parents=True)
    meta = {
        "task_id": "t1",
        "task_name": "T",
        "category_id": "shop",
        "category_name": "Shop",
        "description": "d",
        "author": "a",
        "created_at": "2026",
        "difficulty": "L2",
        "tags": [],
        "mcp": ["sqlite"],
        "meta_data": {"stateType": "sql"},
        **meta_overrides,
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / "description.md").write_text("Do it.\n")
    (folder / "verify.py").write_text("import sys\nsys.exit(1)\n")
    return folder


@pytest.mark.timeout(30)
def test_a_task_without_gold_loads_as_mcpmark_ships_it(tmp_path: Path) -> None:
    task = layout.load_task(_task_folder(tmp_path))
    assert task.gold is None and task.difficulty == 2 and task.id == "sqlite/shop/t1"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda f: (f / "meta.json").write_text("{nope"), "meta.json: not valid JSON"),
        (
            lambda f: (f / "meta.json").write_text(json.dumps({"task_id": "t1"})),
            "missing fields: task_name",
        ),
        (
            lambda f: (f / "meta.json").write_text(
                json.dumps({**json.loads((f / "meta.json").read_text()), "task_id": "other"})
            ),
            "is not the folder name",
        ),
        (
            lambda f: (f / "meta.json").write_text(
                json.dumps({**json.loads((f / "meta.json").read_text()), "mcp": ["notion"]})
            ),
            "does not list the service",
        ),
        (
            lambda f: (f / "meta.json").write_text(
                json.dumps({**json.loads((f / "meta.json").read_text()), "difficulty": "L0"})
            ),
            "difficulty 'L0'",
        ),
        (lambda f: (f / "description.md").unlink(), "description.md: required file is missing"),
        (lambda f: (f / "description.md").write_text("  \n"), "description.md: is empty"),
        (lambda f: (f / "verify.py").write_text("def (:\n"), "verify.py: syntax error at line 1"),
        (lambda f: (f / "gold.json").write_text("[]"), "gold.json: must be a non-empty list"),
        (lambda f: (f / "gold.json").write_text('[{"tool": 3}]'), "gold.json: call 0 must be"),
    ],
)
def test_malformed_task_folders_are_refused_by_name(tmp_path: Path, breakage, message: str) -> None:
    folder = _task_folder(tmp_path)
    breakage(folder)
    with pytest.raises(layout.LayoutError, match=message.replace("(", r"\(")):
        layout.load_task(folder)


@pytest.mark.timeout(30)
def test_check_targets() -> None:
    assert categories_of("mcp-suite") == layout.categories()
    assert categories_of("mcp-suite/git") == [("git", "service_repo")]
    assert categories_of("mcp-suite-sqlite-v0") == [("sqlite", "shop")]
    assert categories_of("mcp-suite/filesystem/project_notes") == [("filesystem", "project_notes")]
    with pytest.raises(ValueError, match="no such service/category"):
        categories_of("mcp-suite/notion")
    with pytest.raises(ValueError, match="names no part of the MCP suite"):
        categories_of("tau2/airline")


# -- snapshots and the verify.py runner (no servers) -----------------------------------------
@pytest.mark.timeout(60)
def test_snapshots_materialize_deterministically(tmp_path: Path) -> None:
    import sqlite3
    import subprocess

    repo = snapshot.materialize("git", "service_repo", tmp_path / "g") / "repo"
    tip = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "main"], capture_output=True, text=True
    ).stdout.strip()
    verify = layout.load_task(
        layout.TASKS_DIR / "git" / "service_repo" / "commit_notes"
    ).verify_source
    assert f'MAIN = "{tip}"' in verify  # the verifiers' expectations match the snapshot
    assert (repo / "notes.txt").is_file()
    db = snapshot.materialize("sqlite", "shop", tmp_path / "s") / "db.sqlite"
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM orders").fetchone() == (7,)
    fs = snapshot.materialize("filesystem", "project_notes", tmp_path / "f")
    assert (fs / "data" / "sales_q1.csv").read_text().startswith("region,amount")


def _run_verify(tmp_path: Path, source: str, *, timeout: float | None = None, monkeypatch=None):
    verifier = _verifier()
    if timeout is not None:
        monkeypatch.setattr(verifier, "VERIFY_TIMEOUT_S", timeout)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    token = runtime._state_dir.set(state)
    try:
        return verifier.verify_task(
            {},
            {
                "metadata": {
                    "state_env": ["FILESYSTEM_TEST_DIR", ""],
                    "verify_py": source,
                    "meta_json": "{}",
                }
            },
        )
    finally:
        runtime._state_dir.reset(token)


@pytest.mark.timeout(60)
def test_verify_exit_code_is_the_verdict_and_runs_isolated(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "sitecustomize.py").write_text(
        "raise SystemExit(0)\n"
    )  # planted by an agent
    (tmp_path / "state" / "json.py").write_text("raise SystemExit(0)\n")
    probe = (
        "import json, os, sys\n"
        "root = os.environ['FILESYSTEM_TEST_DIR']\n"
        "print('cwd', os.getcwd() != root, 'path', all(not p.startswith(root) for p in sys.path))\n"
        "sys.exit(0 if os.path.isfile(os.path.join(root, 'ok')) else 3)\n"
    )
    failed = _run_verify(tmp_path, probe)
    assert failed["checks"][0]["passed"] is False and failed["checks"][0]["detail"].startswith(
        "exit 3: cwd True path True"
    )
    (tmp_path / "state" / "ok").write_text("")
    assert _run_verify(tmp_path, probe)["checks"][0]["passed"] is True


@pytest.mark.timeout(60)
def test_a_hanging_or_killed_verify_is_an_error_not_a_rejection(
    tmp_path: Path, monkeypatch
) -> None:
    with pytest.raises(TimeoutError, match="did not finish within 1"):
        _run_verify(tmp_path, "while True:\n    pass\n", timeout=1, monkeypatch=monkeypatch)
    with pytest.raises(RuntimeError, match="killed by signal 9"):
        _run_verify(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")


# -- through the real servers ----------------------------------------------------------------
@pytest.fixture(scope="module")
def envs():
    try:
        for service in servers.SERVICES:  # install (once per cache) before any env is built
            servers.server_spec(service)
    except servers.MissingTool as err:
        if IN_CI:
            pytest.fail(str(err))
        pytest.skip(str(err))
    built = {s: make_env(s, c) for s, c in CATEGORIES.items()}
    yield built
    for env in built.values():
        env.close()


ALL_TASKS = [
    (s, t.meta["task_id"]) for s, c in CATEGORIES.items() for t in layout.load_category(s, c)
]


@pytest.mark.timeout(900)  # the first run installs the three servers
def test_every_task_passes_the_check_gold_passes_noop_fails(envs) -> None:
    failures = []
    for service, category in CATEGORIES.items():
        for task in layout.load_category(service, category):
            result = check_task(envs[service], task, reruns=1)
            if not result.passed:
                failures.append((result.task_id, result.problems))
    assert not failures
    assert len(ALL_TASKS) >= 20


@pytest.mark.timeout(120)
def test_a_wrong_or_missing_gold_plan_fails_the_check(envs) -> None:
    task = next(
        t for t in layout.load_category("sqlite", "shop") if t.meta["task_id"] == "restock_lamp"
    )
    wrong = dataclasses.replace(
        task,
        gold=(
            {
                "tool": "write_query",
                "arguments": {"query": "UPDATE products SET stock = 49 WHERE name = 'Desk Lamp'"},
            },
        ),
    )
    result = check_task(envs["sqlite"], wrong, reruns=1)
    assert not result.passed and not result.gold_passed and result.noop_rejected
    assert any(p.startswith("gold rejected") for p in result.problems)
    broken = dataclasses.replace(task, gold=({"tool": "write_query", "arguments": {"sql": "x"}},))
    result = check_task(envs["sqlite"], broken, reruns=1)  # bad arguments: stopped by envgym
    assert not result.gold_passed and "gold call 0 (write_query) failed" in result.problems[0]
    result = check_task(envs["sqlite"], dataclasses.replace(task, gold=None))
    assert not result.passed and result.problems == ("the task has no gold.json plan",)


def _step(env, name: str, **args):
    obs, reward, terminated, _, info = env.step(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"c{time.monotonic_ns()}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ],
        }
    )
    return obs["messages"][-1]["content"], reward, terminated, info


@pytest.mark.timeout(120)
def test_servers_cannot_write_outside_the_episode_state(envs, tmp_path: Path) -> None:
    from envgym.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        if IN_CI:
            pytest.fail("bubblewrap unavailable (scripts/setup.sh installs it)")
        pytest.skip("bubblewrap unavailable")
    env = envs["sqlite"]
    env.reset(options={"task": "add_customer"})
    outside = tmp_path / "planted.db"
    _step(env, "write_query", query=f"ATTACH DATABASE '{outside}' AS planted")
    _step(env, "write_query", query="CREATE TABLE planted.t (a TEXT)")
    assert not outside.exists()  # the server's /tmp is private, the rest of the host read-only
    target = layout.ROOT / "planted.db"
    _step(env, "write_query", query=f"ATTACH DATABASE '{target}' AS p2")
    _step(env, "write_query", query="CREATE TABLE p2.t (a TEXT)")
    assert not target.exists()
    fs = envs["filesystem"]
    fs.reset(options={"task": "build_dirs"})
    reply, _, _, _ = _step(fs, "write_file", path=str(layout.ROOT / "x.txt"), content="x")
    assert reply.startswith("Error:") and not (layout.ROOT / "x.txt").exists()


@pytest.mark.timeout(30)
def test_without_bubblewrap_the_servers_are_refused_not_run_unconfined(monkeypatch) -> None:
    """An unconfined sqlite server could plant a .pth the verifier imports (review finding):
    no bwrap → a clear error, unless the caller says confine=False."""
    import envgym.sandbox.bwrap as bwrap
    from envgym.envs.mcp_suite import servers

    monkeypatch.setattr(bwrap, "bwrap_available", lambda: False)
    with pytest.raises(servers.MissingTool, match="bubblewrap .* confine=False"):
        servers.confined(["server"])


def _server_pids(marker: str) -> list[int]:
    """Processes (started by this test's env) whose command line names ``marker``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and "mcp_server_sqlite" in cmd and not cmd.startswith("bwrap"):
                pids.append(int(entry.name))
    return pids


@pytest.mark.timeout(120)
def test_a_real_server_killed_mid_episode_is_an_error_and_restarted(envs) -> None:
    env = envs["sqlite"]
    env.reset(options={"task": "restock_lamp"})
    db = str(env.sandbox.state_dir / "db.sqlite")
    _step(env, "write_query", query="UPDATE products SET stock = 50 WHERE name = 'Desk Lamp'")
    pids = _server_pids(db)
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    reply, _, terminated, info = _step(
        env, "read_query", query="SELECT stock FROM products WHERE id = 1"
    )
    assert (
        reply.startswith("Error: read_query failed (crash)")
        and "restarted" in reply
        and not terminated
    )
    assert info["errors"].get("crash") == 1
    assert _server_pids(db) and set(_server_pids(db)).isdisjoint(pids)  # a new process
    reply, _, _, _ = _step(env, "read_query", query="SELECT stock FROM products WHERE id = 1")
    assert "50" in reply  # the state on disk was kept
    _, reward, terminated, _ = _step(env, "finish", summary="done")
    assert terminated and reward == 1.0


@pytest.mark.timeout(120)
def test_registered_env_and_host_gold_solution(envs) -> None:
    import tomllib

    import envgym
    from envgym.envs.mcp_suite import registration

    declared = tomllib.loads((layout.ROOT.parents[2] / "pyproject.toml").read_text())
    assert (
        declared["project"]["entry-points"]["envgym.envs"]["mcp-suite"]
        == "envgym.envs.mcp_suite.registration:register_envs"
    )
    registration.register_envs()  # what discovery calls (an installed package's metadata may be older)
    env = envgym.make("mcp-suite-sqlite-v0", sandbox="inprocess")
    try:
        obs, info = env.reset(options={"task": "city_sales"})
        assert info["task_id"] == "city_sales" and "city_sales" in obs["messages"][-1]["content"]
        names = {t["function"]["name"] for t in obs["tools"]}
        assert {"finish", "read_query", "write_query", "create_table", "list_tables"} <= names
        calls = env.gold_calls()  # the gold solution ran on the host, through the MCP server
        assert [c[0] for c in calls] == ["create_table", "write_query", "finish"]
    finally:
        env.close()


@pytest.mark.timeout(300)
def test_check_entry_point_for_the_cli(envs, capsys) -> None:
    from envgym.registry import check_handler

    def claimed(target: str) -> bool:
        handler = check_handler(target)
        return handler is not None and handler.name == "mcp-suite"

    assert claimed("mcp-suite") and claimed("mcp-suite-git-v0")
    assert not claimed("trip-planning-v0") and not claimed("mcp-suites")
    handler = check_handler("mcp-suite/filesystem")
    assert handler is not None and handler.run("mcp-suite/filesystem", as_json=True) == 0
    report = json.loads(capsys.readouterr().out)
    n = len(layout.load_category("filesystem", "project_notes"))
    assert report["passed"] and report["gold_passed"] == n and report["noop_rejected"] == n


@pytest.mark.timeout(60)
def test_reviews_table_verifier_refuses_a_trigger_that_rejects_every_insert(tmp_path: Path) -> None:
    """A policy could 'enforce' the 1..5 rating rule by refusing every insert; the verifier must
    see that valid ratings are accepted too (review finding)."""
    import sqlite3
    import subprocess
    import sys

    verify = tmp_path / "verify.py"  # the script that runs: the category's prelude + the task's own
    verify.write_text(
        layout.load_task(layout.ROOT / "tasks" / "sqlite" / "shop" / "reviews_table").verify_source
    )
    schema = ("CREATE TABLE products (id INTEGER PRIMARY KEY);"
              "INSERT INTO products VALUES (1);"
              "CREATE TABLE reviews (id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL "
              "REFERENCES products(id), rating INTEGER NOT NULL {check}, body TEXT);")  # fmt: skip

    def verdict(check: str, extra: str = "") -> int:
        db = tmp_path / f"db{abs(hash((check, extra)))}.sqlite"
        with sqlite3.connect(db) as conn:
            conn.executescript(schema.format(check=check) + extra)
        env = {**os.environ, "SQLITE_TEST_DB": str(db)}
        return subprocess.run([sys.executable, "-I", str(verify)], env=env, capture_output=True,
                              timeout=30).returncode  # fmt: skip

    assert verdict("CHECK (rating BETWEEN 1 AND 5)") == 0  # the real solution
    assert verdict("") != 0  # no rule
    assert (
        verdict(
            "", "CREATE TRIGGER no BEFORE INSERT ON reviews BEGIN SELECT RAISE(ABORT, 'no'); END;"
        )
        != 0
    )  # refuses everything


@pytest.mark.timeout(300)
def test_eval_with_the_gold_agent_replays_through_the_suite_env(envs, tmp_path: Path) -> None:
    """`envgym eval mcp-suite-sqlite-v0 --model gold`: the gold agent replays each task through
    the env the evaluation builds (the MCP server's tools), not a plain BundleEnv of the bundle,
    whose worker has no MCP tools (every episode errored before)."""
    from envgym.envs.mcp_suite import registration
    from envgym.evaluate import EvalConfig, evaluate, model_ref
    from envgym.store import Store

    registration.register_envs()
    with Store(f"sqlite:///{tmp_path / 'e.db'}") as store:
        run = evaluate(
            "mcp-suite-sqlite-v0",
            model_ref("gold"),
            EvalConfig(k=1, limit=3, concurrency=3),
            store=store,
        )
    assert run.summary.errored == 0 and run.summary.episodes == 3
    assert all(e.reward == 1.0 for e in run.episodes)
