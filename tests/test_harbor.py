"""Harbor task directories as envgym environments (envgym/envs/harbor, docs/HARBOR.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import envgym
from envgym import registry
from envgym.envs.harbor.check import EXPLOITS, check_path
from envgym.envs.harbor.dockerfile import DockerfileError, parse_dockerfile
from envgym.envs.harbor.env import HarborEnv
from envgym.envs.harbor.registration import register_envs
from envgym.envs.harbor.runtime import parse_reward
from envgym.envs.harbor.task import HarborTaskError, load_task, load_tasks

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "envgym" / "envs" / "harbor" / "dataset"
WORD_COUNT = DATASET / "word-count"
HARBOR_PY = REPO / ".venv-harbor" / "bin" / "python"


@pytest.fixture(autouse=True)
def _bwrap(require_backend: Any) -> None:
    require_backend("bwrap")


def _call(name: str, args: dict[str, Any], n: int = 0) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


def _copy_task(tmp_path: Path, name: str = "word-count") -> Path:
    dest = tmp_path / name
    shutil.copytree(DATASET / name, dest)
    return dest


# -- loading: the typed task and hostile directories ---------------------------------------------


def test_load_task_reads_layout_and_limits() -> None:
    task = load_task(WORD_COUNT)
    assert task.id == "word-count"
    assert task.limits.verifier_timeout_s == 60.0 and task.limits.agent_timeout_s == 300.0
    assert task.limits.memory_mb == 1024 and task.limits.build_timeout_s == 120.0
    assert "test.sh" in task.tests.files and task.has_solution
    assert task.dockerfile is not None and task.dockerfile.startswith("FROM ubuntu")
    assert "poem.txt" in task.environment.files


def test_dataset_has_twenty_tasks_with_unique_ids() -> None:
    tasks = load_tasks(DATASET)
    assert len(tasks) >= 20
    assert len({t.id for t in tasks}) == len(tasks)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: (
                (d / "tests" / "test.sh").unlink()
                or os.symlink("/etc/passwd", d / "tests" / "test.sh")
            ),
            "symbolic link",
        ),
        (
            lambda d: (
                (d / "instruction.md").unlink() or os.symlink("/etc/shadow", d / "instruction.md")
            ),
            "symbolic link",
        ),
        (lambda d: os.symlink("/root", d / "environment" / "escape"), "symbolic link"),
        (lambda d: (d / "instruction.md").unlink(), "instruction.md: is missing"),
        (lambda d: (d / "tests" / "test.sh").unlink(), "has no test.sh"),
        (lambda d: (d / "task.toml").write_text("[verifier\n"), "not valid TOML"),
        (
            lambda d: (d / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n"),
            "positive number",
        ),
        (lambda d: (d / "task.toml").write_text('[task]\nname = "org/..x"\n'), "not a plain name"),
        (lambda d: (d / "task.toml").write_text("[environment]\ngpus = 1\n"), "GPU"),
        (lambda d: (d / "task.toml").write_text('[environment]\nos = "windows"\n'), "only linux"),
        (lambda d: (d / "task.toml").write_text("[[steps]]\nname = 'a'\n"), "multi-step"),
        (lambda d: (d / "task.toml").write_text('[verifier.env]\n"A B" = "x"\n'), "NAME"),
        (lambda d: (d / "instruction.md").write_bytes(b"\xff\xfe"), "not UTF-8"),
        (lambda d: (d / "instruction.md").write_bytes(b"x" * (2 << 20)), "too big"),
        (lambda d: os.mkfifo(d / "tests" / "pipe"), "not a regular file"),
    ],
)
def test_hostile_task_dirs_are_refused_by_name(tmp_path: Path, mutate: Any, message: str) -> None:
    task_dir = _copy_task(tmp_path)
    mutate(task_dir)
    with pytest.raises(HarborTaskError, match=message):
        load_task(task_dir)


def test_dataset_entry_that_is_a_link_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    shutil.copytree(WORD_COUNT, root / "a")
    os.symlink(WORD_COUNT, root / "b")
    with pytest.raises(HarborTaskError, match="symbolic link"):
        load_tasks(root)


# -- the Dockerfile subset ------------------------------------------------------------------------


def test_dockerfile_subset_maps_to_a_plan() -> None:
    plan = parse_dockerfile(
        "FROM python:3.12-slim\nWORKDIR /app\nENV A=1\nRUN apt-get update && apt-get install -y tar && "
        'rm -rf /var/lib/apt/lists/*\nCOPY x.txt data/\nRUN echo hi > y\nCMD ["bash"]\n'
    )
    assert plan.workdir == "/app" and plan.roots == ("app",) and dict(plan.env) == {"A": "1"}
    kinds = [s.kind for s in plan.steps]
    assert kinds == ["mkdir", "copy", "run"]  # the apt line is checked and dropped
    assert plan.steps[1].dest == "/app/data/"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FROM alpine:3\n", "stands in only"),
        (
            "FROM ubuntu:24.04\nRUN apt-get install -y surely-not-a-package-xyz\n",
            "rootfs lacks: surely-not-a-package-xyz",
        ),
        ("FROM ubuntu:24.04\nCOPY x /usr/local/bin/x\n", "belongs to the rootfs"),
        ("FROM ubuntu:24.04\nWORKDIR /logs\n", "belongs to the rootfs or to Harbor"),
        ("FROM ubuntu:24.04\nCOPY --from=build /a /app/a\n", "only --chown"),
        ("FROM ubuntu:24.04\nADD https://example.org/x /app/x\n", "only plain paths"),
        ("FROM ubuntu:24.04\nCOPY ../secret /app/s\n", "only plain paths"),
        ("FROM ubuntu:24.04\nUSER nobody\n", "only root"),
        ("FROM ubuntu:24.04\nARG X=1\n", "ARG is not supported"),
        ("FROM ubuntu:24.04\nRUN <<EOF\necho\nEOF\n", "heredocs"),
        ("FROM ubuntu:24.04\nFROM debian:12\n", "multi-stage"),
        ("WORKDIR /app\n", "before FROM"),
    ],
)
def test_unsupported_dockerfiles_are_refused_clearly(text: str, message: str) -> None:
    with pytest.raises(DockerfileError, match=message):
        parse_dockerfile(text)


# -- the reward: strict -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reward", "ok"),
    [("1\n", 1.0, True), ("0", 0.0, True), (" 0.25 \n", 0.25, True), ("1.5", 0.0, False), ("-0.1", 0.0, False),
     ("nan", 0.0, False), ("inf", 0.0, False), ("1 1", 0.0, False), ("yes", 0.0, False), ("", 0.0, False),
     ("1\n0\n", 0.0, False)],
)  # fmt: skip
def test_parse_reward_is_strict(text: str, reward: float, ok: bool) -> None:
    value, reason = parse_reward(text)
    assert value == reward
    assert (reason == "ok") is ok


# -- episodes -------------------------------------------------------------------------------------


def test_make_harbor_scheme_runs_an_episode_with_jailed_tools() -> None:
    register_envs()
    env = envgym.make(f"harbor:{WORD_COUNT}")
    try:
        obs, info = env.reset()
        assert info["task_id"] == "word-count"
        assert {t["function"]["name"] for t in obs["tools"]} == {
            "bash",
            "read_file",
            "write_file",
            "submit",
        }
        obs, *_ = env.step(
            _call("bash", {"command": "wc -w < poem.txt; id -u; cat /etc/hostname 2>&1 | head -1"})
        )
        reply = obs["messages"][-1]["content"]
        assert reply.startswith("21\n") and "[exit code 0]" in reply
        obs, *_ = env.step(_call("write_file", {"path": "count.txt", "content": "21\n"}))
        assert "wrote 3 characters" in obs["messages"][-1]["content"]
        obs, *_ = env.step(_call("read_file", {"path": "/app/count.txt"}))
        assert obs["messages"][-1]["content"].strip() == "1\t21"
        _, reward, terminated, truncated, info = env.step(_call("submit", {}))
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["report"]["reason"] == "ok"
    finally:
        env.close()


def test_a_wrong_answer_scores_zero_and_episodes_are_fresh() -> None:
    env = HarborEnv(WORD_COUNT)
    try:
        env.reset()
        env.step(_call("write_file", {"path": "count.txt", "content": "20\n"}))
        _, reward, *_ = env.step(_call("submit", {}))
        assert reward == 0.0
        obs, _ = env.reset()  # the last episode's count.txt is gone
        obs, *_ = env.step(_call("bash", {"command": "ls"}))
        assert "count.txt" not in obs["messages"][-1]["content"]
    finally:
        env.close()


def test_agent_timeout_from_task_toml_truncates_and_still_grades(tmp_path: Path) -> None:
    task_dir = _copy_task(tmp_path)
    toml = (task_dir / "task.toml").read_text().replace("timeout_sec = 300.0", "timeout_sec = 1.0")
    (task_dir / "task.toml").write_text(toml)
    env = HarborEnv(task_dir)
    try:
        env.reset()
        obs, reward, terminated, truncated, info = env.step(_call("bash", {"command": "sleep 5"}))
        assert truncated and not terminated and info["truncated_by"] == "time_budget"
        assert "killed: the command ran over" in obs["messages"][-1]["content"]
        assert reward == 0.0 and "report" in info
    finally:
        env.close()


@pytest.mark.parametrize("reward_text", ["1 # solved", "2", "1\n1\n"])
def test_a_verifier_writing_a_malformed_reward_scores_zero_with_a_reason(
    tmp_path: Path, reward_text: str
) -> None:
    task_dir = _copy_task(tmp_path)
    (task_dir / "tests" / "test.sh").write_text(
        f"#!/bin/bash\nmkdir -p /logs/verifier\nprintf '{reward_text}' > /logs/verifier/reward.txt\n"
    )
    env = HarborEnv(task_dir)
    try:
        env.reset()
        _, reward, _, _, info = env.step(_call("submit", {}))
        assert reward == 0.0 and info["report"]["reason"] != "ok"
    finally:
        env.close()


def test_a_reward_file_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    task_dir = _copy_task(tmp_path)
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho 1 > /tmp/one\nmkdir -p /logs/verifier\nln -s /tmp/one /logs/verifier/reward.txt\n"
    )
    env = HarborEnv(task_dir)
    try:
        env.reset()
        _, reward, _, _, info = env.step(_call("submit", {}))
        assert reward == 0.0 and "refused" in info["report"]["reason"]
    finally:
        env.close()


def test_the_task_never_runs_on_the_host(tmp_path: Path) -> None:
    marker = tmp_path / "host-marker"
    task_dir = _copy_task(tmp_path)
    (task_dir / "environment" / "Dockerfile").write_text(
        f"FROM ubuntu:24.04\nWORKDIR /app\nRUN touch {marker} || true\n"
    )
    (task_dir / "tests" / "test.sh").write_text(
        f"#!/bin/bash\ntouch {marker}\necho 0 > /logs/verifier/reward.txt\n"
    )
    env = HarborEnv(task_dir)
    try:
        env.reset()
        env.step(_call("bash", {"command": f"touch {marker}; cat /etc/shadow"}))
        env.step(_call("submit", {}))
    finally:
        env.close()
    assert not marker.exists()


# -- envgym check: oracle, no-op, exploits ------------------------------------------------------


def test_check_passes_a_sound_task() -> None:
    (result,) = check_path(str(WORD_COUNT))
    assert result.ok, result.problems
    assert {p.name for p in result.probes} == {"oracle", "noop", *EXPLOITS}


@pytest.mark.parametrize(
    ("test_sh", "caught"),
    [
        # pays whatever the agent did
        ("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n", "noop"),
        # runs whatever test script the workspace holds
        ("#!/bin/bash\nif [ -x /app/tests/test.sh ]; then /app/tests/test.sh; else echo 0 > /logs/verifier/reward.txt; fi\n", "rewrite-tests"),
        # only checks that the original text is gone: an emptied workspace passes
        ("#!/bin/bash\nif grep -q fog /app/poem.txt 2>/dev/null; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n", "empty-workdir"),
    ],
)  # fmt: skip
def test_check_reports_a_verifier_an_agent_can_satisfy_without_solving(
    tmp_path: Path, test_sh: str, caught: str
) -> None:
    task_dir = _copy_task(tmp_path)
    (task_dir / "tests" / "test.sh").write_text(test_sh)
    (result,) = check_path(str(task_dir))
    assert not result.ok
    failed = {p.name for p in result.probes if not p.ok}
    assert caught in failed, result.problems


def test_check_reports_an_oracle_that_fails(tmp_path: Path) -> None:
    task_dir = _copy_task(tmp_path)
    (task_dir / "solution" / "solve.sh").write_text("#!/bin/bash\necho 7 > /app/count.txt\n")
    (result,) = check_path(str(task_dir))
    assert [p.name for p in result.probes if not p.ok] == ["oracle"]


def test_envgym_check_cli_claims_the_harbor_scheme(tmp_path: Path) -> None:
    register_envs()
    handler = registry.check_handler(f"harbor:{WORD_COUNT}")
    assert handler is not None and handler.name == "harbor"
    assert handler.run(f"harbor:{tmp_path}", as_json=True) == 2  # no task there: a clear error


def test_descriptor_bundle_lists_the_dataset_for_eval() -> None:
    register_envs()
    from envgym.bundle import load_bundle

    bundle = load_bundle(registry.resolve_bundle(f"harbor:{DATASET}"))
    assert sorted(t.id for t in bundle.tasks) == sorted(t.id for t in load_tasks(DATASET))
    factory = registry.env_factory(f"harbor:{DATASET}", parser="hermes")
    env = factory()
    try:
        _, info = env.reset(options={"task": "tsv-to-csv"})
        assert info["task_id"] == "tsv-to-csv"
    finally:
        env.close()


# -- harbor itself as the reference -------------------------------------------------------------

_REFERENCE = """
import json, sys
from harbor.models.task.task import Task
out = []
for path in sys.argv[1:]:
    t = Task(path)
    c = t.config
    out.append({"name": t.name, "instruction": t.instruction, "verifier": c.verifier.timeout_sec,
                "agent": c.agent.timeout_sec, "build": c.environment.build_timeout_sec,
                "memory_mb": c.environment.memory_mb, "valid": Task.is_valid_dir(path)})
print(json.dumps(out))
"""


def test_harbor_loads_every_dataset_task_as_we_do() -> None:
    if not HARBOR_PY.exists():
        pytest.fail("no .venv-harbor: run scripts/harbor_venv.sh (scripts/setup.sh does)")
    tasks = load_tasks(DATASET)
    done = subprocess.run([str(HARBOR_PY), "-c", _REFERENCE, *(str(t.root) for t in tasks)],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    for ours, ref in zip(tasks, theirs, strict=True):
        assert ref["valid"] and ref["name"] == ours.id
        assert ref["instruction"] == ours.instruction
        assert (ref["verifier"], ref["agent"], ref["build"], ref["memory_mb"]) == (
            ours.limits.verifier_timeout_s, ours.limits.agent_timeout_s, ours.limits.build_timeout_s, ours.limits.memory_mb)  # fmt: skip


def test_the_agents_logs_are_not_what_the_verifier_writes_into(tmp_path: Path) -> None:
    """A verifier that writes no reward on failure (``set -e``) is sound here: the agent's own
    /logs/verifier/reward.txt is discarded, the verifier gets a fresh /logs."""
    task_dir = _copy_task(tmp_path)
    (task_dir / "tests" / "test.sh").write_text(
        '#!/bin/bash\nset -e\n[ "$(cat /app/count.txt)" = 21 ]\necho 1 > /logs/verifier/reward.txt\n'
    )
    (result,) = check_path(str(task_dir))
    assert result.ok, result.problems


def test_envgym_eval_runs_a_harbor_dataset(tmp_path: Path) -> None:
    """``envgym eval harbor:PATH`` goes through make: the random agent's episodes are graded by
    the tasks' own verifiers and stored under the descriptor bundle's task ids."""
    from envgym.evaluate import EvalConfig, evaluate
    from envgym.store import Store

    register_envs()
    run = evaluate(f"harbor:{DATASET}", "random", EvalConfig(k=1, limit=2, concurrency=1),
                   store=Store(f"sqlite:///{tmp_path / 'eval.db'}"))  # fmt: skip
    assert run.ran == 2 and len(run.episodes) == 2
    assert {e.task_id for e in run.episodes} == {t.id for t in load_tasks(DATASET)[:2]}
    assert all(e.reward == 0.0 for e in run.episodes)  # a random agent does not count words
    assert all(e.report["task_id"] == e.task_id and "reason" in e.report for e in run.episodes)


@pytest.mark.parametrize(
    ("dockerfile", "message"),
    [
        ("FROM python:3.12-slim\nWORKDIR /app\nRUN pip install --no-cache-dir requests\n", "line 3 .*failed in the jail"),
        ("FROM ubuntu:24.04\nWORKDIR /app\nCOPY missing.txt /app/\n", "COPY source 'missing.txt' is not in environment/"),
    ],
)  # fmt: skip
def test_a_build_the_rootfs_cannot_do_fails_at_reset_naming_the_line(
    tmp_path: Path, dockerfile: str, message: str
) -> None:
    task_dir = _copy_task(tmp_path)
    (task_dir / "environment" / "Dockerfile").write_text(dockerfile)
    env = HarborEnv(task_dir)
    try:
        with pytest.raises(RuntimeError, match=message):
            env.reset()
    finally:
        env.close()


def test_build_run_lines_shape_the_pristine_tree_once() -> None:
    env = HarborEnv(DATASET / "rename-jpeg")
    try:
        env.reset()
        obs, *_ = env.step(_call("bash", {"command": "ls photos | tr '\\n' ' '"}))
        assert obs["messages"][-1]["content"].startswith(
            "beach.jpeg city.jpeg dog.jpeg logo.png notes.txt sunset.jpeg"
        )
        env.step(_call("bash", {"command": "rm -rf photos"}))
        env.reset()  # the next episode starts from the built tree again
        obs, *_ = env.step(_call("bash", {"command": "ls photos | wc -l"}))
        assert obs["messages"][-1]["content"].startswith("6\n")
    finally:
        env.close()


def test_the_verifier_does_not_run_python_code_the_agent_planted_in_its_home(
    tmp_path: Path,
) -> None:
    """The agent's HOME (/tmp) survives into grading; a usercustomize.py there must not run in
    the verifier's python3 (a fresh HOME, no user site)."""
    task_dir = _copy_task(tmp_path)
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\npython3 -c pass\n[ -f /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt\n"
    )
    (result,) = check_path(str(task_dir))
    assert {p.name: p.reward for p in result.probes}["python-usercustomize"] == 0.0


def test_a_longer_caller_budget_does_not_lift_the_tasks_agent_timeout(tmp_path: Path) -> None:
    task_dir = _copy_task(tmp_path)
    toml = (task_dir / "task.toml").read_text().replace("timeout_sec = 300.0", "timeout_sec = 1.0")
    (task_dir / "task.toml").write_text(toml)
    env = HarborEnv(task_dir, time_budget_s=600.0)  # what `envgym eval` passes every env
    try:
        env.reset()
        *_, truncated, info = env.step(_call("bash", {"command": "sleep 3"}))
        assert truncated and info["truncated_by"] == "time_budget"
    finally:
        env.close()


def test_the_harbor_family_is_declared_as_an_entry_point() -> None:
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert (
        pyproject["project"]["entry-points"]["envgym.envs"]["harbor"]
        == "envgym.envs.harbor.registration:register_envs"
    )


def test_the_build_timeout_of_task_toml_bounds_the_run_lines(tmp_path: Path) -> None:
    task_dir = _copy_task(tmp_path)
    toml = (
        (task_dir / "task.toml")
        .read_text()
        .replace("build_timeout_sec = 120.0", "build_timeout_sec = 1.0")
    )
    (task_dir / "task.toml").write_text(toml)
    (task_dir / "environment" / "Dockerfile").write_text(
        "FROM ubuntu:24.04\nWORKDIR /app\nRUN sleep 5\n"
    )
    env = HarborEnv(task_dir)
    try:
        with pytest.raises(RuntimeError, match="build_timeout_sec = 1 s"):
            env.reset()
    finally:
        env.close()
