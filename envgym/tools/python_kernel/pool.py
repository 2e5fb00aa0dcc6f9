"""A bounded pool of warm, jailed kernels handed out one per episode (async).

Reset between episodes is *replacement*: a released kernel is killed with its jail and its
working directory, and a new one is started in the background to keep ``warm`` kernels idle.
A fresh process per episode is the only reset that guarantees a fresh namespace — ``%reset``
keeps imported modules, monkeypatches, threads, files in /tmp and anything hostile code hid in
the interpreter.  Acquiring a warm kernel costs a health check (process alive + a kernel_info
round trip), not a start.

Bounded: at most ``max_kernels`` kernels exist at once (idle, leased, starting or dying);
``acquire`` waits for one to free up.  Idle kernels are health-checked every
``health_interval_s`` and replaced when dead or unresponsive; a leased kernel that dies is
restarted by its session.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import shutil
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from envgym.sandbox.kernel_jail import JailDirs
from envgym.sandbox.quota import BoundedDir, sweep_stale
from envgym.state import default_workdir_root
from envgym.tools.python_kernel.config import KernelConfig
from envgym.tools.python_kernel.kernel import JailedKernel, KernelStartError
from envgym.tools.python_kernel.session import KernelSession

_MAX_START_FAILURES = 3  # consecutive failed starts before acquire gives up
_IPC_BYTES = 1024**2  # the IPC directory holds sockets, the connection file and a boot log


@dataclass(frozen=True)
class PoolStats:
    idle: int
    leased: int
    starting: int
    total: int
    started: int  # kernels started since the pool was created
    replaced_unhealthy: int  # idle kernels found dead or unresponsive
    restarts: int  # kernels restarted inside sessions (timeouts, crashes)


class KernelPool:
    """Warm kernels for episodes.  Use ``async with KernelPool(...) as pool`` or start/close."""

    def __init__(
        self,
        config: KernelConfig | None = None,
        *,
        warm: int = 2,
        max_kernels: int = 8,
        health_interval_s: float = 15.0,
        root: Path | None = None,
    ) -> None:
        if warm < 0 or max_kernels < 1 or warm > max_kernels:
            raise ValueError(
                f"need 0 <= warm <= max_kernels and max_kernels >= 1 (got warm={warm}, max_kernels={max_kernels})"
            )
        self.config = config or KernelConfig()
        self.warm = warm
        self.max_kernels = max_kernels
        self.health_interval_s = health_interval_s
        self._root_parent = root
        self.root: Path | None = None
        self._idle: deque[JailedKernel] = deque()
        self._leased: set[KernelSession] = set()
        self._starting = 0
        self._dying = 0
        self._changed: asyncio.Condition | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # retirements and the two loops
        self._loops: list[asyncio.Task[None]] = []
        self._refill_wanted: asyncio.Event | None = None
        self._failures = 0
        self._last_error = ""
        self._started = self._replaced = self._restarts = 0
        self._names = itertools.count(1)
        self._closed = False
        # Each workspace and IPC directory is its own size-limited tmpfs (else a
        # cell could fill host /dev/shm); keyed by path, closed when the path is removed.
        self._boxes: dict[Path, BoundedDir] = {}

    # -- life cycle ---------------------------------------------------------------------
    async def start(self, *, wait: bool = True) -> KernelPool:
        """Create the pool's directory and start filling it; with ``wait``, until ``warm``
        kernels are idle (raises KernelStartError if kernels cannot start here)."""
        if self.root is not None:
            return self
        parent = self._root_parent or default_workdir_root() or Path(tempfile.gettempdir())
        _prune_orphans(parent)
        self.root = Path(tempfile.mkdtemp(prefix=f"envgym-kernels-{os.getpid()}-", dir=parent))
        self._changed = asyncio.Condition()
        self._refill_wanted = asyncio.Event()
        self._loops = [self._spawn_task(self._refill_loop()), self._spawn_task(self._health_loop())]
        self._refill_wanted.set()
        if wait:
            async with self._changed:
                while len(self._idle) < self.warm:
                    if self._failures >= _MAX_START_FAILURES:
                        raise KernelStartError(f"kernels fail to start: {self._last_error}")
                    await self._changed.wait()
        return self

    async def close(self) -> None:
        """Kill every kernel (idle and leased) and remove the pool's directory."""
        if self._closed:
            return
        self._closed = True
        for task in self._loops:
            task.cancel()
        # Retirements are let finish: a cancelled one would leave its kernel running.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        kernels = list(self._idle) + [s.kernel for s in self._leased]
        self._idle.clear()
        for session in self._leased:
            session.closed = True
        self._leased.clear()
        await asyncio.gather(*(k.shutdown() for k in kernels), return_exceptions=True)
        for path in list(self._boxes):
            self._remove_dir(path)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    async def __aenter__(self) -> KernelPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- leasing --------------------------------------------------------------------------
    async def acquire(self, timeout_s: float | None = 120.0) -> KernelSession:
        """A session on a fresh kernel: warm when one is idle, else started now (or, at
        ``max_kernels``, once another is released).  Raises TimeoutError / KernelStartError."""
        if self.root is None:
            await self.start(wait=False)
        assert self._changed is not None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._closed:
                raise RuntimeError("the kernel pool is closed")
            kernel = await self._take_idle()
            if kernel is None and self._total() < self.max_kernels:
                kernel = await self._start_kernel()  # cold: the pool had nothing warm
            if kernel is not None:
                session = KernelSession(self, kernel)
                self._leased.add(session)
                self._wake_refill()
                return session
            if self._failures >= _MAX_START_FAILURES:
                raise KernelStartError(f"kernels fail to start: {self._last_error}")
            async with self._changed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f"no kernel free within {timeout_s} s (max_kernels={self.max_kernels})"
                    )
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    pass

    async def _take_idle(self) -> JailedKernel | None:
        while self._idle:
            kernel = self._idle.popleft()
            if kernel.alive and await kernel.ping(timeout=2.0):
                return kernel
            self._replaced += 1
            self._retire(kernel)
        return None

    async def _release(self, session: KernelSession) -> None:
        self._leased.discard(session)
        self._retire(session.kernel, workspace=session.workspace)
        await self._notify()

    async def _replace_kernel(self, old: JailedKernel) -> JailedKernel:
        """For a session: kill ``old`` and cold-start a kernel on the same working directory."""
        self._restarts += 1
        await old.shutdown()
        self._remove_dir(old.dirs.ipc)
        return await self._start_kernel(workspace=old.dirs.workspace, counted=False)

    # -- internals ----------------------------------------------------------------------
    def _total(self) -> int:
        return len(self._idle) + len(self._leased) + self._starting + self._dying

    def stats(self) -> PoolStats:
        return PoolStats(
            idle=len(self._idle),
            leased=len(self._leased),
            starting=self._starting,
            total=self._total(),
            started=self._started,
            replaced_unhealthy=self._replaced,
            restarts=self._restarts,
        )

    async def _start_kernel(
        self, workspace: Path | None = None, *, counted: bool = True
    ) -> JailedKernel:
        assert self.root is not None
        name = f"{next(self._names)}-{secrets.token_hex(3)}"
        ipc = self._new_dir(f"ipc-{name}-", _IPC_BYTES)
        if workspace is None:
            workspace = self._new_dir(f"ws-{name}-", self.config.limits.workspace_bytes)
        kernel = JailedKernel(self.config, JailDirs(workspace=workspace, ipc=ipc))
        self._starting += counted
        try:
            await kernel.start()
        except BaseException as exc:
            self._failures += 1
            self._last_error = str(exc)
            self._remove_dir(ipc)
            if counted:
                self._remove_dir(workspace)
            raise
        finally:
            self._starting -= counted
        self._failures = 0
        self._started += 1
        return kernel

    def _new_dir(self, prefix: str, size: int) -> Path:
        """A fresh directory on its own tmpfs of ``size`` bytes (a plain directory where this
        process cannot mount: see quota.py).  0711: bwrap (root without CAP_DAC_OVERRIDE)
        must traverse it."""
        assert self.root is not None
        box = BoundedDir(size, base=self.root, prefix=prefix, mode=0o711)
        self._boxes[box.path] = box
        return box.path

    def _remove_dir(self, path: Path) -> None:
        box = self._boxes.pop(path, None)
        if box is not None:
            box.close()  # unmount: the tmpfs's memory goes back with it
        else:
            shutil.rmtree(path, ignore_errors=True)

    def _retire(self, kernel: JailedKernel, workspace: Path | None = None) -> None:
        """Kill a kernel in the background; it counts against max_kernels until it is gone."""
        self._dying += 1

        async def retire() -> None:
            try:
                await kernel.shutdown()
            finally:
                self._remove_dir(kernel.dirs.ipc)
                self._remove_dir(workspace or kernel.dirs.workspace)
                self._dying -= 1
                await self._notify()
                self._wake_refill()

        self._spawn_task(retire())

    async def _refill_loop(self) -> None:
        """Start kernels one at a time (parallel starts only fight over the cores)."""
        assert self._refill_wanted is not None
        while True:
            await self._refill_wanted.wait()
            self._refill_wanted.clear()
            while len(self._idle) + self._starting < self.warm and self._total() < self.max_kernels:
                try:
                    kernel = await self._start_kernel()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    await self._notify()
                    await asyncio.sleep(min(5.0, 0.5 * 2**self._failures))  # back off, then retry
                    continue
                self._idle.append(kernel)
                await self._notify()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            for kernel in list(self._idle):
                if kernel not in self._idle:
                    continue  # leased meanwhile
                self._idle.remove(kernel)
                if kernel.alive and await kernel.ping(timeout=2.0):
                    self._idle.appendleft(kernel)
                else:
                    self._replaced += 1
                    self._retire(kernel)
            self._wake_refill()

    def _wake_refill(self) -> None:
        if self._refill_wanted is not None and not self._closed:
            self._refill_wanted.set()

    async def _notify(self) -> None:
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    def _spawn_task(self, coro: object) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _prune_orphans(parent: Path) -> None:
    """Remove pool directories left by processes that died without closing their pool."""
    for entry in parent.glob("envgym-kernels-*-*"):
        pid = entry.name.split("-")[2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            sweep_stale(entry)  # unmount its workspaces first: rmtree cannot remove a mount
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:
            pass  # alive, someone else's
