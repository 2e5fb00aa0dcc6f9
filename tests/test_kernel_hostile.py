"""Bad input to the python tool: each attack is contained, the agent gets a clear message, and
the pool stays healthy (the next cell and the next episode work)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgym.sandbox.kernel_jail import children
from envgym.tools.python_kernel import KernelConfig, SyncKernelPool, SyncKernelSession

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def pool() -> Iterator[SyncKernelPool]:
    config = KernelConfig(timeout_s=3.0, interrupt_grace_s=2.0, flood_bytes=2 * 1024**2)
    with SyncKernelPool(config, warm=1, max_kernels=4) as p:
        yield p


@pytest.fixture
def session(pool: SyncKernelPool) -> Iterator[SyncKernelSession]:
    with pool.acquire() as s:
        yield s
    assert_healthy(pool)


def assert_healthy(pool: SyncKernelPool) -> None:
    with pool.acquire() as fresh:
        assert fresh.execute("print(6 * 7)").text == "42\n"
    stats = pool.stats()
    assert stats.leased == 0 and stats.total <= pool.pool.max_kernels


def jail_processes(s: SyncKernelSession) -> list[int]:
    """Live processes in the session's jail (zombies, already dead, are not counted)."""
    jail = s.session.kernel.jail
    assert jail is not None
    todo, seen = [jail.pid], []
    while todo:
        for kid in children(todo.pop()):
            todo.append(kid)
            try:
                state = Path(f"/proc/{kid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                seen.append(kid)
    return seen


def test_infinite_loop_is_interrupted_and_the_namespace_kept(session: SyncKernelSession) -> None:
    session.execute("kept = 'yes'")
    result = session.execute("while True:\n    pass")
    assert result.status == "timeout" and not result.restarted
    assert (
        result.text
        == "Execution timed out after 3 seconds and was interrupted; the kernel's variables are kept."
    )
    assert session.execute("kept").text == "'yes'\n"


def test_a_loop_that_ignores_interrupts_gets_the_kernel_restarted(
    session: SyncKernelSession,
) -> None:
    result = session.execute(
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    )
    assert result.status == "timeout" and result.restarted
    assert "did not respond to the interrupt and was restarted" in result.text
    assert "files in the working directory were kept" in result.text
    assert session.execute("1 + 1").text == "2\n"


def test_fork_bomb_stops_at_the_process_limit_and_is_cleaned_up(session: SyncKernelSession) -> None:
    # The property is the process limit, not speed: on a loaded machine reaching the limit can
    # take longer than the module's 3 s cell timeout, so this cell gets more time.
    result = session.execute("import os\nwhile True:\n    os.fork()", timeout_s=30.0)
    assert result.status == "error"
    assert (
        result.text.splitlines()[-3]
        == "BlockingIOError: [Errno 11] Resource temporarily unavailable"
    )
    assert result.strays_killed > 0
    assert result.text.endswith("background process(es) left by this code were stopped.")
    after = session.execute("import subprocess\nprint(subprocess.run(['true']).returncode)")
    assert after.text == "0\n"  # zombies were reaped, so the process limit is free again
    assert len(jail_processes(session)) == 2  # bwrap's init and the kernel, nothing else


def test_ten_gigabyte_allocation_is_a_memory_error(session: SyncKernelSession) -> None:
    result = session.execute("block = bytearray(10 * 1024**3)")
    assert result.status == "error" and not result.restarted
    assert result.text.endswith("MemoryError")
    numpy = session.execute("import numpy as np\nnp.ones(10 * 1024**3 // 8)")
    assert numpy.status == "error" and "MemoryError" in numpy.text  # numpy's _ArrayMemoryError
    assert session.execute("'still here'").text == "'still here'\n"


def test_shell_commands_run_jailed_and_do_not_outlive_the_cell(session: SyncKernelSession) -> None:
    result = session.execute(
        "import os, subprocess\n"
        "print(os.system('touch /usr/pwned 2>/dev/null') != 0)\n"
        "print(subprocess.run(['sh', '-c', 'id -u; ls /; echo x > /bin/x'], capture_output=True, text=True))\n"
        "background = subprocess.Popen(['sleep', '600'])"
    )
    assert result.status == "ok"
    lines = result.text.splitlines()
    assert lines[0] == "True"
    assert "Read-only file system" in lines[1] and "'0\\n" not in lines[1]  # not root
    assert "etc" not in lines[1].split("stdout=")[1].split("stderr=")[0]  # no host /etc in the jail
    assert result.strays_killed == 1
    assert result.text.endswith("1 background process(es) left by this code were stopped.")
    assert len(jail_processes(session)) == 2


def test_no_network_even_to_a_listener_on_the_host_loopback(session: SyncKernelSession) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        result = session.execute(
            f"import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))"
        )
        thread.join()
    finally:
        server.close()
    assert result.status == "error"
    assert result.text.endswith("ConnectionRefusedError: [Errno 111] Connection refused")
    assert accepted == []
    dns = session.execute("import socket\nsocket.getaddrinfo('pypi.org', 443)")
    assert dns.status == "error" and "gaierror" in dns.text


def test_files_outside_the_working_directory_are_out_of_reach(
    pool: SyncKernelPool, session: SyncKernelSession, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    with pool.acquire() as other:  # another episode's working directory
        (other.workspace / "theirs.txt").write_text("other episode")
        for path in (
            secret,
            Path("/etc/shadow"),
            other.workspace / "theirs.txt",
            Path("/root/.bashrc"),
        ):
            result = session.execute(f"open({str(path)!r}).read()")
            assert result.status == "error", path
            assert result.text.splitlines()[-1].startswith(
                "FileNotFoundError: [Errno 2] No such file or directory"
            )
    proc1 = session.execute("open('/proc/1/environ').read()")
    assert proc1.text.splitlines()[-1].startswith("PermissionError")
    escape = session.execute(
        "import os\nprint(sorted(os.listdir('../..')) == sorted(os.listdir('/')), os.path.exists('/etc'))"
    )
    assert escape.text == "True False\n"
    write = session.execute("open('/usr/lib/evil', 'w')")
    assert write.text.splitlines()[-1].startswith("OSError: [Errno 30] Read-only file system")


def test_printing_a_hundred_megabytes_is_cut_and_the_cell_stopped(
    session: SyncKernelSession,
) -> None:
    # Building and sending 100 MB takes more than the module's 3 s cell timeout on a loaded
    # 2-core machine, and this test is about the output caps, not the timeout: 30 s per cell.
    result = session.execute(
        "print('x' * 5_000_000)", timeout_s=30.0
    )  # over the 2 MiB flood, under the 8 MiB frame cap
    assert result.status == "output_limit"
    assert len(result.text) < 8_000 + 400
    assert "characters of output omitted" in result.text
    assert result.text.endswith(
        "The code printed more than 2 MiB, so it was interrupted; print less (e.g. summaries, head(), len())."
    )
    huge = session.execute(
        "print('x' * 100_000_000)", timeout_s=30.0
    )  # one message over the cap: refused on the socket
    assert huge.status == "output_limit" and not huge.restarted, (
        huge.status,
        huge.error,
        huge.text[-600:],
    )
    assert huge.text.startswith(
        "The code sent an output of more than 8 MiB at once; it was discarded unread"
    )
    flood = session.execute("while True:\n    print('y' * 1000)", timeout_s=30.0)
    assert flood.status == "output_limit" and not flood.restarted
    assert session.execute("print('ok')").text == "ok\n"


def _slow_interrupts(delay_s: float) -> str:
    """Kernel code that makes its control thread answer interrupt requests late (as on a
    loaded machine) or, with a huge delay, never."""
    return (
        "k = get_ipython().kernel\n"
        "_orig = k.control_handlers['interrupt_request']\n"
        "async def _slow(*a, **kw):\n"
        "    import asyncio\n"
        f"    await asyncio.sleep({delay_s})\n"
        "    return await _orig(*a, **kw)\n"
        "k.control_handlers['interrupt_request'] = _slow\n"
    )


def test_a_late_interrupt_does_not_hit_the_next_cell(session: SyncKernelSession) -> None:
    # A flooding cell is over by the time its interrupt is handled; the signal used to land
    # in the next cell as a KeyboardInterrupt (a fresh-clone run saw the 100 MB print fail so).
    assert session.execute(_slow_interrupts(1.0)).status == "ok"
    assert session.execute("print('x' * 5_000_000)").status == "output_limit"
    after = session.execute("import time\ntime.sleep(2)\nprint('done')")
    assert (after.status, after.error, after.text) == ("ok", None, "done\n")


def test_a_kernel_that_never_answers_an_interrupt_is_restarted(session: SyncKernelSession) -> None:
    assert session.execute(_slow_interrupts(1e6) + "kept = 1").status == "ok"
    assert session.execute("print('x' * 5_000_000)").status == "output_limit"
    after = session.execute("print('kept' in dir())")
    assert after.restarted and after.text.startswith(
        "The Python kernel had died (it did not answer an interrupt request) and was restarted."
    )
    assert after.text.endswith("False\n")


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.kill(os.getpid(), 9)",
        "import os\nos._exit(3)",
        "import os, signal\nos.kill(0, signal.SIGKILL)",
    ],
)
def test_killing_the_kernel_from_inside_restarts_it(session: SyncKernelSession, code: str) -> None:
    session.execute("lost = 1")
    result = session.execute(code)
    assert result.status == "died" and result.restarted
    assert result.text.startswith("The Python kernel died while running this code (")
    assert result.text.endswith(
        "and was restarted. Variables from earlier executions are lost; files in the working directory were kept."
    )
    assert session.execute("'lost' in dir()").text == "False\n"


def test_corrupting_the_kernel_protocol_restarts_it(session: SyncKernelSession) -> None:
    result = session.execute("import json\njson.dumps = lambda *a, **k: 'garbage'\nprint('hi')")
    assert result.status == "died" and result.restarted
    assert "it sent a malformed message" in result.text
    assert session.execute("print('clean')").text == "clean\n"


def test_kernel_code_holds_no_capability_and_no_keyring(session: SyncKernelSession) -> None:
    """The kernel's launcher seals its drop as the bundle worker does (sandbox/seal.py): every
    capability set empty, the key syscalls refused (ENOSYS), seccomp on."""
    code = (
        "import ctypes, platform\n"
        "st = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "nr = {'x86_64': 250, 'aarch64': 219}[platform.machine()]\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.syscall(ctypes.c_long(nr), ctypes.c_long(0), ctypes.c_long(-3), ctypes.c_long(0))\n"
        "print([st[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapAmb', 'Seccomp')],"
        " r, ctypes.get_errno())\n"
    )
    zero = "0000000000000000"
    assert session.execute(code).text == f"{[zero] * 4 + ['2']} -1 38\n"
