"""envgym/envs/swe/interchange.py: SWE-bench JSONL and Harbor task directories, both ways."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from swe_history import ISSUES, OPS_BUGGY, make_history

from envgym.envs.swe.instance import InstanceError, SweInstance, write_instances
from envgym.envs.swe.interchange import (
    HarborOptions,
    _toml_value,
    export_harbor,
    export_harbor_task,
    export_jsonl,
    import_harbor,
    import_harbor_dir,
    import_jsonl,
)
from envgym.envs.swe.miner import mine
from envgym.envs.swe.repo import checkout, git

SHA = "0123456789abcdef0123456789abcdef01234567"
SWE_BENCH = SweInstance(
    instance_id="owner__name-12",
    repo="owner/name",
    base_commit=SHA,
    problem_statement='Crash on "quotes"\nand ENVGYM_PATCH lines ünïcode',
    patch="ENVGYM_PATCH\ndiff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1,2 @@\n x\n+ENVGYM_PATCH\n",
    test_patch="diff --git a/tests/t.py b/tests/t.py\n--- a/tests/t.py\n+++ b/tests/t.py\n"
    "@@ -1 +1 @@\n-a\n+b\n",
    fail_to_pass=("tests/t.py::test_a[x y]",),
    pass_to_pass=("tests/t.py::test_b",),
    version="1.2",
    environment_setup_commit=SHA,
    created_at="2024-01-01T00:00:00Z",
    hints_text="see #11",
    metadata={
        "difficulty": "<15 min",
        "recipe": {"python": "3.10", "install": ["pip install -e .[test]"]},
    },
)


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[SweInstance]]:
    root = tmp_path_factory.mktemp("interchange")
    (root / "issues.json").write_text(json.dumps(ISSUES))
    make_history(root / "calc")
    return root / "calc", mine(root / "calc", issues=root / "issues.json").candidates


@pytest.mark.timeout(60)
def test_jsonl_to_harbor_to_jsonl_is_exact(mined, tmp_path: Path) -> None:
    _, candidates = mined
    instances = [*candidates, SWE_BENCH]
    source = export_jsonl(tmp_path / "in.jsonl", instances)
    tasks = export_harbor(import_jsonl(source), tmp_path / "harbor")
    assert [t.name for t in tasks] == [i.instance_id for i in instances]
    back = import_harbor_dir(tmp_path / "harbor")
    assert sorted(back, key=lambda i: i.instance_id) == sorted(
        instances, key=lambda i: i.instance_id
    )
    write_instances(tmp_path / "out.jsonl", [import_harbor(t) for t in tasks])
    assert (tmp_path / "out.jsonl").read_bytes() == source.read_bytes()


@pytest.mark.timeout(60)
def test_a_relative_output_directory_works(
    mined, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, candidates = (
        mined  # git archive -o runs in the source repository: the path must be absolute there
    )
    monkeypatch.chdir(tmp_path)
    [task] = export_harbor(candidates[:1], "relative-out")
    assert task == (tmp_path / "relative-out" / candidates[0].instance_id).resolve()
    assert import_harbor(task) == candidates[0]


@pytest.mark.timeout(60)
def test_layout_follows_harbor(mined, tmp_path: Path) -> None:
    repo, candidates = mined
    local = export_harbor_task(
        candidates[0], tmp_path / "local", options=HarborOptions(agent_timeout_s=99.0, cpus=3)
    )
    names = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    assert names == [
        "environment/Dockerfile",
        "environment/repo.tar",
        "instruction.md",
        "solution/solve.sh",
        "task.toml",
        "tests/config.json",
        "tests/test.patch",
        "tests/test.sh",
    ]
    config = tomllib.loads((local / "task.toml").read_text())
    assert config["version"] == "1.0" and config["agent"]["timeout_sec"] == 99.0
    assert config["verifier"]["timeout_sec"] > 0 and config["environment"]["cpus"] == 3
    assert config["environment"]["build_timeout_sec"] > 0
    assert config["metadata"]["instance_id"] == candidates[0].instance_id
    assert (local / "instruction.md").read_text() == candidates[0].problem_statement
    docker = (local / "environment/Dockerfile").read_text()
    assert "FROM python:3.11-slim" in docker and "ADD repo.tar /testbed/" in docker
    assert "RUN pip install -e ." in docker and "git tag envgym-base" in docker
    with tarfile.open(local / "environment/repo.tar") as tar:
        members = tar.getnames()
        assert "src/calc/ops.py" in members and ".git" not in members
    assert os.access(local / "tests/test.sh", os.X_OK) and os.access(
        local / "solution/solve.sh", os.X_OK
    )

    remote = export_harbor_task(SWE_BENCH, tmp_path / "remote")
    docker = (remote / "environment/Dockerfile").read_text()
    assert "FROM python:3.10-slim" in docker and "RUN pip install -e .[test]" in docker
    assert f"git fetch -q --depth 1 https://github.com/owner/name.git {SHA}" in docker
    assert not (remote / "environment/repo.tar").exists()
    test_sh = (remote / "tests/test.sh").read_text()
    assert "'tests/t.py::test_a[x y]' tests/t.py::test_b" in test_sh
    assert "/logs/verifier/reward.txt" in test_sh
    for script in ("tests/test.sh", "solution/solve.sh"):
        subprocess.run(["bash", "-n", str(remote / script)], check=True)
    assert "<<'ENVGYM_PATCH_'" in (remote / "solution/solve.sh").read_text()
    with pytest.raises(FileExistsError):
        export_harbor_task(SWE_BENCH, remote)
    assert export_harbor_task(SWE_BENCH, remote, overwrite=True) == remote


def _run_script(task: Path, script: str, work: Path, logs: Path) -> None:
    """Run a task's script against `work` instead of /testbed, logging into `logs`."""
    text = (task / script).read_text().replace("/testbed", str(work))
    text = text.replace("/logs/verifier", str(logs))
    local = task / (script + ".local")
    local.write_text(text)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(work / "src"),
    }
    subprocess.run(
        ["bash", str(local)], cwd=work, env=env, check=False, timeout=120, capture_output=True
    )


@pytest.mark.timeout(120)
def test_exported_scripts_grade_the_base_0_and_the_gold_patch_1(mined, tmp_path: Path) -> None:
    repo, candidates = mined
    fix = next(c for c in candidates if c.problem_statement.startswith("Fix add()"))
    fix = SweInstance(
        **{
            **fix.__dict__,
            "fail_to_pass": ("tests/test_add.py::test_add",),
            "pass_to_pass": ("tests/test_ops.py::test_sub",),
        }
    )
    task = export_harbor_task(fix, tmp_path / "task")
    for name, solve, reward in (("base", False, "0"), ("gold", True, "1")):
        work = checkout(repo, fix.base_commit, tmp_path / name)
        git(["tag", "envgym-base"], cwd=work)
        assert (work / "src/calc/ops.py").read_text() == OPS_BUGGY
        (work / "tests/test_add.py").write_text("def test_add():\n    pass\n")  # agent's own
        if solve:
            _run_script(task, "solution/solve.sh", work, tmp_path / "logs" / name)
        _run_script(task, "tests/test.sh", work, tmp_path / "logs" / name)
        assert (tmp_path / "logs" / name / "reward.txt").read_text().strip() == reward


@pytest.mark.timeout(30)
def test_foreign_tasks_import_as_far_as_they_carry_fields(tmp_path: Path) -> None:
    adapter = tmp_path / "adapter-task"
    (adapter / "tests").mkdir(parents=True)
    (adapter / "instruction.md").write_text("Fix the crash in the parser.")
    datum = {
        "instance_id": "a__b-1",
        "repo": "a/b",
        "base_commit": SHA,
        "patch": "p",
        "test_patch": "t",
        "FAIL_TO_PASS": '["t::x"]',
        "PASS_TO_PASS": "[]",
        "version": "0.1",
        "difficulty": "hard",
    }
    (adapter / "tests/config.json").write_text(json.dumps(datum))
    got = import_harbor(adapter)
    assert got.problem_statement == "Fix the crash in the parser."
    assert got.fail_to_pass == ("t::x",) and got.metadata == {"difficulty": "hard"}

    bare = tmp_path / "bare-task"
    export_harbor_task(SWE_BENCH, bare)
    (bare / "tests/config.json").unlink()
    got = import_harbor(bare)  # from task.toml, instruction.md, solve.sh's heredoc, test.patch
    assert (got.instance_id, got.repo, got.base_commit) == ("owner__name-12", "owner/name", SHA)
    assert got.problem_statement == SWE_BENCH.problem_statement
    assert got.patch == SWE_BENCH.patch and got.test_patch == SWE_BENCH.test_patch


@pytest.mark.timeout(30)
def test_unusable_directories_name_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(InstanceError, match="no such task directory"):
        import_harbor(tmp_path / "absent")
    task = tmp_path / "t"
    task.mkdir()
    (task / "instruction.md").write_text("x")
    with pytest.raises(InstanceError, match="missing task.toml") as caught:
        import_harbor(task)
    assert caught.value.field == "task.toml"
    (task / "task.toml").write_text('version = "1.0"\n[metadata]\nrepo = "a/b"\n')
    with pytest.raises(InstanceError, match=r"missing tests/config.json.*base_commit"):
        import_harbor(task)
    (task / "task.toml").write_text("version = \n")
    with pytest.raises(InstanceError, match="not valid TOML"):
        import_harbor(task)
    (task / "tests").mkdir()
    (task / "tests/config.json").write_text("{broken")
    with pytest.raises(InstanceError, match="config.json: not valid JSON"):
        import_harbor(task)
    (task / "tests/config.json").write_text(
        json.dumps(
            {
                "instance_id": "x",
                "repo": "r",
                "base_commit": "nope",
                "problem_statement": "",
                "patch": "",
                "test_patch": "",
            }
        )
    )
    with pytest.raises(InstanceError) as caught:
        import_harbor(task)
    assert caught.value.field == "base_commit" and "config.json" in caught.value.where


@pytest.mark.timeout(60)
@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.lists(st.text(max_size=8), max_size=3),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
    )
)
def test_toml_values_read_back_as_written(value: object) -> None:
    parsed = tomllib.loads(f"v = {_toml_value(value)}\n")["v"]
    assert parsed == value
