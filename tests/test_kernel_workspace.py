"""A kernel's /workspace (and its IPC directory) is a size-limited tmpfs, so a
cell cannot grow host /dev/shm (host RAM) past the quota; the agent sees ENOSPC and the kernel
stays usable."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgym.sandbox.kernel_jail import JailLimits
from envgym.sandbox.quota import quota_supported
from envgym.tools.python_kernel import KernelConfig, SyncKernelPool

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not quota_supported(), reason="mounting a tmpfs needs root (CAP_SYS_ADMIN)"),
]
QUOTA = 32 * 1024**2
SHM = Path("/dev/shm")


@pytest.fixture(scope="module")
def pool() -> Iterator[SyncKernelPool]:
    config = KernelConfig(timeout_s=60, limits=JailLimits(workspace_bytes=QUOTA))
    with SyncKernelPool(config, warm=0, max_kernels=2, root=SHM) as p:
        yield p


def _used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


# Four files of 128 MiB (each under RLIMIT_FSIZE): 512 MiB into host /dev/shm before the fix.
_FILL = """
import errno
chunk, written, error = b'x' * 1024**2, 0, None
try:
    for i in range(4):
        with open(f'{DIR}/fill{i}.bin', 'wb') as fh:
            for _ in range(128):
                fh.write(chunk)
                written += len(chunk)
except OSError as exc:
    error = exc
print(written // 1024**2, error.errno == errno.ENOSPC if error else None)
raise error
"""


def test_writing_past_the_quota_fails_with_enospc_and_host_shm_does_not_grow(
    pool: SyncKernelPool,
) -> None:
    with pool.acquire() as s:
        assert (
            _used(s.workspace) < QUOTA
            and os.statvfs(s.workspace).f_blocks * os.statvfs(s.workspace).f_frsize == QUOTA
        )
        before = _used(SHM)
        result = s.execute(_FILL.replace("{DIR}", "/workspace"))
        grown = _used(SHM) - before
        assert result.status == "error"
        written, enospc = result.text.splitlines()[0].split()
        assert enospc == "True" and int(written) <= QUOTA // 1024**2
        assert result.text.splitlines()[-1] == "OSError: [Errno 28] No space left on device"
        assert grown < 256 * 1024**2, grown  # the 512 MiB did not land on host /dev/shm
        assert _used(s.workspace) <= QUOTA
        # The kernel is fine, and space comes back when the agent deletes its files.
        after = s.execute(
            "import os\nfor f in os.listdir():\n    os.remove(f)\nopen('ok.txt', 'w').write('y' * 4096)"
        )
        assert (after.status, after.text) == ("ok", "4096\n")


def test_the_ipc_directory_is_bounded_too(pool: SyncKernelPool) -> None:
    with pool.acquire() as s:
        result = s.execute(_FILL.replace("{DIR}", "/run/kernel"))
        assert result.text.splitlines()[-1] == "OSError: [Errno 28] No space left on device"
        assert int(result.text.split()[0]) <= 1
        assert s.execute("print('alive')").text == "alive\n"


def test_workspaces_are_unmounted_when_episodes_end(pool: SyncKernelPool) -> None:
    with pool.acquire() as s:
        workspace = s.workspace
        assert os.path.ismount(workspace)
    for _ in range(200):  # the release kills the kernel, then unmounts, in the background
        if pool.stats().total == 0:
            break
        time.sleep(0.05)
    assert pool.stats().total == 0
    assert not workspace.exists() and not pool.pool._boxes
