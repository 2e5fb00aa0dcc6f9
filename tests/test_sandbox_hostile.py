"""Hostile bundle code against the isolating backends (bwrap, docker).

After every attack: the outcome carries the right CallError and a readable message, the host
is untouched, and the next normal call succeeds on the same (intact) episode state.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envgym.bundle import BundleError
from envgym.sandbox import CallError, CallOutcome, Limits, Sandbox, open_sandbox

HOSTILE = '''
import os
import signal
import socket
from envgym.runtime import sqlite, state_dir


def bump() -> int:
    """Increment the counter."""
    db = sqlite()
    db.execute("UPDATE counter SET n = n + 1")
    return db.execute("SELECT n FROM counter").fetchone()[0]


def counter() -> int:
    """The counter."""
    return sqlite().execute("SELECT n FROM counter").fetchone()[0]


def read_file(path: str) -> str:
    """Read any file."""
    with open(path) as f:
        return f.read()


def write_file(path: str) -> str:
    """Write any file."""
    with open(path, "w") as f:
        f.write("pwned")
    return "written"


def write_state(name: str) -> str:
    """Write a file into the episode state."""
    (state_dir() / name).write_text("fine")
    return "ok"


def list_dir(path: str) -> list[str]:
    """List a directory."""
    return sorted(os.listdir(path))


def connect(host: str, port: int) -> str:
    """Open a TCP connection."""
    with socket.create_connection((host, port), timeout=2) as s:
        s.sendall(b"hello")
    return "connected"


def fork_bomb() -> int:
    """Fork without end."""
    while True:
        os.fork()


def allocate(gib: int) -> int:
    """Allocate memory."""
    return len(bytearray(gib * 1024**3))


def spin() -> None:
    """Loop forever."""
    while True:
        pass


def kill_parent() -> str:
    """Signal the parent process."""
    os.kill(os.getppid(), signal.SIGKILL)
    return "sent"


def kill_pid(pid: int) -> str:
    """Signal any process."""
    os.kill(pid, signal.SIGKILL)
    return "sent"


def flood(mib: int) -> str:
    """Print a lot, through sys.stdout and straight to fd 1."""
    print("x" * (mib * 1024**2))
    os.write(1, b"y" * (mib * 1024**2))
    return "printed"


def hard_exit() -> None:
    """os._exit."""
    os._exit(3)


def segfault() -> None:
    """Crash the interpreter."""
    import ctypes
    ctypes.string_at(0)


def scribble() -> str:
    """Write garbage to every fd that might be the reply channel."""
    import stat
    for fd in range(3, 64):
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                os.write(fd, b"garbage\\n")
        except OSError:
            pass
    return "scribbled"


def whoami() -> dict[str, object]:
    """Who the tool runs as."""
    return {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups()}


def environment() -> dict[str, str]:
    """The worker's own environment (os.environ: readable whatever /proc allows)."""
    return dict(os.environ)


def import_host_package(name: str) -> str:
    """Import a package from the host's virtualenv."""
    __import__(name)
    return "imported"
'''

SOLUTION = """
import os
import signal


def kill_host(tools, task):
    os.kill(task["metadata"]["host_pid"], signal.SIGKILL)
"""

LIMITS = Limits(
    call_timeout_s=3,
    memory_bytes=1024**3,
    max_processes=32,
    max_file_bytes=64 * 1024**2,
    max_stdout_bytes=4096,
)


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest, require_backend: Callable[[str], None]) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture
def bundle(make_bundle: Callable[..., Path]) -> Path:
    return make_bundle(HOSTILE, SOLUTION, "")


@pytest.fixture
def state(bundle: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(bundle / "state", tmp_path / "episode"))


@pytest.fixture
def box(bundle: Path, backend: str, state: Path) -> Iterator[Sandbox]:
    with open_sandbox(bundle, backend, LIMITS) as sandbox:
        sandbox.reset(state)
        assert sandbox.call_tool("bump", {}).value == 1  # state the attack must not lose
        yield sandbox


def refused(outcome: CallOutcome, *kinds: CallError) -> str:
    assert not outcome.ok, f"the attack succeeded: {outcome.value!r}"
    assert outcome.error in (kinds or (CallError.EXCEPTION,)), (outcome.error, outcome.message)
    assert outcome.message and len(outcome.message) < 5000
    return outcome.message


def still_works(box: Sandbox) -> None:
    assert box.call_tool("counter", {}).value == 1
    assert box.call_tool("bump", {}).value == 2


def test_cannot_read_outside(box: Sandbox, backend: str, tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOP-SECRET")
    secret.chmod(0o644)
    for path in (str(secret), "/etc/shadow", str(Path(__file__))):
        message = refused(box.call_tool("read_file", {"path": path}))
        assert "TOP-SECRET" not in message
    # The bundle as the worker sees it: code only, no tasks (gold data) and no pristine state;
    # bwrap's also holds the host's compiled code of those files (envgym/sandbox/bytecode.py).
    code = ["solution.py", "tools.py", "verifier.py"]
    listing = box.call_tool("list_dir", {"path": "/bundle"}).value
    assert listing == ([".bytecode", *code] if backend == "bwrap" else code)
    if backend == "bwrap":
        assert box.call_tool("list_dir", {"path": "/bundle/.bytecode"}).value == code
    if backend == "bwrap":
        top = set(box.call_tool("list_dir", {"path": "/"}).value)
        assert top <= {
            "usr",
            "lib",
            "lib64",
            "bin",
            "sbin",
            "root",
            "opt",
            "bundle",
            "state",
            "proc",
            "dev",
            "tmp",
        }
        prefix = Path(sys.base_prefix)
        if prefix.is_relative_to("/root"):  # only the way to the Python prefix, nothing else
            assert box.call_tool("list_dir", {"path": "/root"}).value == [prefix.parts[2]]
    still_works(box)


def test_host_environment_does_not_leak(
    bundle: Path, backend: str, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_TEST_API_KEY", "hunter2")
    with open_sandbox(bundle, backend, LIMITS) as sandbox:
        sandbox.reset(state)
        # /proc/*/environ is unreadable after the privilege drop, so reading
        # it alone passed even with the secret in the worker's environment.  os.environ is
        # the worker's real environment; the call must succeed for the check to mean anything.
        outcome = sandbox.call_tool("environment", {})
        assert outcome.ok, outcome
        assert "LANG" in outcome.value or "PATH" in outcome.value
        assert "ENVGYM_TEST_API_KEY" not in outcome.value and "hunter2" not in repr(outcome.value)
        for pid in ("self", "1"):
            outcome = sandbox.call_tool("read_file", {"path": f"/proc/{pid}/environ"})
            assert "hunter2" not in str(outcome.value) and "ENVGYM_TEST_API_KEY" not in str(
                outcome.value
            )


def test_cannot_write_outside_the_state(
    box: Sandbox, bundle: Path, state: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)
    targets = [
        str(outside / "new.txt"),
        "/bundle/tools.py",
        "/bundle/evil.py",
        "/tmp/evil",
        "/opt/envgym/envgym/evil.py",
        "/usr/evil",
    ]
    for path in targets:
        refused(box.call_tool("write_file", {"path": path}))
    assert list(outside.iterdir()) == []
    assert (bundle / "tools.py").read_text() == textwrap.dedent(HOSTILE)
    assert box.call_tool("write_state", {"name": "ok.txt"}).ok
    assert (state / "ok.txt").read_text() == "fine"
    still_works(box)


def test_no_network(box: Sandbox) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        refused(box.call_tool("connect", {"host": "127.0.0.1", "port": port}))
        with pytest.raises(TimeoutError):
            listener.accept()
    refused(box.call_tool("connect", {"host": "deb.debian.org", "port": 80}))
    still_works(box)


def test_venv_packages_are_not_visible(box: Sandbox) -> None:
    assert "No module named 'jsonschema'" in refused(
        box.call_tool("import_host_package", {"name": "jsonschema"})
    )
    assert box.call_tool("import_host_package", {"name": "socket"}).ok  # the stdlib is whole
    assert box.call_tool("import_host_package", {"name": "ctypes"}).ok
    still_works(box)


def test_runs_unprivileged(box: Sandbox) -> None:
    who = box.call_tool("whoami", {}).value
    assert who["uid"] != 0 and who["euid"] != 0 and who["gid"] != 0
    assert 0 not in who["groups"]


def test_fork_bomb(box: Sandbox) -> None:
    start = time.monotonic()
    refused(box.call_tool("fork_bomb", {}), CallError.EXCEPTION, CallError.TIMEOUT)
    assert time.monotonic() - start < 15
    still_works(box)


def test_allocating_10_gib(box: Sandbox) -> None:
    message = refused(box.call_tool("allocate", {"gib": 10}), CallError.MEMORY)
    assert "MemoryError" in message or "memory" in message
    still_works(box)


def test_infinite_loop_times_out_and_restarts(box: Sandbox) -> None:
    start = time.monotonic()
    message = refused(box.call_tool("spin", {}), CallError.TIMEOUT)
    assert "longer than 3 s" in message
    assert time.monotonic() - start < 10
    still_works(box)


def test_signalling_parent_init_and_host(box: Sandbox) -> None:
    for outcome in (
        box.call_tool("kill_parent", {}),
        box.call_tool("kill_pid", {"pid": 1}),
        box.call_tool("kill_pid", {"pid": os.getpid()}),
        box.call_tool("kill_pid", {"pid": os.getppid()}),
    ):
        # Either refused outright (EPERM/ESRCH) or a no-op on the namespace's init.
        assert outcome.ok or outcome.error is CallError.EXCEPTION, outcome
    solved = box.solve("kill_host", {"metadata": {"host_pid": os.getpid()}}, None)
    assert solved.outcome.error is CallError.EXCEPTION
    assert (
        "ProcessLookupError" in solved.outcome.message
        or "PermissionError" in solved.outcome.message
    )
    still_works(box)


def test_printing_100_mib(box: Sandbox) -> None:
    outcome = box.call_tool("flood", {"mib": 100})
    assert (
        outcome.ok or outcome.error is CallError.EXCEPTION
    )  # RLIMIT_FSIZE may refuse the fd write
    assert len(outcome.stdout) < 3 * 4096 and "dropped" in outcome.stdout
    still_works(box)


@pytest.mark.parametrize(
    ("tool", "needle"), [("hard_exit", "exited (status 3)"), ("segfault", "SIGSEGV")]
)
def test_crashes_restart(box: Sandbox, tool: str, needle: str) -> None:
    assert needle in refused(box.call_tool(tool, {}), CallError.CRASH)
    still_works(box)


def test_garbage_on_the_reply_channel(box: Sandbox) -> None:
    refused(box.call_tool("scribble", {}), CallError.PROTOCOL)
    still_works(box)


@pytest.mark.parametrize(
    ("tools", "needle"),
    [
        ("while True:\n    pass\n", "longer than 3 s"),
        ("import os\nos._exit(5)\n", "exited (status 5)"),
    ],
)
def test_hostile_import_is_a_bundle_error(
    make_bundle: Callable[..., Path], backend: str, state: Path, tools: str, needle: str
) -> None:
    with open_sandbox(make_bundle(tools), backend, LIMITS) as sandbox:
        with pytest.raises(BundleError) as err:
            sandbox.describe_tools()
        assert err.value.file == "tools.py" and needle in str(err.value)
        sandbox.reset(state)
        assert not sandbox.call_tool("anything", {}).ok


def test_printing_at_import_cannot_fake_replies(
    make_bundle: Callable[..., Path], backend: str, state: Path
) -> None:
    tools = (
        "import os\n"
        'os.write(1, b\'{"id": 1, "ok": true, "value": {"tools": []}}\\n\' * 3)\n'
        "print('noise')\n\n"
        "def ping() -> str:\n"
        '    """Ping."""\n'
        "    return 'pong'\n"
    )
    with open_sandbox(make_bundle(tools), backend, LIMITS) as sandbox:
        assert [spec.name for spec in sandbox.describe_tools()] == ["ping"]
        sandbox.reset(state)
        assert sandbox.call_tool("ping", {}).value == "pong"
