"""Docker backend: the worker in a container with no network, a read-only rootfs and limits.

The engine is ``$DOCKER_HOST`` or, without it, the socket ``scripts/docker_setup.sh`` starts
(``/run/envgym-docker/docker.sock``; ``$ENVGYM_DOCKER_RUN`` moves it), then the system socket.
The image (``envgym-sandbox:latest``, override with ``$ENVGYM_SANDBOX_IMAGE``) only needs
``/usr/bin/python3`` (3.11+); the worker's modules, staged as for bwrap (worker_stage.py), are
mounted read-only and the worker runs from them: not the whole envgym package, whose rooms
(families' data, the trainer, ...) bundle code has no business reading.

Transport: the Docker API is used only for the container's lifecycle.  Requests and replies go
over a Unix socket the host listens on in a private directory mounted read-only into the
container: the same kernel IPC as the bwrap backend, instead of the daemon's attach stream (an
extra hop through dockerd and containerd-shim per message).
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from pathlib import Path
from typing import Any

from envgym.sandbox.base import CallError, Limits, SandboxUnavailable
from envgym.sandbox.bwrap import (
    SANDBOX_PACKAGE,
    WORKER,
    TreeWatch,
    _children,
    allocate_uid,
)
from envgym.sandbox.fdwait import wait_readable
from envgym.sandbox.process import (
    SANDBOX_BUNDLE,
    SANDBOX_STATE,
    STARTUP_TIMEOUT_S,
    ProcessSandbox,
    WorkerHandle,
    signal_death,
)
from envgym.sandbox.worker_stage import worker_package
from envgym.state import chown_tree

RUN_DIR = os.environ.get("ENVGYM_DOCKER_RUN", "/run/envgym-docker")
DEFAULT_SOCKET = f"{RUN_DIR}/docker.sock"
IMAGE = os.environ.get("ENVGYM_SANDBOX_IMAGE", "envgym-sandbox:latest")
CHANNEL_DIR = "/run/envgym"
LABEL = "envgym.sandbox"
_SETUP_HINT = "start one with scripts/docker_setup.sh (or set DOCKER_HOST)"
_clients: dict[str, Any] = {}
_channels = itertools.count()


def engine_url() -> str:
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    for path in (DEFAULT_SOCKET, "/var/run/docker.sock"):
        if os.path.exists(path):
            return f"unix://{path}"
    raise SandboxUnavailable(
        f"no Docker engine found (no DOCKER_HOST, no socket at {DEFAULT_SOCKET}); {_SETUP_HINT}"
    )


def docker_client() -> Any:
    """A connected client with the sandbox image present (cached per engine and process)."""
    url = engine_url()
    key = f"{os.getpid()}:{url}"
    if key in _clients:
        return _clients[key]
    try:
        import docker
    except ImportError:
        raise SandboxUnavailable(
            "the docker backend needs the docker SDK (pip install docker)"
        ) from None
    try:
        client = docker.DockerClient(base_url=url, timeout=120)
        client.ping()
    except Exception as exc:
        raise SandboxUnavailable(
            f"Docker engine at {url} does not answer ({exc}); {_SETUP_HINT}"
        ) from None
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        raise SandboxUnavailable(
            f"Docker image {IMAGE} not found at {url}; build it with scripts/docker_setup.sh"
        ) from None
    _clients[key] = client
    return client


class DockerWorker(WorkerHandle):
    def __init__(self, client: Any, channel: Path, run: dict[str, Any], uid: int) -> None:
        self.client = client
        self._killed = False
        self.container: Any = None
        channel.mkdir(mode=0o755)
        path = channel / "worker.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            listener.listen(1)
            if os.geteuid() == 0:
                os.chown(path, uid, -1)
            os.chmod(path, 0o600)
            try:
                self.container = client.containers.run(**run)
            except Exception as exc:
                raise SandboxUnavailable(f"cannot start a sandbox container: {exc}") from None
            self.sock = self._accept(listener)
        except BaseException:
            self.kill()
            raise
        finally:
            listener.close()
            path.unlink(missing_ok=True)  # one connection only: nobody else may dial in
        self.read_fd = self.write_fd = self.sock.fileno()
        self._watch: TreeWatch | None = None
        self._blind = False  # the engine's pids are not ours (another pid namespace)

    def _locate(self) -> TreeWatch | None:
        """Host pids of the container's init (``init=True``) and of the worker under it."""
        if self._watch is None and not self._blind and not self._killed:
            try:
                init = int(self.client.api.inspect_container(self.container.id)["State"]["Pid"])
                (worker,) = _children(init)
                self._watch = TreeWatch(init, worker)
            except Exception:  # noqa: BLE001 - no such pid here: the engine runs elsewhere
                self._blind = True
        return self._watch

    def quiet(self) -> bool:
        watch = self._locate()
        # Blind (a remote or namespaced engine): the container's own limits still hold, but
        # leftover threads are not detected (docs/SANDBOX.md).
        return True if watch is None else watch.quiet()

    def _accept(self, listener: socket.socket) -> socket.socket:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if wait_readable(listener, 0.2):
                return listener.accept()[0]
            self.container.reload()
            if self.container.status not in ("created", "running"):
                break
        raise SandboxUnavailable(f"the sandbox container did not connect: {self.diagnostics()}")

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        if getattr(self, "sock", None) is not None:
            self.sock.close()
        watch = getattr(self, "_watch", None)
        if watch is not None:
            watch.close()
        if self.container is not None:
            try:
                self.client.api.remove_container(self.container.id, force=True)
            except Exception:  # already gone; the engine cleans up what it can
                pass

    def death(self) -> tuple[CallError, str]:
        try:
            code = int(self.container.wait(timeout=3)["StatusCode"])
            oom = bool(
                self.client.api.inspect_container(self.container.id)["State"].get("OOMKilled")
            )
        except Exception:
            return CallError.CRASH, "the sandbox closed its reply channel and was restarted"
        if oom:
            return CallError.MEMORY, "the sandbox ran out of memory and was restarted"
        if code > 128:
            return signal_death(code - 128)
        return CallError.CRASH, f"the sandbox process exited (status {code}) and was restarted"

    def diagnostics(self) -> str:
        try:
            return self.container.logs(tail=30).decode(errors="replace").strip()[-2000:]
        except Exception as exc:
            return f"(no container logs: {exc})"


class DockerSandbox(ProcessSandbox):
    """Bundle code in a Docker container (one per worker; a new one per state directory)."""

    backend = "docker"

    def __init__(self, bundle_dir: Path, limits: Limits | None = None) -> None:
        self.client = docker_client()
        super().__init__(bundle_dir, limits)
        # Never root in the container.  A root host hands the state dir to a fresh uid; a
        # non-root host (docker group) cannot chown, so the container runs as the host user.
        self.root = os.geteuid() == 0
        self.uid = allocate_uid() if self.root else os.getuid()
        self.gid = self.uid if self.root else os.getgid()

    def _prepare_state(self, state: Path) -> None:
        # Only while no container of this sandbox runs (removal is synchronous); chown_tree
        # follows no links and skips hard-linked files
        # (a planted link must not redirect the chown to a host file).
        if self.root:
            chown_tree(state, self.uid, self.gid)

    def _launch(self, state: Path | None) -> WorkerHandle:
        from docker.types import Ulimit

        limits = self.limits
        if state is not None:
            self._prepare_state(state)
        channel = self._scratch / f"channel-{next(_channels)}"
        config = self.worker_config(
            connect=f"{CHANNEL_DIR}/worker.sock",
            reap_strays=True,
            # RLIMIT_AS turns a huge allocation into a MemoryError the tool reports; the
            # cgroup limit below is the backstop (an OOM kill, reported as MEMORY).
            rlimits={"AS": [limits.memory_bytes, limits.memory_bytes]},
        )
        volumes = {
            str(worker_package(SANDBOX_PACKAGE)): {"bind": SANDBOX_PACKAGE, "mode": "ro"},
            str(self.stage): {"bind": SANDBOX_BUNDLE, "mode": "ro"},
            str(channel): {"bind": CHANNEL_DIR, "mode": "ro"},
        }
        if state is not None:
            volumes[str(state)] = {"bind": SANDBOX_STATE, "mode": "rw"}
        run = dict(
            image=IMAGE,
            command=["/usr/bin/python3", "-I", "-S", "-B", WORKER, config],
            detach=True,
            init=True,  # a real pid 1 that reaps and ignores the worker's signals
            user=f"{self.uid}:{self.gid}",
            network_mode="none",
            ipc_mode="none",
            read_only=True,
            mem_limit=limits.memory_bytes + 256 * 1024**2,  # headroom over RLIMIT_AS
            memswap_limit=limits.memory_bytes + 256 * 1024**2,
            pids_limit=limits.max_processes,
            nano_cpus=1_000_000_000,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            ulimits=[
                Ulimit(name="core", soft=0, hard=0),
                Ulimit(name="cpu", soft=limits.cpu_seconds, hard=limits.cpu_seconds),
                Ulimit(name="fsize", soft=limits.max_file_bytes, hard=limits.max_file_bytes),
            ],
            volumes=volumes,
            working_dir=SANDBOX_STATE if state is not None else "/",
            environment={"LANG": "C.UTF-8"},
            hostname="envgym",
            labels={LABEL: "1"},
        )
        return DockerWorker(self.client, channel, run, self.uid)
