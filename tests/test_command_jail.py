"""envgym.sandbox.command_jail: one command in a jail (docs/SWE.md, "Running commands").

Every property test here was run once against a deliberately broken jail (no --unshare-net,
no RLIMIT_NPROC, no read-only remount, no kill of the tree, ...) and went red; docs/SANDBOX.md
("Running commands") lists them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from envgym.sandbox.bwrap import python_executable
from envgym.sandbox.command_jail import CommandLimits, CommandResult, Mount, run_command

REPO = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"  # the system interpreter: present in the jail (/usr) and in the image


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest, require_backend: Callable[[str], None]) -> str:
    require_backend(request.param)
    return str(request.param)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def _run(
    backend: str, argv: list[str], work: Path | None = None, **kwargs: object
) -> CommandResult:
    mounts = list(kwargs.pop("mounts", []))  # type: ignore[call-overload]
    if work is not None:
        mounts.append(Mount(work, "/w", writable=True))
    workdir = str(kwargs.pop("workdir", "/w" if work is not None else "/"))
    return run_command(argv, mounts=mounts, workdir=workdir, backend=backend, **kwargs)  # type: ignore[arg-type]


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _pids_with(marker: bytes) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    if marker in fh.read():
                        pids.append(int(entry.name))
            except OSError:
                pass
    return pids


@pytest.mark.timeout(60)
def test_echo_exit_codes_and_workdir(backend: str, work: Path) -> None:
    done = _run(backend, ["echo", "hello"], work)
    assert done.ok and done.returncode == 0 and done.stdout == "hello\n" and done.error is None
    failed = _run(backend, ["sh", "-c", "echo oops >&2; exit 7"], work)
    assert failed.returncode == 7 and not failed.ok and failed.stderr == "oops\n"
    where = _run(backend, ["pwd"], work, workdir="/w")
    assert where.stdout == "/w\n"
    missing = _run(backend, ["no-such-command-xyz"], work)
    assert missing.returncode is None and "no-such-command-xyz" in (missing.error or "")
    nowhere = _run(backend, ["pwd"], work, workdir="/does/not/exist")
    assert nowhere.returncode is None and "/does/not/exist" in (nowhere.error or "")


@pytest.mark.timeout(60)
def test_environment_is_scrubbed_and_env_honoured(
    backend: str, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_TEST_SECRET", "hunter2")
    done = _run(backend, ["sh", "-c", "env"], work, env={"FOO": "bar", "PATH": "/usr/bin:/bin"})
    lines = set(done.stdout.splitlines())
    assert {"FOO=bar", "PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"} <= lines
    assert "hunter2" not in done.stdout and not any(line.startswith("PIP_") for line in lines)


@pytest.mark.timeout(60)
def test_private_tmp_and_shared_memory_are_writable(backend: str, work: Path) -> None:
    code = "import multiprocessing as mp; mp.Lock(); open('/tmp/x', 'w').write('x'); print('ok')"
    done = _run(backend, [PY, "-c", code], work)
    assert done.stdout == "ok\n", done


@pytest.mark.timeout(60)
def test_writable_mount_persists_and_host_can_read_it(backend: str, work: Path) -> None:
    done = _run(backend, ["sh", "-c", "mkdir -p sub && echo written > sub/out.txt && id -u"], work)
    assert done.ok, done
    assert (work / "sub" / "out.txt").read_text() == "written\n"
    assert int(done.stdout) != 0  # never root inside
    (work / "sub" / "out.txt").unlink()  # and the host can clean up after it


@pytest.mark.timeout(60)
def test_writes_outside_writable_mounts_fail(backend: str, work: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "f").write_text("original\n")
    # World-writable on the host: only the read-only mount stands between the jail and them.
    ro.chmod(0o777)
    (ro / "f").chmod(0o666)
    tmp_path.chmod(0o755)
    script = (
        "for p in /r/f /r/new /newfile /usr/newfile /etc/passwd /root/x; do "
        "(echo evil > $p) 2>/dev/null && echo WROTE $p; done; "
        # The root filesystem itself is mounted read-only (not only root-owned).
        f"{PY} -c \"import os; print(os.statvfs('/').f_flag & os.ST_RDONLY and 'ro')\""
    )
    done = _run(backend, ["sh", "-c", script], work, mounts=[Mount(ro, "/r")])
    assert done.stdout.strip() == "ro", done
    assert (ro / "f").read_text() == "original\n"
    assert sorted(os.listdir(ro)) == ["f"]


@pytest.mark.timeout(60)
def test_host_files_are_invisible(backend: str, work: Path, tmp_path: Path) -> None:
    secret = Path("/root") / f".envgym-test-secret-{uuid.uuid4().hex}"
    unmounted = tmp_path / "not-mounted.txt"
    unmounted.write_text("secret")
    paths = [str(REPO / ".venv" / "pyvenv.cfg"), str(REPO / "pyproject.toml"), str(unmounted)]
    if os.geteuid() == 0:
        secret.write_text("secret")
        paths.append(str(secret))
    try:
        # /etc/shadow: the image has its own (root-only); the host's must not be readable.
        code = f"import os; print([p for p in {paths!r} if os.path.exists(p)], os.access('/etc/shadow', os.R_OK))"
        done = _run(backend, [PY, "-c", code], work)
    finally:
        secret.unlink(missing_ok=True)
    assert done.ok, done
    assert done.stdout == "[] False\n"


@pytest.fixture
def host_server() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's 127.0.0.1 that records every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    seen: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            seen.append("connected")
            conn.sendall(b"hello from the host\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join()
    server.close()


_CONNECT = """
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    print("reached:", s.recv(100).decode().strip())
except OSError as exc:
    print("blocked:", type(exc).__name__)
"""


@pytest.mark.timeout(60)
def test_no_network_by_default_host_network_for_installs(
    backend: str, work: Path, host_server: tuple[int, list[str]]
) -> None:
    port, seen = host_server
    blocked = _run(backend, [PY, "-c", _CONNECT, str(port)], work)
    assert blocked.stdout.startswith("blocked:"), blocked
    assert seen == []
    # network=True is the host network (documented): the host's loopback services are reachable.
    reached = _run(backend, [PY, "-c", _CONNECT, str(port)], work, network=True)
    assert reached.stdout == "reached: hello from the host\n", reached
    assert seen == ["connected"]


@pytest.mark.timeout(60)
def test_timeout_kills_the_whole_tree(backend: str, work: Path) -> None:
    marker = f"100{uuid.uuid4().int % 10**6}.5"
    script = f"id -u > /w/uid; sleep {marker} & sleep {marker} & sleep {marker}"
    started = time.monotonic()
    done = _run(backend, ["sh", "-c", script], work, limits=CommandLimits(timeout_s=3))
    assert done.timed_out and done.returncode is None and done.error == "timeout after 3 s", done
    assert time.monotonic() - started < 15
    uid = int((work / "uid").read_text())
    assert _pids_with(marker.encode()) == []
    assert _pids_of_uid(uid) == [] or uid == os.getuid()


_BOMB = """
import os, time
open("/w/uid", "w").write(str(os.getuid()))
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


@pytest.mark.timeout(120)
def test_fork_bomb_is_bounded_and_killed(backend: str, work: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("counting the jail's processes by uid needs the dedicated uid (root host)")
    limit = 24
    peak = 0
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(
            _run,
            backend,
            [PY, "-c", _BOMB],
            work,
            limits=CommandLimits(timeout_s=6, max_processes=limit),
        )
        while not (work / "uid").exists() or not (work / "uid").read_text():
            assert not future.done(), future.result()
            time.sleep(0.05)
        uid = int((work / "uid").read_text())
        while not future.done():
            peak = max(peak, len(_pids_of_uid(uid)))
            time.sleep(0.05)
        done = future.result()
    assert done.timed_out, done
    assert limit // 2 <= peak <= limit  # it did fork, and stopped at the limit
    assert _pids_of_uid(uid) == []


@pytest.mark.timeout(60)
def test_output_flood_is_truncated_keeping_the_tail(backend: str, work: Path) -> None:
    code = "import sys; sys.stdout.write('x' * 5_000_000 + 'END'); sys.stderr.write('e' * 3_000_000 + 'ERR')"
    done = _run(backend, [PY, "-c", code], work, limits=CommandLimits(output_bytes=1000))
    assert done.ok and done.truncated
    assert len(done.stdout) == 1000 and done.stdout.endswith("xEND")
    assert len(done.stderr) == 1000 and done.stderr.endswith("eERR")
    small = _run(backend, ["echo", "short"], work, limits=CommandLimits(output_bytes=1000))
    assert not small.truncated


@pytest.mark.timeout(60)
def test_endless_output_is_bounded_on_disk(backend: str, work: Path) -> None:
    # `yes` writes GB/s: the host file keeps its tail only (holes punched), and RLIMIT_FSIZE
    # ends the writer at max_file_bytes (SIGXFSZ) well before the timeout.
    limits = CommandLimits(timeout_s=30, output_bytes=4096, max_file_bytes=256 * 1024**2)
    done = _run(backend, ["yes"], work, limits=limits)
    assert not done.timed_out and done.returncode not in (0, None), done
    assert done.truncated and done.stdout.endswith("y\n") and len(done.stdout) == 4096


@pytest.mark.timeout(60)
def test_host_built_venv_runs_read_only(backend: str, work: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = (
        venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    )
    (site / "tinypkg").mkdir()
    (site / "tinypkg" / "__init__.py").write_text("VALUE = 42\n")
    code = "import sys, tinypkg; print(tinypkg.VALUE, sys.prefix)"
    done = _run(
        backend,
        ["python", "-c", code],
        work,
        mounts=[Mount(venv, "/cache/venv")],
        env={"PATH": "/cache/venv/bin:/usr/bin:/bin"},
    )
    assert done.stdout == "42 /cache/venv\n", done


@pytest.mark.timeout(60)
def test_callable_from_threads(backend: str, tmp_path: Path) -> None:
    dirs = [tmp_path / f"w{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    with ThreadPoolExecutor(3) as pool:
        results = list(
            pool.map(
                lambda d: _run(backend, ["sh", "-c", "sleep 0.3; echo $0 > out", d.name], d), dirs
            )
        )
    assert all(r.ok for r in results), results
    assert [(d / "out").read_text() for d in dirs] == [f"{d.name}\n" for d in dirs]


@pytest.mark.heavy
@pytest.mark.timeout(420)
def test_pip_install_with_network(backend: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    python = str(python_executable())  # the host interpreter: its prefix is mounted read-only
    script = (
        f"{python} -m venv /cache/v && /cache/v/bin/python -m pip install --no-deps iniconfig"
        " && /cache/v/bin/python -c 'import iniconfig; print(\"imported\", iniconfig.__file__)'"
        " && /cache/v/bin/python -m pip config list"
    )
    mounts = [Mount(cache, "/cache", writable=True)]
    done = _run(
        backend,
        ["sh", "-c", script],
        mounts=mounts,
        network=True,
        limits=CommandLimits(timeout_s=360),
    )
    assert done.ok, (done.stdout[-2000:], done.stderr[-2000:], done.error)
    assert "imported /cache/v/lib/" in done.stdout
    assert list((cache / "v" / "lib").glob("python3*/site-packages/iniconfig/__init__.py"))
    # The host's pip settings came along (where the host has any).
    host = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    for line in host.splitlines():
        if line.startswith("global.") and "url" in line:
            assert line in done.stdout


@pytest.mark.timeout(30)
def test_argument_checks(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Mount(tmp_path, "relative/path")
    with pytest.raises(ValueError):
        Mount(tmp_path, "/a/../b")
    with pytest.raises(ValueError):
        CommandLimits(timeout_s=0)
    with pytest.raises(ValueError):
        run_command(["true"], mounts=[Mount(tmp_path / "missing", "/m")], workdir="/")
    with pytest.raises(ValueError):
        run_command([], mounts=[], workdir="/")
    with pytest.raises(ValueError):
        run_command(["true"], mounts=[], workdir="/", backend="nope")


@pytest.mark.timeout(30)
def test_capture_keeps_only_the_tail_on_disk() -> None:
    from envgym.sandbox.command_io import Capture

    capture = Capture(keep=1000)
    try:
        chunk = b"0123456789" * 100_000  # 1 MB
        for _ in range(40):
            os.write(capture.fileno(), chunk)
            capture.trim()
        os.write(capture.fileno(), b"THE END")
        allocated = os.fstat(capture.fileno()).st_blocks * 512
        assert allocated < 16 * 1024**2  # 40 MB written, the head punched out
        text, cut = capture.tail()
        assert cut and len(text) == 1000 and text.endswith("789THE END")
    finally:
        capture.close()
