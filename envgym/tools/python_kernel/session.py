"""An episode's notebook: one leased kernel plus its working directory, with the policy for
timeouts (interrupt, then restart), dead kernels (restart) and stray processes (killed)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envgym.sandbox.kernel_jail import hand_over
from envgym.tools.python_kernel.kernel import JailedKernel
from envgym.tools.python_kernel.output import KernelError, OutputCollector

if TYPE_CHECKING:
    from envgym.tools.python_kernel.pool import KernelPool

Status = Literal["ok", "error", "timeout", "died", "output_limit"]
_LOST = "Variables from earlier executions are lost; files in the working directory were kept."


@dataclass(frozen=True)
class ExecutionResult:
    """One execution as the model sees it (``text``) plus what happened, for bookkeeping."""

    text: str
    status: Status  # ok | error (the code raised) | timeout | died | output_limit
    execution_count: int | None
    duration_s: float
    error: KernelError | None = None
    restarted: bool = False  # the namespace was lost (a fresh kernel now runs the session)
    strays_killed: int = 0  # processes the cell left behind, killed after it

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class KernelSession:
    """Stateful execution for one episode.  Obtain from :meth:`KernelPool.acquire`; ``close``
    gives it back (the kernel is then discarded, never reused)."""

    def __init__(self, pool: KernelPool, kernel: JailedKernel) -> None:
        self._pool = pool
        self.kernel = kernel
        self.workspace: Path = kernel.dirs.workspace
        self.executions = 0
        self.restarts = 0
        self.closed = False

    async def execute(self, code: str, timeout_s: float | None = None) -> ExecutionResult:
        """Run ``code`` like a notebook cell; never raises for anything the code does."""
        if self.closed:
            raise RuntimeError("this kernel session was closed")
        config = self._pool.config
        timeout = config.timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        notes: list[str] = []
        before = ""
        restarted = False
        if not self.kernel.alive:  # died between executions (e.g. a thread of a previous cell)
            before = f"The Python kernel had died ({self.kernel.exit_reason()}) and was restarted. {_LOST}\n\n"
            await self._restart()
            restarted = True
        self.executions += 1
        out = OutputCollector(
            config.max_output_chars, config.flood_bytes, config.max_traceback_lines
        )
        kernel = self.kernel
        msg_id = kernel.submit(code)
        outcome = await kernel.wait(msg_id, out, time.monotonic() + timeout)
        status: Status = "error" if out.error else "ok"
        if outcome.status == "timeout":
            status = "timeout"
            await kernel.interrupt()
            after = await kernel.wait(msg_id, out, time.monotonic() + config.interrupt_grace_s)
            if after.status == "idle":
                out.error = None  # the KeyboardInterrupt we caused is not the model's error
                notes.append(
                    f"Execution timed out after {timeout:g} seconds and was interrupted; "
                    "the kernel's variables are kept."
                )
            else:
                why = "died" if after.status == "died" else "did not respond to the interrupt"
                notes.append(
                    f"Execution timed out after {timeout:g} seconds; the kernel {why} and was restarted. {_LOST}"
                )
                await self._restart()
                restarted = True
        elif outcome.status == "died":
            status = "died"
            notes.append(
                f"The Python kernel died while running this code ({kernel.exit_reason()}) and was restarted. {_LOST}"
            )
            await self._restart()
            restarted = True
        elif out.flooded:
            status = "output_limit"
            out.error = None if out.error and out.error.ename == "KeyboardInterrupt" else out.error
            if out.dropped:
                notes.append(
                    f"The code sent an output of more than {config.max_message_bytes / 1024**2:g} MiB at once; it "
                    "was discarded unread and the code interrupted. Print less (e.g. summaries, head(), len())."
                )
            else:
                notes.append(
                    f"The code printed more than {config.flood_bytes // 1024**2} MiB, so it was interrupted; "
                    "print less (e.g. summaries, head(), len())."
                )
        strays = await self._reap() if config.reap_strays else 0
        if strays:
            notes.append(f"{strays} background process(es) left by this code were stopped.")
        text = out.render()
        if notes:
            text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + "\n".join(notes)
        return ExecutionResult(
            text=before + (text if text.strip() else "(no output)"),
            status=status,
            execution_count=outcome.execution_count,
            duration_s=time.monotonic() - started,
            error=out.error,
            restarted=restarted,
            strays_killed=strays,
        )

    def hand_over_workspace(self) -> None:
        """Give what the host put into the working directory to the kernel's user (links are
        never followed), so the code can modify and delete those files."""
        hand_over(self.workspace, self.kernel.jail.uid if self.kernel.jail is not None else None)

    async def _reap(self) -> int:
        jail = self.kernel.jail
        if jail is None or not jail.alive():
            return 0
        if not jail.has_strays():  # the common case: nothing to do, no thread hop
            return 0
        return await asyncio.to_thread(jail.reap_strays)

    async def _restart(self) -> None:
        """Replace the kernel with a cold-started one bound to the same working directory."""
        old = self.kernel
        self.kernel = await self._pool._replace_kernel(old)
        self.restarts += 1

    async def restart(self) -> None:
        """Throw the namespace away (files in the working directory stay)."""
        await self._restart()

    async def close(self) -> None:
        """Give the session back: its kernel is killed, its working directory removed."""
        if not self.closed:
            self.closed = True
            await self._pool._release(self)
