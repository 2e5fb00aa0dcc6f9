"""A Harbor task's filesystem over the jail, its commands, and its verifier run.

Layout on the host (under an env's own directory)::

    pristine/roots/<top>/...   the task's writable directories after the build (``/app``, ``/root``)
    ep<N>/roots/<top>/...      one episode's copy of pristine/roots; ``ep<N>/tmp`` (its /tmp) and
                               ``ep<N>/logs`` (its /logs: the agent's to write, never read back)
    ep<N>/grade/tests, /logs   the verifier's fresh copy of tests/ and an empty /logs

Every command (the build's RUN lines, the agent's bash, solve.sh, test.sh) runs through
``command_jail.run_command``: its own namespaces, no network, the rootfs read-only, these
directories bound writable, rlimits and a wall clock.  Nothing a task ships runs on the host.
The host reads back one file, ``/logs/verifier/reward.txt`` of the verifier's fresh /logs,
without following links and bounded (``envgym/envs/swe/safe_read.py``).
"""

from __future__ import annotations

import math
import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envgym.envs.harbor.dockerfile import DockerfileError, EnvPlan, parse_dockerfile
from envgym.envs.harbor.task import HarborTask, TaskFiles
from envgym.envs.swe.safe_read import UnsafeFile, read_regular
from envgym.sandbox.command_jail import CommandLimits, CommandResult, Mount, run_command
from envgym.sandbox.jail import python_executable

__all__ = ["Episode", "GradeResult", "TaskRuntime", "parse_reward"]

REWARD_FILE = "verifier/reward.txt"
ALTERNATIVES = Path("/etc/alternatives")
# The verifier's HOME is a fresh directory and Python's per-user site is off: the agent's HOME
# (/tmp) survives into grading, and a usercustomize.py planted there would run inside every
# python3 the verifier starts.
VERIFIER_HOME = {"HOME": "/logs/home", "PYTHONNOUSERSITE": "1"}
MAX_REWARD_BYTES = 4096
_DEFAULT_DOCKERFILE = "FROM ubuntu:24.04\nWORKDIR /app\n"


@dataclass(frozen=True)
class GradeResult:
    reward: float
    reason: str  # "ok", or why the reward is 0
    exit_code: int | None
    output: str  # the tail of test.sh's output (what it printed to its log)


def parse_reward(text: str) -> tuple[float, str]:
    """Strict: one number, ``0``/``1`` or a float in [0, 1], alone (whitespace around it is
    allowed).  Anything else is reward 0 with the reason."""
    stripped = text.strip()
    if not stripped:
        return 0.0, "reward.txt is empty"
    if len(stripped.split()) != 1:
        return 0.0, f"reward.txt holds more than one value: {stripped[:80]!r}"
    try:
        value = float(stripped)
    except ValueError:
        return 0.0, f"reward.txt is not a number: {stripped[:80]!r}"
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return 0.0, f"reward {stripped[:40]!r} is outside [0, 1]"
    return value, "ok"


def _write_files(files: TaskFiles, dest: Path) -> None:
    """``files`` (held in memory) written under the host directory ``dest`` (made fresh)."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel in files.dirs:
        (dest / rel).mkdir(parents=True, exist_ok=True)
    for rel, (data, mode) in files.files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(target, mode & 0o755 | 0o644)


@dataclass
class Episode:
    """One episode's directories; ``mounts()`` is what every command of it sees."""

    dir: Path
    plan: EnvPlan

    @property
    def roots(self) -> Path:
        return self.dir / "roots"

    def mounts(self, *, logs: Path | None = None) -> list[Mount]:
        out = [Mount(self.roots / top, f"/{top}", writable=True) for top in self.plan.roots]
        out.append(Mount(self.dir / "tmp", "/tmp", writable=True))
        out.append(Mount(logs or self.dir / "logs", "/logs", writable=True))
        # The jail's /etc is empty but for passwd/group; Debian's alternatives (awk, editor,
        # pager...) resolve through /etc/alternatives, so the rootfs's own links are shown read-only.
        if ALTERNATIVES.is_dir():
            out.append(Mount(ALTERNATIVES, str(ALTERNATIVES)))
        return out


class TaskRuntime:
    """A task's build (once) and its episodes' commands and grading."""

    def __init__(self, task: HarborTask, workdir: Path, *, command_timeout_s: float = 120.0,
                 output_bytes: int = 64 * 1024) -> None:  # fmt: skip
        self.task = task
        self.dir = workdir
        self.plan = parse_dockerfile(
            task.dockerfile or _DEFAULT_DOCKERFILE, workdir_override=task.workdir
        )
        interpreter = python_executable().parts[1:2]  # the jail boots through the host's python
        clash = [top for top in self.plan.roots if (top,) == tuple(interpreter)]
        if clash:
            raise DockerfileError(
                f"{task.id}: the task writes under /{clash[0]}, where this host keeps the jail's "
                "Python interpreter (a writable mount there would hide it)"
            )
        self.command_timeout_s = command_timeout_s
        self.output_bytes = output_bytes
        self._built = False
        self._episodes = 0

    # -- limits from task.toml ---------------------------------------------------------------
    def limits(self, timeout_s: float) -> CommandLimits:
        memory = self.task.limits.memory_mb
        storage = self.task.limits.storage_mb
        mem_bytes = (memory or 4096) * 1024**2
        return CommandLimits(
            timeout_s=max(timeout_s, 0.1),
            memory_bytes=max(mem_bytes, 256 * 1024**2),
            total_memory_bytes=max(mem_bytes, 256 * 1024**2),
            max_file_bytes=(storage or 1024) * 1024**2,
            tmp_bytes=(storage or 1024) * 1024**2,
            output_bytes=self.output_bytes,
        )

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {"HOME": "/tmp", **dict(self.plan.env), **dict(self.task.env), **dict(extra or {})}

    # -- the build ---------------------------------------------------------------------------
    def build(self) -> None:
        """The pristine tree: the plan's directories, COPYs and RUNs (jailed), once."""
        if self._built:
            return
        pristine = Episode(self.dir / "pristine", self.plan)
        shutil.rmtree(pristine.dir, ignore_errors=True)
        for top in self.plan.roots:
            (pristine.roots / top).mkdir(parents=True)
        (pristine.dir / "tmp").mkdir()
        (pristine.dir / "logs").mkdir()
        budget = self.task.limits.build_timeout_s
        for step in self.plan.steps:
            if step.kind == "mkdir":
                (pristine.roots / step.dest.lstrip("/")).mkdir(parents=True, exist_ok=True)
            elif step.kind == "copy":
                self._copy(step.src, step.dest, pristine.roots, step.line)
            else:
                result = run_command(["bash", "-c", step.command], mounts=pristine.mounts(), workdir=step.cwd,
                                     env={"HOME": "/tmp", **dict(step.env)}, limits=self.limits(budget))  # fmt: skip
                budget -= result.duration_s
                if result.timed_out or (budget <= 0 and step is not self.plan.steps[-1]):
                    raise RuntimeError(
                        f"{self.task.id}: the build ran over [environment] build_timeout_sec = "
                        f"{self.task.limits.build_timeout_s:g} s (at Dockerfile line {step.line})"
                    )
                if not result.ok:
                    raise RuntimeError(
                        f"{self.task.id}: Dockerfile line {step.line} (RUN {step.command[:200]!r}) failed "
                        f"in the jail ({result.error or f'exit {result.returncode}'}): {result.stderr[-800:]}"
                    )
        shutil.rmtree(pristine.dir / "tmp")
        self._built = True

    def _copy(self, src: str, dest: str, roots: Path, line: int) -> None:
        files = self.task.environment.files
        into = dest.endswith("/")
        dest_rel = dest.rstrip("/").lstrip("/")
        if src in files:
            data, mode = files[src]
            into = into or (roots / dest_rel).is_dir()
            target = roots / dest_rel / posixpath_name(src) if into else roots / dest_rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            os.chmod(target, mode & 0o755 | 0o644)
            return
        prefix = "" if src == "." else src + "/"
        matched = {
            rel: v for rel, v in files.items() if rel.startswith(prefix) and rel != "Dockerfile"
        }
        if not matched and src != "." and src not in self.task.environment.dirs:
            raise RuntimeError(
                f"{self.task.id}: Dockerfile line {line}: COPY source {src!r} is not in environment/"
            )
        for rel, (data, mode) in matched.items():
            target = roots / dest_rel / rel[len(prefix) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            os.chmod(target, mode & 0o755 | 0o644)

    # -- episodes ----------------------------------------------------------------------------
    def new_episode(self) -> Episode:
        self.build()
        self._episodes += 1
        for old in self.dir.glob("ep*"):  # the last episode's tree: removed off the reset path
            trash = old.with_name(f".trash-{old.name}")
            old.rename(trash)
            threading.Thread(
                target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True}, daemon=True
            ).start()
        episode = Episode(self.dir / f"ep{self._episodes}", self.plan)
        shutil.copytree(self.dir / "pristine" / "roots", episode.roots, symlinks=True)
        (episode.dir / "tmp").mkdir()
        (episode.dir / "logs" / "agent").mkdir(parents=True)
        (episode.dir / "logs" / "verifier").mkdir()
        return episode

    def run(self, episode: Episode, command: str, *, timeout_s: float | None = None,
            extra_mounts: tuple[Mount, ...] = (), env: Mapping[str, str] | None = None,
            logs: Path | None = None) -> CommandResult:  # fmt: skip
        """``bash -c command`` in the episode's jail, at the working directory."""
        return run_command(["bash", "-c", command], mounts=[*episode.mounts(logs=logs), *extra_mounts],
                           workdir=self.plan.workdir, env=self.env(env or {}),
                           limits=self.limits(timeout_s or self.command_timeout_s))  # fmt: skip

    def solve(self, episode: Episode) -> CommandResult:
        """The oracle: a fresh copy of solution/ at /solution, ``solve.sh`` run there."""
        sol = episode.dir / "solution"
        shutil.rmtree(sol, ignore_errors=True)
        _write_files(self.task.solution, sol)
        timeout = self.task.limits.agent_timeout_s or 600.0
        return self.run(episode, "chmod +x /solution/solve.sh 2>/dev/null; /solution/solve.sh",
                        timeout_s=timeout, extra_mounts=(Mount(sol, "/solution", writable=True),),
                        env=self.task.solution_env)  # fmt: skip

    def grade(self, episode: Episode) -> GradeResult:
        """tests/test.sh from a fresh copy of tests/ at /tests, over the final workspace, with
        a fresh /logs (whatever the agent left in its /logs is not seen); the reward is read from
        that fresh /logs/verifier/reward.txt."""
        grade_dir = episode.dir / "grade"
        shutil.rmtree(grade_dir, ignore_errors=True)
        _write_files(self.task.tests, grade_dir / "tests")
        logs = grade_dir / "logs"
        (logs / "verifier").mkdir(parents=True)
        (logs / "agent").mkdir()
        (logs / "home").mkdir()
        result = self.run(episode, "chmod +x /tests/test.sh 2>/dev/null; /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1",
                          timeout_s=self.task.limits.verifier_timeout_s, logs=logs,
                          extra_mounts=(Mount(grade_dir / "tests", "/tests", writable=True),),
                          env={**VERIFIER_HOME, **self.task.verifier_env})  # fmt: skip
        output = ""
        try:
            output = read_regular(logs, "verifier/test-stdout.txt", max_bytes=1 << 20).decode(
                errors="replace"
            )[-4000:]
        except (OSError, ValueError):
            pass
        if result.timed_out:
            return GradeResult(
                0.0,
                f"the verifier ran over {self.task.limits.verifier_timeout_s:g} s",
                None,
                output,
            )
        try:
            text = read_regular(logs, REWARD_FILE, max_bytes=MAX_REWARD_BYTES).decode("utf-8")
        except FileNotFoundError:
            return GradeResult(
                0.0, "test.sh wrote no /logs/verifier/reward.txt", result.returncode, output
            )
        except UnsafeFile as err:
            return GradeResult(0.0, f"reward.txt refused: {err.reason}", result.returncode, output)
        except (OSError, UnicodeDecodeError) as err:
            return GradeResult(0.0, f"reward.txt unreadable: {err}", result.returncode, output)
        reward, reason = parse_reward(text)
        return GradeResult(reward, reason, result.returncode, output)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def posixpath_name(rel: str) -> str:
    return rel.rsplit("/", 1)[-1]
