"""A Harbor task on the Docker engine: its image built from its Dockerfile, one container per
episode, every command a ``docker exec`` in it (``HarborEnv(..., sandbox="docker")``).

This is Harbor's own model: the agent is root in the task's container and may write anywhere in
it; the container has no network (``network_mode=none``), a memory, CPU and process limit from
task.toml, and no capabilities beyond Docker's defaults minus raw sockets and mknod.

Commands: ``bash -c`` under ``timeout -s KILL`` and ``ulimit -f`` (``storage_mb``), its output
sent to files in the container and read back as bounded tails, so a command that floods or
leaves a background process holding its output cannot stall the host.

Grading, as in runtime.py: every process of the agent is killed (``kill -9 -1``: all but the
container's pid 1), ``/logs`` and ``/tests`` are removed and made fresh, a fresh copy of
``tests/`` is put at ``/tests``, and ``test.sh`` runs with a fresh HOME (``/logs/home``) and
Python's user site off.  The host reads ``/logs/verifier/reward.txt`` back through the engine's
archive API: a regular file of at most 4 KiB, else reward 0 with the reason.
"""

from __future__ import annotations

import io
import itertools
import shlex
import tarfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.envs.harbor.docker_image import DockerBuild, build_context, rewrite_dockerfile
from envgym.envs.harbor.dockerfile import DockerfileError
from envgym.envs.harbor.runtime import MAX_REWARD_BYTES, VERIFIER_HOME, GradeResult, parse_reward
from envgym.envs.harbor.task import HarborTask, TaskFiles
from envgym.sandbox.base import SandboxUnavailable
from envgym.sandbox.command_types import CommandResult
from envgym.sandbox.docker_backend import LABEL, engine_url

__all__ = ["DockerEpisode", "DockerTaskRuntime"]

_DEFAULT_DOCKERFILE = "FROM ubuntu:24.04\nWORKDIR /app\n"
IO_DIR = "/run/envgym-io"
# pid 1 that outlives `kill -9 -1` (the kernel never delivers it to init) and reaps its sleep.
# It also makes Harbor's /logs/agent and /logs/verifier, saving an exec on the reset path, and
# ends after $1 minutes: a container whose host process died does not run (and stay) forever
# (it is started with auto_remove).
_PID1 = [
    "/bin/sh",
    "-c",
    'mkdir -p /logs/agent /logs/verifier; trap "exit 0" TERM; i=0; '
    'while [ "$i" -lt "$1" ]; do sleep 60 & wait $!; i=$((i + 1)); done',
    "envgym",
]
LIFETIME_S = 6 * 3600  # beyond the task's own agent + verifier timeouts
_WRAP = 'mkdir -p -m 700 "${4%/*}" && ulimit -f "$1" && exec timeout -s KILL "$2" bash -c "$3" </dev/null >"$4.out" 2>"$4.err"'


@dataclass(frozen=True)
class DockerPlan:
    workdir: str


@dataclass
class DockerEpisode:
    dir: Path
    plan: DockerPlan
    container: str  # the container's id


def _tar(files: TaskFiles) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in sorted(files.dirs):
            info = tarfile.TarInfo(rel)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for rel, (data, mode) in sorted(files.files.items()):
            info = tarfile.TarInfo(rel)
            info.size, info.mode = len(data), mode & 0o755 | 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerTaskRuntime:
    """A task's image (built once) and its episodes' containers, commands and grading."""

    def __init__(self, task: HarborTask, workdir: Path, *, command_timeout_s: float = 120.0,
                 output_bytes: int = 64 * 1024) -> None:  # fmt: skip
        import docker

        self.task = task
        self.dir = workdir
        self.command_timeout_s = command_timeout_s
        self.output_bytes = output_bytes
        try:
            self.client = docker.DockerClient(base_url=engine_url(), timeout=600)
            self.client.ping()
        except Exception as err:  # noqa: BLE001 - no engine: said in words
            raise SandboxUnavailable(
                f"no Docker engine at {engine_url()}: {err} (start one with scripts/docker_setup.sh)"
            ) from None
        self._packages: dict[str, frozenset[str]] = {}
        self.build_spec: DockerBuild = rewrite_dockerfile(
            task.dockerfile or _DEFAULT_DOCKERFILE, available=self._available,
            packages=self._base_packages, workdir_override=task.workdir,
        )  # fmt: skip
        self.plan = DockerPlan(self.build_spec.workdir)
        self.image = ""
        self._calls = itertools.count()
        self._episodes = 0
        self._containers: list[str] = []

    # -- images ------------------------------------------------------------------------------
    def _available(self, image: str) -> bool:
        import docker

        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as err:
            raise DockerfileError(f"FROM {image}: the engine refused the name: {err}") from None
        return True

    def _base_packages(self, image: str) -> frozenset[str]:
        if image not in self._packages:
            out = self.client.containers.run(image, ["dpkg-query", "-W", "-f=${Package}\\n"],
                                             network_mode="none", remove=True, stderr=False)  # fmt: skip
            self._packages[image] = frozenset(out.decode(errors="replace").split())
        return self._packages[image]

    def build(self) -> None:
        """The task's image from the rewritten Dockerfile: no network, within the task's memory
        and build timeout; named by the context's digest, so reused when unchanged."""
        if self.image:
            return
        context, digest = build_context(self.task, self.build_spec.dockerfile)
        tag = f"envgym-harbor:{digest[:24]}"
        if not self._available(tag):
            import docker

            try:
                self.client.images.build(fileobj=io.BytesIO(context), custom_context=True, tag=tag, pull=False,
                                         network_mode="none", rm=True, forcerm=True,
                                         labels={LABEL: "harbor", "envgym.harbor.task": self.task.id},
                                         container_limits={"memory": self._memory()},
                                         timeout=max(int(self.task.limits.build_timeout_s), 1))  # fmt: skip
            except docker.errors.BuildError as err:
                log = "".join(str(c.get("stream", c.get("error", ""))) for c in err.build_log)
                raise RuntimeError(
                    f"{self.task.id}: the image build failed: {err.msg}\n{log[-1500:]}"
                ) from None
            except Exception as err:  # noqa: BLE001 - a timeout or the engine's refusal
                raise RuntimeError(
                    f"{self.task.id}: the image build failed: {type(err).__name__}: {err}"
                ) from None
        self.image = tag

    def _memory(self) -> int:
        return max((self.task.limits.memory_mb or 4096), 256) * 1024**2

    # -- episodes ----------------------------------------------------------------------------
    def new_episode(self) -> DockerEpisode:
        self.build()
        self._episodes += 1
        old, self._containers = self._containers, []
        if old:  # the last episode's container: removed off the reset path
            threading.Thread(target=self._remove, args=(old,), daemon=True).start()
        cpus = self.task.limits.cpus
        container = self.client.containers.run(
            self.image, [*_PID1, str(self._lifetime_min())], detach=True, auto_remove=True, network_mode="none", hostname="envgym",
            working_dir=self.plan.workdir, mem_limit=self._memory(), memswap_limit=self._memory(),
            pids_limit=1024, nano_cpus=int(cpus * 1e9) if cpus else None,
            cap_drop=["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP"], security_opt=["no-new-privileges"],
            labels={LABEL: "harbor"}, entrypoint=[],
        )  # fmt: skip
        self._containers.append(container.id)
        return DockerEpisode(self.dir / f"ep{self._episodes}", self.plan, container.id)

    def _lifetime_min(self) -> int:
        limits = self.task.limits
        total = LIFETIME_S + (limits.agent_timeout_s or 0) + limits.verifier_timeout_s
        return int(total // 60) + 1

    def _remove(self, ids: list[str]) -> None:
        for cid in ids:
            try:
                self.client.api.remove_container(cid, force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def _root(self, episode: DockerEpisode, script: str) -> None:
        """A bookkeeping command of the host's own (fixed text), which must succeed."""
        api = self.client.api
        exec_id = api.exec_create(episode.container, ["sh", "-c", script], user="0")["Id"]
        output = api.exec_start(exec_id)
        code = api.exec_inspect(exec_id).get("ExitCode")
        if code != 0:
            raise RuntimeError(
                f"{script!r} failed in the container (exit {code}): {output[-300:]!r}"
            )

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**dict(self.task.env), **dict(extra or {})}

    def run(self, episode: DockerEpisode, command: str, *, timeout_s: float | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:  # fmt: skip
        """``bash -c command`` as root in the episode's container, at the working directory."""
        timeout = max(timeout_s or self.command_timeout_s, 0.1)
        storage_kb = (self.task.limits.storage_mb or 1024) * 1024
        stem = f"{IO_DIR}/{next(self._calls)}"
        argv = ["bash", "-c", _WRAP, "envgym", str(storage_kb), f"{timeout:.3f}", command, stem]
        api = self.client.api
        started = time.monotonic()
        exec_id = api.exec_create(episode.container, argv, environment=self.env(env),
                                  workdir=self.plan.workdir, user="0")["Id"]  # fmt: skip
        api.exec_start(exec_id, detach=True)
        pause = 0.01
        state: dict[str, Any] = {}
        while True:
            state = api.exec_inspect(exec_id)
            if not state.get("Running"):
                break
            if time.monotonic() - started > timeout + 10:  # `timeout` itself did not return
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        duration = time.monotonic() - started
        code = state.get("ExitCode")
        n = self.output_bytes
        tail = f"tail -c {n} {shlex.quote(stem)}.out; tail -c {n} {shlex.quote(stem)}.err >&2; rm -f {shlex.quote(stem)}.out {shlex.quote(stem)}.err"
        out_id = api.exec_create(episode.container, ["sh", "-c", tail], user="0")["Id"]
        stdout, stderr = api.exec_start(out_id, demux=True)
        text_out = (stdout or b"").decode(errors="replace")
        text_err = (stderr or b"").decode(errors="replace")
        timed_out = state.get("Running") or (code == 137 and duration >= timeout * 0.98)
        error = f"timeout after {timeout:g} s" if timed_out else None
        return CommandResult(tuple(argv), None if timed_out else code, text_out, text_err,
                             bool(timed_out), duration, len(text_out) >= n or len(text_err) >= n, error)  # fmt: skip

    def _put(
        self, episode: DockerEpisode, target: str, files: TaskFiles, *, fresh: bool = True
    ) -> None:
        """A fresh copy of ``files`` at ``target`` (whatever the agent left there is removed)."""
        if fresh:
            self._root(episode, f"rm -rf {target} && mkdir -p {target}")
        if not self.client.api.put_archive(episode.container, target, _tar(files)):
            raise RuntimeError(f"could not copy files to {target} in the container")

    def solve(self, episode: DockerEpisode) -> CommandResult:
        """The oracle: a fresh copy of solution/ at /solution, ``solve.sh`` run there."""
        self._put(episode, "/solution", self.task.solution)
        timeout = self.task.limits.agent_timeout_s or 600.0
        return self.run(episode, "chmod +x /solution/solve.sh 2>/dev/null; /solution/solve.sh",
                        timeout_s=timeout, env=self.task.solution_env)  # fmt: skip

    def grade(self, episode: DockerEpisode) -> GradeResult:
        """tests/test.sh from a fresh /tests with a fresh /logs, the agent's processes gone."""
        self._root(
            episode,
            "kill -9 -1 2>/dev/null; rm -rf /logs /tests && mkdir -p /logs/verifier /logs/agent /logs/home /tests",
        )
        self._put(episode, "/tests", self.task.tests, fresh=False)
        result = self.run(episode, "chmod +x /tests/test.sh 2>/dev/null; /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1",
                          timeout_s=self.task.limits.verifier_timeout_s,
                          env={**VERIFIER_HOME, **self.task.verifier_env})  # fmt: skip
        output = self._tail(episode, "/logs/verifier/test-stdout.txt")
        if result.timed_out:
            return GradeResult(
                0.0,
                f"the verifier ran over {self.task.limits.verifier_timeout_s:g} s",
                None,
                output,
            )
        text, problem = self._reward_text(episode)
        if text is None:
            return GradeResult(0.0, problem, result.returncode, output)
        reward, reason = parse_reward(text)
        return GradeResult(reward, reason, result.returncode, output)

    def _tail(self, episode: DockerEpisode, path: str) -> str:
        exec_id = self.client.api.exec_create(
            episode.container, ["tail", "-c", "4000", path], user="0"
        )["Id"]
        out, _ = self.client.api.exec_start(exec_id, demux=True)
        return (out or b"").decode(errors="replace")

    def _reward_text(self, episode: DockerEpisode) -> tuple[str | None, str]:
        """reward.txt through the archive API: the entry itself (a link is not followed)."""
        import docker

        try:
            stream, stat = self.client.api.get_archive(
                episode.container, "/logs/verifier/reward.txt"
            )
        except docker.errors.NotFound:
            return None, "test.sh wrote no /logs/verifier/reward.txt"
        mode = int(stat.get("mode", 0))
        if mode & (1 << 27) or mode & (1 << 31) or int(stat.get("size", 0)) > MAX_REWARD_BYTES:
            for _ in stream:  # drain: the engine's response must be consumed
                pass
            kind = (
                "a link"
                if mode & (1 << 27)
                else "a directory"
                if mode & (1 << 31)
                else "over 4 KiB"
            )
            return None, f"reward.txt refused: it is {kind}"
        raw = b"".join(itertools.islice(stream, 64))[: 1 << 16]
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            member = tar.next()
            if member is None or not member.isfile() or member.size > MAX_REWARD_BYTES:
                return None, "reward.txt refused: not a regular file"
            handle = tar.extractfile(member)
            data = handle.read(MAX_REWARD_BYTES) if handle else b""
        try:
            return data.decode("utf-8"), "ok"
        except UnicodeDecodeError as err:
            return None, f"reward.txt unreadable: {err}"

    def close(self) -> None:
        self._remove(self._containers)
        self._containers = []
