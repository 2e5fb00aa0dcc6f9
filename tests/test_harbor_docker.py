"""Harbor tasks on the Docker backend (envgym/envs/harbor/docker_image.py, docker_runtime.py).

The Dockerfile rewrite (what is kept, mapped onto the local base image, or refused) is tested
without an engine; episodes, the oracle and the probes of ``envgym check`` need the private
engine of scripts/docker_setup.sh (``@pytest.mark.docker``; the conftest fixture starts it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envgym.envs.harbor.check import check_task
from envgym.envs.harbor.docker_image import LOCAL_BASE, rewrite_dockerfile
from envgym.envs.harbor.dockerfile import DockerfileError
from envgym.envs.harbor.env import HarborEnv

DATASET = Path(__file__).resolve().parents[1] / "envgym" / "envs" / "harbor" / "dataset"


def _rewrite(text: str, *, local: tuple[str, ...] = (LOCAL_BASE,), packages: tuple[str, ...] = ("tar", "gzip"),
             workdir: str | None = None) -> Any:  # fmt: skip
    return rewrite_dockerfile(text, available=lambda image: image in local,
                              packages=lambda image: frozenset(packages), workdir_override=workdir)  # fmt: skip


# -- the rewrite, no engine ---------------------------------------------------------------------


def test_debian_and_python_bases_build_on_the_local_image() -> None:
    out = _rewrite(
        "FROM python:3.12-slim\nWORKDIR /app\nCOPY a.txt /app/a.txt\n"
        "RUN apt-get update && apt-get install -y tar gzip && rm -rf /var/lib/apt/lists/*\n"
        "RUN echo hi > b.txt && \\\n  chmod 600 b.txt\nENV A=1\n"
    )
    assert out.base == "python:3.12-slim" and out.image == LOCAL_BASE and out.workdir == "/app"
    lines = out.dockerfile.splitlines()
    assert lines[0] == f"FROM {LOCAL_BASE}"
    assert "COPY a.txt /app/a.txt" in lines and "ENV A=1" in lines
    assert any(
        line.startswith("RUN echo hi > b.txt &&") and line.endswith("chmod 600 b.txt")
        for line in lines
    )
    assert not any("apt-get" in line for line in lines)  # offline build: apt bookkeeping dropped


def test_an_image_the_engine_holds_is_used_as_is() -> None:
    out = _rewrite("FROM myorg/tool:1\n", local=("myorg/tool:1",))
    assert out.image == "myorg/tool:1" and out.dockerfile.startswith("FROM myorg/tool:1\n")
    assert out.workdir == "/app"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FROM alpine:3.19\n", "FROM alpine:3.19: not available in the local engine"),
        ("FROM ghcr.io/evil/image:latest\n", "ghcr.io/evil/image:latest"),
        ("ARG IMG=ubuntu\nFROM ${IMG}\n", "ARG before FROM"),
        ("FROM ubuntu:24.04\nFROM debian:12\n", "multi-stage"),
        ("FROM ubuntu:24.04\nCOPY --from=alpine:3 /bin/sh /x\n", "--from"),
        ("FROM ubuntu:24.04\nADD https://example.com/x.tgz /app/\n", "URL"),
        ("FROM ubuntu:24.04\nRUN --network=host curl x\n", "RUN flags"),
        ("FROM ubuntu:24.04\nRUN apt-get install -y cowsay\n", "lacks: cowsay"),
        ("FROM ubuntu:24.04\nRUN apt-get install -y 'a;b'\n", "not a package name"),
        ("FROM ubuntu:24.04\nRUN <<EOF\necho\nEOF\n", "heredocs"),
        ("FROM ubuntu:24.04\nONBUILD RUN x\n", "ONBUILD is not supported"),
        ("FROM ubuntu:24.04\nWORKDIR $HOME\n", "variables"),
        ("FROM --platform=linux/arm64 ubuntu:24.04\n", "expected FROM IMAGE"),
    ],
)
def test_what_could_pull_or_escape_is_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(DockerfileError, match=message.replace("$", r"\$").replace("+", r"\+")):
        _rewrite(text)


def test_a_missing_local_base_is_named() -> None:
    with pytest.raises(DockerfileError, match="envgym-sandbox:latest .*docker_setup.sh"):
        _rewrite("FROM debian:bookworm\n", local=())


@pytest.mark.parametrize("workdir", ["/app\nRUN rm -rf /", "/a b", "/app/../etc", "relative"])
def test_a_task_toml_workdir_is_validated_before_it_is_written(workdir: str) -> None:
    with pytest.raises(DockerfileError, match="working directory"):
        _rewrite("FROM ubuntu:24.04\n", workdir=workdir)


# -- episodes on the engine -----------------------------------------------------------------------


@pytest.fixture
def _docker(require_backend: Callable[[str], None]) -> None:
    require_backend("docker")


def _call(name: str, args: dict[str, Any], n: int = 0) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


@pytest.mark.heavy
@pytest.mark.docker
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("_docker")
def test_word_count_passes_every_check_probe_on_docker() -> None:
    """oracle 1, no-op 0 and every generic exploit 0, each a real episode in a container."""
    env = HarborEnv(DATASET / "word-count", sandbox="docker")
    try:
        result = check_task(env, env.tasks[0])
        assert result.error is None, result.error
        rewards = {p.name: p.reward for p in result.probes}
        assert rewards["oracle"] == 1.0 and rewards["noop"] == 0.0, result.problems
        assert result.ok, result.problems
    finally:
        env.close()


@pytest.mark.heavy
@pytest.mark.docker
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("_docker")
@pytest.mark.parametrize("task", ["python-fizzbuzz", "archive-logs", "fix-permissions"])
def test_oracle_one_and_noop_zero_on_docker(task: str) -> None:
    """A python:3.12-slim base, a Dockerfile with apt-get lines, a RUN building files."""
    env = HarborEnv(DATASET / task, sandbox="docker")
    try:
        env.reset()
        assert env.runtime(env.task).solve(env.current_episode).ok
        _, reward, terminated, _, info = env.step(_call("submit", {}))
        assert terminated and reward == 1.0, info["report"]
        env.reset()
        _, reward, _, _, info = env.step(_call("submit", {}))
        assert reward == 0.0, info["report"]  # the verifier ran and found the work undone
        assert info["report"]["test_exit_code"] is not None
    finally:
        env.close()


@pytest.mark.heavy
@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("_docker")
def test_tools_run_in_the_container_without_network(tmp_path: Path) -> None:
    env = HarborEnv(DATASET / "word-count", sandbox="docker")
    try:
        env.reset()
        obs, *_ = env.step(
            _call("bash", {"command": "cat /etc/hostname; id -u; pwd; ls /sys/class/net"})
        )
        reply = obs["messages"][-1]["content"]
        assert "envgym" in reply and "\n0\n" in reply and "/app" in reply
        assert "eth0" not in reply  # network_mode=none: loopback only
        env.step(_call("write_file", {"path": "/usr/local/bin/mine", "content": "x"}, 1))
        obs, *_ = env.step(_call("read_file", {"path": "/usr/local/bin/mine"}, 2))
        assert "1\tx" in obs["messages"][-1]["content"]  # root in its own container, as in Harbor
    finally:
        env.close()


@pytest.mark.heavy
@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("_docker")
def test_a_reward_link_is_refused_on_docker(tmp_path: Path) -> None:
    task_dir = tmp_path / "word-count"
    shutil.copytree(DATASET / "word-count", task_dir)
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho 1 > /tmp/one\nln -s /tmp/one /logs/verifier/reward.txt\n"
    )
    env = HarborEnv(task_dir, sandbox="docker")
    try:
        env.reset()
        _, reward, _, _, info = env.step(_call("submit", {}))
        assert reward == 0.0 and "refused" in info["report"]["reason"]
    finally:
        env.close()


@pytest.mark.docker
@pytest.mark.timeout(120)
@pytest.mark.usefixtures("_docker")
def test_a_from_the_engine_lacks_is_refused_naming_it(tmp_path: Path) -> None:
    task_dir = tmp_path / "word-count"
    shutil.copytree(DATASET / "word-count", task_dir)
    dockerfile = task_dir / "environment" / "Dockerfile"
    dockerfile.write_text("FROM alpine:3.19\nWORKDIR /app\n")
    env = HarborEnv(task_dir, sandbox="docker")
    try:
        with pytest.raises(DockerfileError, match="alpine:3.19"):
            env.reset()
    finally:
        env.close()


@pytest.mark.heavy
@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("_docker")
def test_the_verifier_sees_a_fresh_logs_not_the_agents(tmp_path: Path) -> None:
    """A verifier that keeps a reward.txt it finds: only the agent could have put one there."""
    task_dir = tmp_path / "word-count"
    shutil.copytree(DATASET / "word-count", task_dir)
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\ntest -e /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    env = HarborEnv(task_dir, sandbox="docker")
    try:
        env.reset()
        env.step(_call("bash", {"command": "echo 1 > /logs/verifier/reward.txt"}))
        _, reward, _, _, info = env.step(_call("submit", {}, 1))
        assert reward == 0.0, info["report"]
    finally:
        env.close()


def test_envgym_check_passes_sandbox_to_the_harbor_check() -> None:
    """``envgym check harbor:PATH --sandbox docker`` reaches HarborEnv (the handler takes it)."""
    from envgym.envs.harbor.registration import register_envs
    from envgym.registry import check_handler

    register_envs()
    handler = check_handler("harbor:envgym/envs/harbor/dataset")
    assert handler is not None and "sandbox" in handler.options
    for given, picked in (("docker", "docker"), ("bwrap", "bwrap"), (None, "bwrap")):
        env = HarborEnv(DATASET / "word-count", sandbox=given)
        env.close()
        assert env.sandbox == picked
