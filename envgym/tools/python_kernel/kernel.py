"""One ipykernel in a bubblewrap jail, driven over ZeroMQ IPC sockets (async).

The host writes a connection file into the jail's IPC directory (``transport="ipc"``: TCP would
need a network namespace shared with the host), launches ``ipykernel_launcher`` through
:mod:`envgym.sandbox.kernel_jail` with ``JPY_PARENT_PID`` unset (ipykernel would otherwise watch
a pid that does not exist in the jail's pid namespace and exit), and talks to it with
jupyter-client's :class:`AsyncKernelClient`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from dataclasses import dataclass
from queue import Empty
from typing import Any, Literal

import zmq
from jupyter_client.asynchronous import AsyncKernelClient

from envgym.sandbox.kernel_jail import JAIL_IPC, JailDirs, JailedProcess, launch
from envgym.tools.python_kernel.config import KernelConfig
from envgym.tools.python_kernel.output import OutputCollector
from envgym.tools.python_kernel.packages import site_entries, site_packages

_POLL_S = 0.1  # how often a waiting execution checks that the kernel is still alive
_RCVHWM = 32  # IOPub messages queued on the host at most (each at most max_message_bytes)
# After the execute_reply, IOPub silent this long means its "idle" status was lost (dropped
# with an oversized message or past the high-water mark): the cell is over all the same.
_LOST_IDLE_S = 1.0
_PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
_ids = itertools.count(1)

# Run silently at start: zombies of processes killed after the previous cell are reaped before
# the next one runs (they would count against RLIMIT_NPROC); the helper leaves no name behind.
_SETUP = """
def _envgym_reap(*_):
    import os
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
get_ipython().events.register("pre_run_cell", _envgym_reap)
del _envgym_reap
"""

_FONTS_CONF = (
    '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n'
    "<fontconfig><dir>/usr/share/fonts</dir><cachedir>/tmp/.cache/fontconfig</cachedir></fontconfig>\n"
)


def _parent(msg: dict[str, Any]) -> object:
    header = msg.get("parent_header")
    return header.get("msg_id") if isinstance(header, dict) else None


class KernelStartError(RuntimeError):
    """The kernel did not come up; the message carries its boot diagnostics."""


@dataclass(frozen=True)
class RunOutcome:
    """How waiting for one execution ended."""

    status: Literal["idle", "timeout", "died"]
    msg_id: str
    execution_count: int | None = None


class JailedKernel:
    """A started (or starting) kernel.  Not shared between episodes; one coroutine at a time."""

    def __init__(self, config: KernelConfig, dirs: JailDirs) -> None:
        self.config = config
        self.dirs = dirs
        self.id = next(_ids)
        self.jail: JailedProcess | None = None
        self.client: AsyncKernelClient | None = None
        self.started_at = 0.0
        self.broken = ""  # set when the kernel sent something the client could not read
        self._monitor: Any = None  # IOPub disconnect events (oversized messages)
        self._interrupting: str | None = None  # msg_id of an interrupt_request not yet answered

    # -- life cycle -------------------------------------------------------------------
    async def start(self) -> None:
        """Launch the jail and wait until the kernel answers on shell *and* IOPub."""
        t0 = time.monotonic()
        info = {
            "transport": "ipc",
            "ip": f"{JAIL_IPC}/k",
            **{port: i for i, port in enumerate(_PORTS, start=1)},
            "key": secrets.token_hex(32),
            "signature_scheme": "hmac-sha256",
            "kernel_name": "",
        }
        conn = self.dirs.ipc / "kernel.json"
        conn.write_text(json.dumps(info))
        # The jail has no /etc: without a config, fontconfig (matplotlib's font scan) prints
        # "Cannot load default config file" into the first cell that plots.
        (self.dirs.ipc / "fonts.conf").write_text(_FONTS_CONF)
        args = ["-f", f"{JAIL_IPC}/kernel.json", *self.config.kernel_args]
        env = {
            "IPYTHONDIR": "/tmp/.ipython",
            "MPLCONFIGDIR": "/tmp/.matplotlib",
            "XDG_CACHE_HOME": "/tmp/.cache",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "FONTCONFIG_FILE": f"{JAIL_IPC}/fonts.conf",
            # One BLAS/OpenMP thread: threads count against RLIMIT_NPROC, and cores are few.
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        packages = self.config.packages

        def start_jail() -> (
            JailedProcess
        ):  # in a thread: it forks, and the first listing reads metadata
            view: dict[str, Any] = {}
            if packages is not None:
                view = {"site_dir": site_packages(), "site_names": site_entries(packages)}
            return launch(
                "ipykernel_launcher", args, self.dirs, limits=self.config.limits, env=env, **view
            )

        launching = asyncio.ensure_future(asyncio.to_thread(start_jail))
        try:
            self.jail = await asyncio.shield(launching)
        except asyncio.CancelledError:  # the launch goes on in its thread: wait for it, kill it
            self.jail = await launching
            await self.shutdown()
            raise
        client = AsyncKernelClient()
        # Linger 0 for every socket: a message queued for a dead kernel must never make
        # closing the context (explicitly or at garbage collection) wait forever.
        client.context.setsockopt(zmq.LINGER, 0)
        # The output cap must hold on the socket, not after a whole message
        # is in host memory.  libzmq reads a frame's size first and drops a connection whose
        # frame is larger than MAXMSGSIZE without allocating it (the SUB socket reconnects);
        # the receive high-water mark bounds how many capped messages can queue up.
        client.context.setsockopt(zmq.MAXMSGSIZE, self.config.max_message_bytes)
        client.context.setsockopt(zmq.RCVHWM, _RCVHWM)
        client.load_connection_info({**info, "ip": str(self.dirs.ipc / "k")})
        client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=True)
        self.client = client
        self._watch_iopub()
        try:
            await self._wait_ready(t0 + self.config.startup_timeout_s)
            setup = _SETUP if self.config.reap_strays else ""
            if self.config.preload:
                setup += "".join(
                    f"\n__import__('importlib').import_module({m!r})" for m in self.config.preload
                )
            if setup:
                await self._silent(setup, t0 + self.config.startup_timeout_s)
        except BaseException:
            await self.shutdown()
            raise
        self.jail.find_main()
        self.started_at = time.monotonic()

    async def _wait_ready(self, deadline: float) -> None:
        assert self.client is not None and self.jail is not None
        while True:
            msg_id = self.client.kernel_info()
            got_reply = got_iopub = False
            # Requests wait in ZeroMQ's queue until the kernel binds; re-ask now and then in
            # case IOPub (a subscription: it may connect later than shell) missed the answer.
            until = min(deadline, time.monotonic() + 0.25)
            while time.monotonic() < until and not (got_reply and got_iopub):
                if not self.jail.alive():
                    raise KernelStartError(self._died("before it was ready"))
                got_reply = got_reply or await self._take(self.client.shell_channel, msg_id, 0.005)
                got_iopub = got_iopub or await self._take(self.client.iopub_channel, msg_id, 0.005)
            if got_reply and got_iopub:
                await self._drain(self.client.iopub_channel)
                return
            if time.monotonic() >= deadline:
                raise KernelStartError(
                    f"the kernel did not answer within {self.config.startup_timeout_s:.0f} s: "
                    + self.jail.diagnostics(self.dirs.ipc)
                )

    async def _silent(self, code: str, deadline: float) -> None:
        assert self.client is not None
        msg_id = self.client.execute(code, silent=True, store_history=False)
        while time.monotonic() < deadline:
            if await self._take(self.client.shell_channel, msg_id):
                await self._drain(self.client.iopub_channel)
                return
            if self.jail is not None and not self.jail.alive():
                raise KernelStartError(self._died("during setup"))
        raise KernelStartError("the kernel did not finish its setup in time")

    async def _get(self, channel: Any, timeout: float) -> dict[str, Any] | None:
        """One message, or None after ``timeout``.  Code in the kernel can corrupt what the
        kernel sends (patch ``json.dumps``, write to its sockets): an unreadable message marks
        the kernel broken instead of raising into the host."""
        try:
            msg = await channel.get_msg(timeout=timeout)
        except Empty:
            return None
        except Exception as exc:  # noqa: BLE001 - anything the deserializer raises
            self.broken = f"it sent a malformed message ({type(exc).__name__})"
            return None
        return msg if isinstance(msg, dict) else None

    async def _take(self, channel: Any, msg_id: str, timeout: float = _POLL_S) -> bool:
        """Read one message (waiting up to ``timeout``); True if it answers ``msg_id``."""
        msg = await self._get(channel, timeout)
        return msg is not None and _parent(msg) == msg_id

    async def _drain(self, channel: Any) -> None:
        while await channel.msg_ready():
            await self._get(channel, 0)

    def _died(self, when: str) -> str:
        assert self.jail is not None
        why = self.jail.exit_reason()
        details = self.jail.diagnostics(self.dirs.ipc)
        return f"the kernel exited {when} ({why})" + (f": {details}" if details else "")

    @property
    def alive(self) -> bool:
        """Running and still speaking the protocol."""
        return self.jail is not None and not self.broken and self.jail.alive()

    def exit_reason(self) -> str:
        if self.broken:
            return self.broken
        return self.jail.exit_reason() if self.jail is not None else "never started"

    async def shutdown(self) -> None:
        """Kill the jail (no graceful shutdown: nothing in it is worth waiting for)."""
        if self.client is not None:
            self._unwatch_iopub()
            self.client.stop_channels()
            self.client = None
        if self.jail is not None:
            await asyncio.to_thread(self.jail.kill)

    # -- execution ---------------------------------------------------------------------
    async def ping(self, timeout: float = 2.0) -> bool:
        """A kernel_info round trip: the kernel is alive and its shell loop is responsive."""
        if not self.alive or self.client is None:
            return False
        await self._drain(self.client.shell_channel)
        msg_id = self.client.kernel_info()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self._take(self.client.shell_channel, msg_id):
                return True
            if not self.alive:
                return False
        return False

    def submit(self, code: str) -> str:
        """Send an execute_request; returns its msg_id."""
        assert self.client is not None
        return self.client.execute(
            code, silent=False, store_history=True, allow_stdin=False, stop_on_error=False
        )

    async def wait(self, msg_id: str, collector: OutputCollector, deadline: float) -> RunOutcome:
        """Fold IOPub messages of ``msg_id`` into ``collector`` until the kernel is idle again,
        the deadline passes or the kernel dies.  A flood of output interrupts the cell once."""
        assert self.client is not None
        iopub = self.client.iopub_channel
        interrupted = False
        count: int | None = None
        replied: float | None = (
            None  # when the execute_reply was seen (only looked for when IOPub is quiet)
        )
        resubscribed = False
        heard = time.monotonic()  # last IOPub message
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return RunOutcome("timeout", msg_id, count)
            msg = await self._get(iopub, min(_POLL_S, remaining))
            if msg is None:
                if not self.alive:
                    return RunOutcome("died", msg_id, count)
                if await self._iopub_drops():
                    collector.drop(self.config.max_message_bytes)
                    self._reconnect_iopub()
                    iopub = self.client.iopub_channel
                    resubscribed = True
                    if not interrupted:
                        interrupted = True
                        await self.interrupt()
                if replied is None and await self._replied(msg_id):
                    replied = time.monotonic()
                if replied is not None and time.monotonic() - max(replied, heard) >= _LOST_IDLE_S:
                    if resubscribed:  # the new subscription must be live before the next cell
                        await self._wait_ready(time.monotonic() + self.config.startup_timeout_s)
                    await self._settle_interrupt()
                    return RunOutcome("idle", msg_id, count)
                continue
            heard = time.monotonic()
            if _parent(msg) != msg_id:
                continue
            kind, content = msg.get("msg_type"), msg.get("content")
            content = content if isinstance(content, dict) else {}
            if kind == "status" and content.get("execution_state") == "idle":
                # The execute_reply is not awaited (it says nothing IOPub did not): replies
                # are matched by msg_id wherever the shell channel is read, and drained here.
                await self._drain(self.client.shell_channel)
                await self._settle_interrupt()
                return RunOutcome("idle", msg_id, count)
            if kind == "execute_input":
                count = content.get("execution_count")
                continue
            collector.add_message(str(kind), content)
            if collector.flooded and not interrupted:
                interrupted = True
                await self.interrupt()

    def _watch_iopub(self) -> None:
        # libzmq refuses a frame over MAXMSGSIZE by dropping the connection, and a SUB socket
        # does not reconnect after that protocol error: the disconnect event is the only sign.
        assert self.client is not None
        self._monitor = self.client.iopub_channel.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)

    def _unwatch_iopub(self) -> None:
        if self._monitor is not None and self.client is not None:
            self.client.iopub_channel.socket.disable_monitor()
            self._monitor.close(linger=0)
        self._monitor = None

    def _reconnect_iopub(self) -> None:
        """A fresh IOPub socket after a refused message (the old connection is gone)."""
        assert self.client is not None
        self._unwatch_iopub()
        self.client.iopub_channel.close()
        self.client._iopub_channel = None  # the property connects and subscribes a new one
        self._watch_iopub()

    async def _iopub_drops(self) -> int:
        """How many times IOPub was disconnected since the last call (each: a refused message)."""
        count = 0
        while self._monitor is not None and self._monitor.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            await self._monitor.recv_multipart()
            count += 1
        return count

    async def _replied(self, msg_id: str) -> bool:
        """Whether the execute_reply of ``msg_id`` is on the shell channel (not waiting)."""
        assert self.client is not None
        shell = self.client.shell_channel
        while await shell.msg_ready():
            msg = await self._get(shell, 0)
            if msg is not None and _parent(msg) == msg_id:
                return True
        return False

    async def interrupt(self) -> None:
        """Ask the kernel to raise KeyboardInterrupt in the running cell (control channel:
        signals cannot cross into the jail's session, messages can)."""
        assert self.client is not None
        msg = self.client.session.msg("interrupt_request", {})
        self._interrupting = msg["header"]["msg_id"]
        self.client.control_channel.send(msg)

    async def _settle_interrupt(self) -> None:
        """Before a cell counts as over, its interrupt must have been delivered.

        The kernel signals itself when its control thread handles the request; handled late
        (a loaded machine: the cell was over already), the KeyboardInterrupt would hit the
        *next* cell.  The reply comes right after the signal, so waiting for it closes that
        window; a kernel that does not answer within the grace is marked broken (restarted
        before the next cell) rather than trusted.
        """
        assert self.client is not None
        deadline = time.monotonic() + self.config.interrupt_grace_s
        while self._interrupting is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.broken = "it did not answer an interrupt request"
                return
            if await self._take(
                self.client.control_channel, self._interrupting, min(_POLL_S, remaining)
            ):
                self._interrupting = None
