"""The kernel's output cap holds on the socket.  Before, the host read a whole
IOPub message before capping it: ``print('x' * 800_000_000)`` took the host to 2.3 GiB."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(180)]

# Run in a fresh interpreter so its peak RSS (ru_maxrss) says what this one cell cost the host.
_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, resource
    from envgym.tools.python_kernel import KernelConfig, KernelPool

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    async def main():
        async with KernelPool(KernelConfig(timeout_s=60), warm=0, max_kernels=1) as pool:
            s = await pool.acquire()
            await s.execute("print('warm up')")
            before = peak()
            big = await s.execute("print('x' * 400_000_000)")
            after = peak()
            nxt = await s.execute("print('next')")
            await s.close()
        print(json.dumps({"grew": after - before, "status": big.status, "text": big.text, "next": nxt.text}))

    asyncio.run(main())
    """
)


def test_an_oversized_output_message_never_reaches_host_memory() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=150
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "output_limit"
    assert out["text"] == (
        "The code sent an output of more than 8 MiB at once; it was discarded unread and the code "
        "interrupted. Print less (e.g. summaries, head(), len())."
    )
    assert out["grew"] < 100 * 1024**2, out[
        "grew"
    ]  # 400 MB of output; the socket caps frames at 8 MiB
    assert out["next"] == "next\n"  # IOPub was reconnected: the kernel is usable
