"""The python tool: code runs in real Jupyter kernels (ipykernel) jailed with bubblewrap.

    from envgym.tools.python_kernel import KernelPool

    async with KernelPool(warm=2) as pool:
        session = await pool.acquire()          # a warm kernel, fresh namespace
        result = await session.execute("x = 6 * 7\\nx")
        print(result.text)                      # "42"
        await session.close()                   # the kernel is discarded, never reused

``SyncKernelPool`` offers the same from synchronous code.  Design: docs/CODE_INTERPRETER.md.
"""

from envgym.tools.python_kernel.config import DEFAULT_TIMEOUT_S, KernelConfig
from envgym.tools.python_kernel.kernel import KernelStartError
from envgym.tools.python_kernel.output import KernelError
from envgym.tools.python_kernel.pool import KernelPool, PoolStats
from envgym.tools.python_kernel.session import ExecutionResult, KernelSession
from envgym.tools.python_kernel.sync import SyncKernelPool, SyncKernelSession

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ExecutionResult",
    "KernelConfig",
    "KernelError",
    "KernelPool",
    "KernelSession",
    "KernelStartError",
    "PoolStats",
    "SyncKernelPool",
    "SyncKernelSession",
]
