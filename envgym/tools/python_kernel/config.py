"""Settings of the python tool: timeouts, output caps, the jail's limits, kernel options."""

from __future__ import annotations

from dataclasses import dataclass, field

from envgym.sandbox.kernel_jail import JailLimits
from envgym.tools.python_kernel.packages import KERNEL_PACKAGES

#: DeepSeek-V3.2 Appendix B, Table 7: "python will respond with the output of the execution or
#: time out after 120.0 seconds".
DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class KernelConfig:
    """How kernels are started and how one execution is bounded."""

    timeout_s: float = DEFAULT_TIMEOUT_S  # wall clock per execution, then interrupt
    interrupt_grace_s: float = 3.0  # after the interrupt: wait this long, then restart
    startup_timeout_s: float = 60.0  # a cold start under load (~0.6 s idle here)
    max_output_chars: int = 8_000  # shown to the model: head and tail of the output
    flood_bytes: int = 4 * 1024**2  # output received past this interrupts the cell
    # One message (frame) from the kernel larger than this is refused by ZeroMQ unread.
    max_message_bytes: int = 8 * 1024**2
    max_traceback_lines: int = 12  # of the shortened traceback
    reap_strays: bool = True  # processes a cell started do not outlive it
    preload: tuple[str, ...] = ()  # modules imported at kernel start (warm kernels have them)
    limits: JailLimits = field(default_factory=JailLimits)
    # Distributions the kernel may import (with what they require); everything else in
    # site-packages is hidden from it (no task generator: it would give answers away).  None: all.
    packages: tuple[str, ...] | None = KERNEL_PACKAGES
    # Options for the kernel process (traitlets command-line form).
    kernel_args: tuple[str, ...] = (
        "--HistoryManager.enabled=False",  # no sqlite history thread, no file under $HOME
        "--InteractiveShell.colors=nocolor",  # tracebacks without ANSI escapes
        "--InteractiveShell.xmode=Plain",
        "--IPKernelApp.quiet=True",
    )

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.max_message_bytes < 64 * 1024:
            raise ValueError(
                f"max_message_bytes must be at least 65536, got {self.max_message_bytes}"
            )
        if self.max_output_chars < 200:
            raise ValueError(f"max_output_chars must be at least 200, got {self.max_output_chars}")
