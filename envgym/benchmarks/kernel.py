"""``envgym bench kernel``: what a code-interpreter episode pays for its notebook.

In one process, one run, on real jailed ipykernels (envgym/tools/python_kernel):

* ``cold_start_ms`` — a kernel started from nothing (bubblewrap + ipykernel + first answer on
  shell and IOPub): what an episode would pay without a pool (the baseline);
* ``warm_acquire_ms`` — ``pool.acquire()`` when a warm kernel is idle (health check included);
* ``cell_overhead_ms`` — a trivial cell (``pass``) through ``session.execute``: request,
  IOPub busy/input/idle, shell reply, the stray-process check;
* ``ratio_cold_over_warm`` and, as a reference point for the cell, a bare ``kernel_info``
  round trip (``kernel_info_ms``).
"""

from __future__ import annotations

import asyncio
import time
from statistics import median

from envgym.bench import BenchResult
from envgym.tools.python_kernel import KernelConfig, KernelPool


async def _measure(quick: bool) -> dict[str, float]:
    n_cold, n_warm, n_cells = (2, 5, 100) if quick else (5, 20, 500)
    config = KernelConfig()
    async with KernelPool(config, warm=0, max_kernels=4) as cold_pool:
        cold = []
        for _ in range(n_cold):
            t0 = time.perf_counter()
            session = await cold_pool.acquire()  # nothing warm: a start on the critical path
            cold.append(time.perf_counter() - t0)
            await session.close()
            await asyncio.sleep(0.2)  # let the retirement finish off the clock
    async with KernelPool(config, warm=1, max_kernels=4) as pool:
        warm = []
        for _ in range(n_warm):
            while pool.stats().idle < 1:  # the refill starts the next kernel off the clock
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.05)
            t0 = time.perf_counter()
            session = await pool.acquire()
            warm.append(time.perf_counter() - t0)
            await session.close()
        session = await pool.acquire()
        for _ in range(20):
            await session.execute("pass")
        cells = []
        for _ in range(n_cells):
            t0 = time.perf_counter()
            await session.execute("pass")
            cells.append(time.perf_counter() - t0)
        pings = []
        for _ in range(n_cells):
            t0 = time.perf_counter()
            await session.kernel.ping()
            pings.append(time.perf_counter() - t0)
        await session.close()
    cold_ms, warm_ms = median(cold) * 1e3, median(warm) * 1e3
    return {
        "cold_start_ms": cold_ms,
        "warm_acquire_ms": warm_ms,
        "cell_overhead_ms": median(cells) * 1e3,
        "kernel_info_ms": median(pings) * 1e3,
        "ratio_cold_over_warm": cold_ms / warm_ms,
    }


def run(quick: bool = False) -> BenchResult:
    metrics = asyncio.run(_measure(quick))
    return BenchResult(
        benchmark="kernel",
        metrics=metrics,
        units={
            "cold_start_ms": "ms",
            "warm_acquire_ms": "ms",
            "cell_overhead_ms": "ms",
            "kernel_info_ms": "ms",
            "ratio_cold_over_warm": "ratio",
        },
        notes={
            "cold_start_ms": "baseline: start a jailed kernel on demand",
            "warm_acquire_ms": "target <= 20 ms",
            "cell_overhead_ms": "trivial cell end to end; target <= 6 ms",
            "kernel_info_ms": "bare shell round trip, for reference",
            "ratio_cold_over_warm": "what the pool saves per episode",
        },
    )
