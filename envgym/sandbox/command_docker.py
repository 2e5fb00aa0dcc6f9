"""Run one command in a Docker container: ``run_command(..., backend="docker")`` (docs/SWE.md).

The same contract as the bwrap jail (``command_jail.py``), enforced by the engine: no network
(``network_mode=none``; ``host`` for installs, since the private engine runs ``--bridge=none``),
read-only rootfs, ``cap_drop=ALL``, ``no-new-privileges``, a non-root user (a fresh uid when the
host is root, the writable mounts handed to it), ``pids_limit``, a memory limit, a size-capped
``/tmp`` and ``/dev/shm``, and the container removed (killed first) when the call ends.

The image (default ``envgym-sandbox:latest``, a debootstrapped bookworm) needs ``/usr/bin/python3``:
the command is started through ``command_io.BOOT`` like in bwrap.  BOOT points fds 1/2 at files in
a host directory bound at ``/run/envgym`` instead of letting the engine log them: the engine's
json log would grow without bound under a flood and mixes the two streams; host files are kept
to their tail the same way as in bwrap.  The host interpreter's prefix is bound read-only at the
same path (same glibc as the host), so venvs the host built run unchanged.

The engine must see the host's paths (a local engine: bind sources are host paths).  No per-repo
image is committed: an environment is a venv in a cache directory, mounted read-only.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envgym.sandbox.base import SandboxUnavailable
from envgym.sandbox.bwrap import allocate_uid
from envgym.sandbox.command_io import (
    BOOT,
    RUN_DIR,
    Capture,
    hand_over,
    host_pip_config,
    jail_env,
    readonly_extras,
    write_identity,
)
from envgym.sandbox.command_types import CommandLimits, CommandResult, Mount, finish
from envgym.sandbox.docker_backend import IMAGE, LABEL, docker_client

PYTHON = "/usr/bin/python3"  # the image's interpreter, which runs BOOT
MEMORY_HEADROOM = 256 * 1024**2  # cgroup limit = RLIMIT_AS + this (the cgroup sums all processes)
_ENGINE_OWNED = ("/etc/resolv.conf", "/etc/hosts")  # with network_mode=host the engine binds them


def run_command_docker(
    argv: Sequence[str],
    *,
    mounts: Sequence[Mount],
    workdir: str,
    env: Mapping[str, str] | None = None,
    network: bool = False,
    limits: CommandLimits | None = None,
    image: str | None = None,
) -> CommandResult:
    """``run_command`` in a container of ``image``.  Blocking; raises SandboxUnavailable when
    there is no engine or no such image."""
    import docker

    args = tuple(str(a) for a in argv)
    limits = limits or CommandLimits()
    client = docker_client()  # also checks that the default image exists
    image = image or IMAGE
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise SandboxUnavailable(f"Docker image {image} not found") from None
    root = os.geteuid() == 0
    if root:
        uid = gid = allocate_uid()  # never root in the container; NPROC-style accounting per call
    else:
        uid, gid = os.getuid(), os.getgid()  # cannot chown: the container runs as the host user
    if root:
        for mount in mounts:
            if mount.writable:
                hand_over(mount.host, uid, gid)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="envgym-cmd-") as scratch:
        os.chmod(scratch, 0o755)
        io = Path(scratch) / "io"
        io.mkdir(mode=0o755)  # owned by the host: the command cannot add files to it
        outputs = (
            Capture(limits.output_bytes, io / "stdout"),
            Capture(limits.output_bytes, io / "stderr"),
        )
        try:
            (io / "status").touch(mode=0o600)
            for name in ("stdout", "stderr", "status"):
                os.chown(io / name, uid, gid)
            if network and host_pip_config()[0]:
                (io / "pip.conf").write_text(host_pip_config()[0])
                (io / "pip.conf").chmod(0o644)
            config = _config(
                image, args, mounts, workdir, env, network, limits, Path(scratch), uid, gid
            )
            code, problem, timed_out = _execute(client, config, outputs, started + limits.timeout_s)
            status = (io / "status").read_text(errors="replace")
            return finish(
                args,
                code,
                status,
                outputs,
                started,
                limits.timeout_s if timed_out else None,
                problem,
            )
        finally:
            for capture in outputs:
                capture.close()


def _config(
    image: str,
    argv: tuple[str, ...],
    mounts: Sequence[Mount],
    workdir: str,
    env: Mapping[str, str] | None,
    network: bool,
    limits: CommandLimits,
    scratch: Path,
    uid: int,
    gid: int,
) -> dict[str, Any]:
    from docker.types import LogConfig
    from docker.types import Mount as Bind

    passwd, group = write_identity(scratch, uid, gid)
    binds = [
        Bind(RUN_DIR, str(scratch / "io"), type="bind"),
        Bind("/etc/passwd", str(passwd), type="bind", read_only=True),
        Bind("/etc/group", str(group), type="bind", read_only=True),
    ]
    tmpfs = {"/tmp": f"rw,exec,nosuid,nodev,size={limits.tmp_bytes},mode=1777"}
    prefix = Path(sys.base_prefix).resolve()
    if prefix != Path("/usr"):
        binds.append(Bind(str(prefix), str(prefix), type="bind", read_only=True))
        if prefix.parts[1] in ("root", "home"):
            # The image's /root is 0700 (and a tmpfs there takes the image directory's mode):
            # an empty 0755 host directory over it lets the uid reach the prefix, like the
            # ancestors the bwrap jail creates with --perms 0755 --dir.
            top = scratch / "top"
            inner = top.joinpath(*prefix.parts[2:])  # the mount point, made here: / is read-only
            inner.mkdir(parents=True)
            for path in (inner, *inner.parents):
                if path == scratch:
                    break
                path.chmod(0o755)
            binds.append(Bind(f"/{prefix.parts[1]}", str(top), type="bind", read_only=True))
    for path in readonly_extras(network):
        if str(path) not in _ENGINE_OWNED:
            binds.append(Bind(str(path), os.path.realpath(path), type="bind", read_only=True))
    for mount in mounts:
        binds.append(Bind(mount.target, str(mount.host), type="bind", read_only=not mount.writable))
    environment = jail_env(env, network)  # its PIP_CONFIG_FILE is io/pip.conf, under RUN_DIR
    spec = {"uid": -1, "gid": -1, "cwd": workdir, "rlimits": limits.rlimits(), "io": RUN_DIR}
    config: dict[str, Any] = dict(
        image=image,
        command=[PYTHON, "-I", "-S", "-B", "-c", BOOT, json.dumps(spec), *argv],
        user=f"{uid}:{gid}",
        working_dir="/",
        environment=environment,
        network_mode="host" if network else "none",
        ipc_mode="private",  # its own /dev/shm (multiprocessing needs one), sized below
        shm_size=limits.tmp_bytes,
        read_only=True,
        tmpfs=tmpfs,
        mounts=binds,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        pids_limit=limits.max_processes,
        mem_limit=limits.memory_bytes + MEMORY_HEADROOM,
        memswap_limit=limits.memory_bytes + MEMORY_HEADROOM,
        init=True,  # a real pid 1 that reaps orphans
        labels={LABEL: "1"},
        # Output goes to the io files; the engine log only ever holds BOOT's own failures.
        log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
    )
    if not network:
        config["hostname"] = "envgym"  # the engine refuses a hostname with network_mode=host
    return config


def _execute(
    client: Any, config: dict[str, Any], outputs: tuple[Capture, Capture], deadline: float
) -> tuple[int | None, str | None, bool]:
    """Create, start and wait for the container; always remove it.  Returns (exit code, a
    problem in words, timed out)."""
    try:
        container = client.containers.create(**config)
    except Exception as exc:  # noqa: BLE001 - the engine's refusal, reported in words
        raise SandboxUnavailable(f"cannot create a command container: {exc}") from None
    try:
        try:
            container.start()
        except Exception as exc:  # noqa: BLE001
            return None, f"the container did not start: {exc}", False
        pause = 0.02
        while True:
            state = client.api.inspect_container(container.id)["State"]
            if state["Status"] in ("exited", "dead"):
                code = int(state["ExitCode"])
                if state.get("OOMKilled"):
                    return code, "killed: out of memory (the container's memory limit)", False
                return code, None, False
            if time.monotonic() >= deadline:
                return None, None, True
            for capture in outputs:
                capture.trim()
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.25)
    finally:
        # Synchronous: SIGKILL to every process of the container, then removal.
        try:
            client.api.remove_container(container.id, force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
