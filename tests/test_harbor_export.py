"""`envgym export harbor`: bundle tasks as Harbor task directories.

Each export is checked three ways: Harbor's own task model loads it (the `harbor` package, in
its own venv `.venv-harbor`, through a subprocess); its tests/test.sh, run in the project's bwrap
command jail the way Harbor runs it in a container, writes reward 1 after solution/solve.sh and 0
after an agent that did nothing or answered wrong; and values from the bundle (ids, prompts,
metadata, category) never change the structure of the shell, TOML or Dockerfile text.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import typer
from bundle_factory import TASK, make_notes_bundle
from typer.testing import CliRunner

from envgym.bundle import load_bundle, write_manifest
from envgym.envs.harbor_export.bundle_task import (
    SOLVE_SH,
    TEST_SH,
    HarborTaskOptions,
    export_bundle,
    export_task,
)
from envgym.envs.harbor_export.families import MCP, TAU2, NotExportable, export_target
from envgym.sandbox.command_io import DEFAULT_PATH
from envgym.sandbox.command_jail import CommandLimits, Mount, run_command

REPO = Path(__file__).resolve().parents[1]
HARBOR_PYTHON = REPO / ".venv-harbor" / "bin" / "python"
HOSTILE = 'a"b\'c\n$(touch /tmp/envgym-pwned)`id`\n"""\n[evil]\nx = 1 ]] \\ \x7f'


def harbor_python() -> Path:
    if not HARBOR_PYTHON.is_file():
        pytest.fail(f"{HARBOR_PYTHON} is missing: scripts/harbor_venv.sh builds it (set-up)")
    return HARBOR_PYTHON


LOAD = """
import json, sys
from harbor.models.task.task import Task
out = []
for d in sys.argv[1:]:
    t = Task(d)
    out.append({"name": t.name, "metadata": t.config.metadata, "instruction": t.instruction,
                "verifier_timeout": t.config.verifier.timeout_sec})
print(json.dumps(out))
"""


def harbor_load(task_dirs: list[Path]) -> list[dict]:
    done = subprocess.run(
        [str(harbor_python()), "-c", LOAD, *map(str, task_dirs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def jail_trial(task_dir: Path, work: Path, agent: list[list[str]] | None) -> tuple[str, dict]:
    """Harbor's trial, in a bwrap jail: the image's files, the agent (the oracle's solve.sh
    when `agent` is None; else these envgym-tool command lines), then tests/test.sh."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(task_dir / "environment", work / "env")  # the image the Dockerfile builds
    (work / "logs").mkdir()
    image = [
        Mount(work / "env" / "envgym", "/envgym", writable=True),
        Mount(work / "env" / "app", "/app", writable=True),
    ]
    env = {
        "PATH": f"{os.path.dirname(sys.executable)}:{DEFAULT_PATH}",
        "ENVGYM_HOME": "/envgym",
        "ENVGYM_STATE": "/app",
    }
    limits = CommandLimits(timeout_s=120)
    if agent is None:
        mounts = [*image, Mount(task_dir / "solution", "/solution")]
        done = run_command(["bash", "/solution/solve.sh"], mounts=mounts, workdir="/app",
                           env=env, limits=limits)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    for argv in agent or []:
        run_command(["python3", "/envgym/bin/envgym-tool", *argv], mounts=image,
                    workdir="/app", env=env, limits=limits)  # fmt: skip
    mounts = [*image, Mount(task_dir / "tests", "/tests"), Mount(work / "logs", "/logs", True)]
    done = run_command(["bash", "/tests/test.sh"], mounts=mounts, workdir="/app", env=env,
                       limits=limits)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    verifier = work / "logs" / "verifier"
    report = json.loads((verifier / "report.json").read_text())
    return (verifier / "reward.txt").read_text().strip(), report


def test_a_bundle_task_loads_with_harbors_task_model(tmp_path: Path) -> None:
    bundle = make_notes_bundle(tmp_path / "b")
    [task_dir] = export_bundle(bundle, tmp_path / "out")
    [loaded] = harbor_load([task_dir])
    assert loaded["metadata"]["envgym_task_id"] == "secret"
    assert loaded["metadata"]["envgym_bundle_hash"] == load_bundle(bundle).manifest.content_hash
    assert TASK["prompt"] in loaded["instruction"]
    assert "envgym-tool call" in loaded["instruction"] and "submit_result" in loaded["instruction"]
    assert loaded["verifier_timeout"] == HarborTaskOptions().verifier_timeout_s
    # the verifier, the task's metadata and the gold solution are hidden from the agent's image
    image = {p.name for p in (task_dir / "environment").rglob("*")}
    assert not {"verifier.py", "solution.py"} & image
    seen = json.loads((task_dir / "environment" / "envgym" / "task.json").read_text())
    assert seen == {"id": "secret", "submit_tool": "submit_result"}


def test_oracle_earns_1_and_no_op_or_wrong_answers_earn_0_in_the_jail(tmp_path: Path) -> None:
    [task_dir] = export_bundle(make_notes_bundle(tmp_path / "b"), tmp_path / "out")
    assert jail_trial(task_dir, tmp_path / "w", None)[0] == "1"
    reward, report = jail_trial(task_dir, tmp_path / "w", [])
    assert reward == "0" and report["checks"][0]["name"] == "submitted"
    wrong = [["call", "submit_result", '{"answer_text": "plum"}']]
    reward, report = jail_trial(task_dir, tmp_path / "w", wrong)
    assert reward == "0" and {c["name"]: c["passed"] for c in report["checks"]}["correct"] is False
    # an agent's own tool calls (looked up, then submitted) pass like the oracle
    right = [["call", "get_note", '{"key": "secret"}'],
             ["call", "submit_result", '{"answer_text": "tangerine"}']]  # fmt: skip
    assert jail_trial(task_dir, tmp_path / "w", right)[0] == "1"
    # the first submission ends the task: a later one is refused, as in an envgym episode
    late = [*wrong, ["call", "submit_result", '{"answer_text": "tangerine"}']]
    assert jail_trial(task_dir, tmp_path / "w", late)[0] == "0"


def test_a_task_without_a_submit_tool_is_answered_with_envgym_tool_answer(tmp_path: Path) -> None:
    verifier = 'def verify_content(submission, task):\n    return {"checks": [{"name": "says", "passed": submission.get("content") == "tangerine"}]}\n'
    solution = "def solve_plain(tools, task):\n    return tools.get_note(key='secret')\n"
    task = {**TASK, "id": "plain", "solution": "solve_plain", "verifier": "verify_content",
            "submit_tool": None}  # fmt: skip
    bundle = make_notes_bundle(tmp_path / "b", tasks=[task])
    (bundle / "verifier.py").write_text(verifier)
    (bundle / "solution.py").write_text(solution)
    write_manifest(bundle, name="notes", category="test", provenance={"agent": "t", "seed": 0})
    [task_dir] = export_bundle(bundle, tmp_path / "out")
    assert "envgym-tool answer" in (task_dir / "instruction.md").read_text()
    assert jail_trial(task_dir, tmp_path / "w", None)[0] == "1"
    assert jail_trial(task_dir, tmp_path / "w", [["answer", "tangerine"]])[0] == "1"
    assert jail_trial(task_dir, tmp_path / "w", [["answer", "plum"]])[0] == "0"


def hostile_bundle(root: Path) -> Path:
    """A valid bundle whose texts are hostile: prompt, system prompt, metadata, note key, category."""
    task = {**TASK, "prompt": HOSTILE, "system_prompt": HOSTILE,
            "metadata": {"key": HOSTILE, HOSTILE: [HOSTILE]}}  # fmt: skip
    bundle = make_notes_bundle(root, tasks=[task])
    with sqlite3.connect(bundle / "state" / "db.sqlite") as db:
        db.execute("INSERT INTO notes VALUES (?, ?)", (HOSTILE, "quince"))
    write_manifest(bundle, name="notes", category=HOSTILE.replace("\x7f", ""),
                   provenance={"agent": "t", "seed": 0})  # fmt: skip
    return bundle


def test_hostile_texts_stay_data_in_every_file_and_the_round_trip_still_holds(
    tmp_path: Path,
) -> None:
    marker = Path("/tmp/envgym-pwned")
    marker.unlink(missing_ok=True)
    [task_dir] = export_bundle(hostile_bundle(tmp_path / "b"), tmp_path / "out")
    # shell and Dockerfile texts are fixed: no value of the bundle is in them
    assert (task_dir / "tests" / "test.sh").read_text() == TEST_SH
    assert (task_dir / "solution" / "solve.sh").read_text() == SOLVE_SH
    assert "pwned" not in (task_dir / "environment" / "Dockerfile").read_text()
    toml = tomllib.loads((task_dir / "task.toml").read_text())
    assert toml["metadata"]["category"] == HOSTILE.replace("\x7f", "")
    assert set(toml) == {"version", "metadata", "verifier", "agent", "environment"}
    [loaded] = harbor_load([task_dir])
    assert HOSTILE.strip() in loaded["instruction"]
    assert loaded["metadata"]["category"] == HOSTILE.replace("\x7f", "")
    assert jail_trial(task_dir, tmp_path / "w", None)[0] == "1"  # the hostile key was looked up
    assert jail_trial(task_dir, tmp_path / "w", [])[0] == "0"
    assert not marker.exists()


@pytest.mark.parametrize(
    "task_id",
    ["t\nrm -rf /", "t'; touch /tmp/x; '", "$(id)", 't"]\n[x]\ny="', "../../etc", "", "é"],
)
def test_hostile_task_ids_are_data_in_toml_and_names(tmp_path: Path, task_id: str) -> None:
    """The bundle schema forbids such ids; the exporter does not rely on it."""
    bundle = load_bundle(make_notes_bundle(tmp_path / "b"))
    task = {**bundle.tasks[0].to_dict(), "id": task_id}
    target = tmp_path / "out" / "task"
    export_task(bundle, task, target, HarborTaskOptions())
    assert (
        tomllib.loads((target / "task.toml").read_text())["metadata"]["envgym_task_id"] == task_id
    )
    assert (target / "tests" / "test.sh").read_text() == TEST_SH
    assert json.loads((target / "tests" / "task.json").read_text())["id"] == task_id
    [loaded] = harbor_load([target])
    assert loaded["metadata"]["envgym_task_id"] == task_id


def test_task_ids_that_differ_get_different_directories() -> None:
    from envgym.envs.harbor_export.quoting import dir_name

    ids = ["a/b", "a:b", "a_b", "..", ".", "a\nb", "x" * 300, "ok-1.2"]
    names = [dir_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert all("/" not in n and n not in ("", ".", "..") and len(n) < 100 for n in names)
    assert dir_name("ok-1.2") == "ok-1.2"


def test_export_refuses_an_existing_directory_and_unknown_tasks(tmp_path: Path) -> None:
    bundle = make_notes_bundle(tmp_path / "b")
    export_bundle(bundle, tmp_path / "out")
    with pytest.raises(FileExistsError, match="exists"):
        export_bundle(bundle, tmp_path / "out")
    export_bundle(bundle, tmp_path / "out", overwrite=True)
    with pytest.raises(ValueError, match="no task 'nope'"):
        export_bundle(bundle, tmp_path / "out2", task_ids=["nope"])


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("tau2-airline-v0", "simulated user"),
        ("mcp-suite-sqlite-v0", "MCP servers"),
        ("swe-v0", "INSTANCES.jsonl"),
    ],  # fmt: skip
)
def test_families_harbor_cannot_express_are_refused_with_the_reason(
    tmp_path: Path, target: str, why: str
) -> None:
    with pytest.raises(NotExportable, match=why):
        export_target(target, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert "simulated user" in TAU2 and "oracle" in MCP


def test_a_tau2_bundle_directory_is_refused_by_its_category(tmp_path: Path) -> None:
    bundle = make_notes_bundle(tmp_path / "b")
    write_manifest(bundle, name="tau2-x", category="tau2-bench", provenance={"agent": "t"})
    with pytest.raises(NotExportable, match="simulated user"):
        export_target(bundle, tmp_path / "out")


def cli() -> typer.Typer:
    from envgym.apps.export import register

    root = typer.Typer()
    register(root)
    return root


def test_the_cli_exports_and_reports_refusals_and_bad_targets(tmp_path: Path) -> None:
    bundle = make_notes_bundle(tmp_path / "b")
    runner = CliRunner()
    done = runner.invoke(cli(), ["export", "harbor", str(bundle), "--out", str(tmp_path / "o"),
                                 "--json"])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["tasks"] == 1
    done = runner.invoke(cli(), ["export", "harbor", "tau2-airline-v0", "--out", str(tmp_path)])
    assert done.exit_code == 2 and "simulated user" in done.output
    done = runner.invoke(cli(), ["export", "harbor", "no-such-env", "--out", str(tmp_path)])
    assert done.exit_code == 2 and "no environment" in done.output
    done = runner.invoke(cli(), ["export", "harbor", str(bundle), "--out", str(tmp_path / "o")])
    assert done.exit_code == 2 and "exists" in done.output
    done = runner.invoke(cli(), ["export", "harbor", str(bundle), "--out", str(tmp_path / "p"),
                                 "--task", "[red]x[/]"])  # fmt: skip
    assert done.exit_code == 2 and "no task '[red]x[/]'" in done.output
    assert done.output.startswith("error:")  # markup rendered, the id's brackets kept
    done = runner.invoke(cli(), ["export", "harbor", str(bundle), "--out", str(tmp_path / "p"),
                                 "--task", "secret"])  # fmt: skip
    assert done.exit_code == 0 and (tmp_path / "p" / "secret" / "task.toml").is_file()


FAMILIES = ["trip-planning-v0", "retail-orders-v0", "meeting-scheduling-v0",
            "shipment-logistics-v0", "search-qa-v0", "code-interpreter-v0",
            "code-interpreter-data-v0"]  # fmt: skip


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("env_id", FAMILIES)
def test_each_general_agent_family_round_trips(tmp_path: Path, env_id: str) -> None:
    from envgym.registry import resolve_bundle

    bundle = load_bundle(resolve_bundle(env_id))
    first = bundle.tasks[0].id
    [task_dir] = export_target(env_id, tmp_path / "out", task_ids=[first])
    [loaded] = harbor_load([task_dir])
    assert loaded["metadata"]["envgym_task_id"] == first
    assert jail_trial(task_dir, tmp_path / "w", None)[0] == "1"
    assert jail_trial(task_dir, tmp_path / "w", [])[0] == "0"


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("env_id", FAMILIES[:5])
def test_an_exported_task_imports_back_and_passes_envgym_check(tmp_path: Path, env_id: str) -> None:
    """Export, then import as ``harbor:PATH`` (the bwrap backend) and check: oracle 1, no-op 0,
    every generic exploit 0.  The code interpreter's tasks are left out: their Dockerfile
    pip-installs numpy, pandas and sympy, which the offline jail cannot (docs/HARBOR.md)."""
    from envgym.envs.harbor.check import check_path
    from envgym.registry import resolve_bundle

    bundle = load_bundle(resolve_bundle(env_id))
    [task_dir] = export_target(env_id, tmp_path / "out", task_ids=[bundle.tasks[0].id])
    [result] = check_path(str(task_dir))
    assert result.ok, result.problems
    assert {p.name for p in result.probes} >= {"oracle", "noop"}


def test_swe_instances_jsonl_goes_through_the_swe_export_and_loads_with_harbor(
    tmp_path: Path,
) -> None:
    from test_swe_interchange import SWE_BENCH

    from envgym.envs.swe.instance import write_instances

    source = write_instances(tmp_path / "in.jsonl", [SWE_BENCH])
    [task_dir] = export_target(source, tmp_path / "out")
    assert (task_dir / "tests" / "test.patch").is_file()  # the SWE family's own layout
    [loaded] = harbor_load([task_dir])
    assert loaded["metadata"]["instance_id"] == SWE_BENCH.instance_id
    assert SWE_BENCH.problem_statement in loaded["instruction"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["call", "get_note", '{"key": "secret", "x": 1}'], "get_note has no parameter 'x'"),
        (["call", "get_note", "{}"], "get_note needs the parameter 'key'"),
        (["call", "nope"], "no tool named 'nope'"),
        (["call", "get_note", "[1]"], "one JSON object"),
        (["call", "get_note", "{bad"], "not JSON"),
        (["answer", "x"], "submitted with its tool 'submit_result'"),
        (["frobnicate"], "unknown command"),
    ],
)
def test_envgym_tool_names_what_is_wrong_with_a_command(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    [task_dir] = export_bundle(make_notes_bundle(tmp_path / "b"), tmp_path / "out")
    env_dir = task_dir / "environment"
    done = subprocess.run(
        [sys.executable, str(env_dir / "envgym" / "bin" / "envgym-tool"), *argv],
        capture_output=True, text=True, timeout=60, cwd=env_dir / "app",
        env={"ENVGYM_HOME": str(env_dir / "envgym"), "ENVGYM_STATE": str(env_dir / "app")},
    )  # fmt: skip
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (env_dir / "envgym" / "run" / "submission.json").exists()
