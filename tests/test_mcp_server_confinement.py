"""The MCP suite's servers run confined (envgym/envs/mcp_suite/servers.confined,
sandbox/jail_exec.py).

A stand-in server (tests/mcp_jail_probe.py) probes its jail at start-up, installed where the
real servers are (an ``mcp/`` folder of the envgym cache, so the jail shows it read-only).  As
root the old confinement kept uid 0 and every capability and shared the host's pids: code in a
server could remount ``/`` writable and write host files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgym.sandbox import cgroup
from envgym.sandbox.bwrap import bwrap_available
from envgym.sandbox.jail import UID_BASE

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not usable here")
PROBE = Path(__file__).with_name("mcp_jail_probe.py")
ROOT = os.geteuid() == 0


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The probe, installed like a server (ENVGYM_CACHE/mcp/<server>/)."""
    cache = tmp_path / "cache"
    folder = cache / "mcp" / "server-probe-1"
    folder.mkdir(parents=True)
    shutil.copy(PROBE, folder / "probe.py")
    monkeypatch.setenv("ENVGYM_CACHE", str(cache))
    yield folder


def _state(tmp_path: Path, owner: int | None = None) -> Path:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)  # private, as tempfile.mkdtemp makes them
    if owner is not None:
        os.chown(state, owner, owner)
    return state


def _run(
    install: Path, state: Path, *extra: str, options: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess[str], dict]:
    from envgym.envs.mcp_suite.servers import confined

    argv = [
        a.replace("{state_dir}", str(state))
        for a in confined(["/usr/bin/python3", str(install / "probe.py"), "{state_dir}", *extra])
    ]
    if options:
        split = argv.index("--")
        argv[split:split] = list(options)
    done = subprocess.run(argv, capture_output=True, text=True, cwd=state, timeout=120, check=False)
    report = state / "probe.json"
    return done, (json.loads(report.read_text()) if report.exists() else {})


def test_server_is_unprivileged_and_sees_only_its_jail(install: Path, tmp_path: Path) -> None:
    state = _state(tmp_path)
    done, probe = _run(install, state)
    assert done.returncode == 0, done.stderr
    assert probe["uid"] != 0 and probe["euid"] != 0
    assert probe["CapEff"] == probe["CapPrm"] == "0000000000000000"
    assert probe["NoNewPrivs"] == "1"  # a setuid binary in /usr cannot give root back
    assert probe["pids"] == [1, 2]  # its own pid namespace: bwrap's init and itself, no host pid
    assert probe["remount_rc"] != 0  # mount -o remount,rw / is refused
    assert probe["writes"][str(install / "planted.txt")] == "Read-only file system"
    assert not (install / "planted.txt").exists()
    assert (
        probe["writes"][str(state / "ok.txt")] == "written"
        and (state / "ok.txt").read_text() == "x"
    )
    assert probe["cwd"] == str(state)


@pytest.mark.skipif(not ROOT, reason="uids are handed out only when the host runs as root")
def test_server_acts_as_the_episode_sandbox_user(install: Path, tmp_path: Path) -> None:
    """State the bundle sandbox handed to its worker's uid stays that uid's: the server runs as
    it (the verifier then owns what the server wrote); other state gets a fresh jail uid."""
    jail_uid = UID_BASE + 4242
    state = _state(tmp_path, owner=jail_uid)
    done, probe = _run(install, state)
    assert done.returncode == 0, done.stderr
    assert probe["uid"] == jail_uid and (state / "ok.txt").stat().st_uid == jail_uid
    fresh = tmp_path / "other"
    fresh.mkdir()
    done, probe = _run(install, fresh)
    assert probe["uid"] >= UID_BASE and fresh.stat().st_uid == probe["uid"]


@pytest.mark.skipif(not cgroup.support()[0], reason=f"no cgroup for jails: {cgroup.describe()}")
def test_server_memory_is_bounded_in_all(install: Path, tmp_path: Path) -> None:
    state = _state(tmp_path)
    done, probe = _run(install, state, "hog", options=("--total-memory", str(200 * 1024**2)))
    assert probe and probe["survivors"] < 4, (done.stderr, probe)


def test_bad_launcher_options_are_a_clear_error(tmp_path: Path) -> None:
    launcher = Path(__file__).resolve().parents[1] / "envgym" / "sandbox" / "jail_exec.py"
    for options, needle in (
        (["--rw", "relative", "--", "true"], "existing absolute path"),
        (["--rw", "/", "--", "true"], "other than /"),
        (["--pids", "-3", "--", "true"], "positive integer"),
        (["--evil", "x", "--", "true"], "unknown option"),
        (
            [
                "--",
            ],
            "no program",
        ),
    ):
        done = subprocess.run(
            [sys.executable, "-I", "-S", str(launcher), *options],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, (
            options,
            done.stderr,
        )


def test_terminating_the_launcher_ends_the_jail(install: Path, tmp_path: Path) -> None:
    from envgym.envs.mcp_suite.servers import confined

    state = _state(tmp_path)
    argv = [a.replace("{state_dir}", str(state)) for a in confined(["/bin/sleep", "60"])]
    proc = subprocess.Popen(argv, cwd=state, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not _descendants(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        jail = _descendants(proc.pid)
        assert jail
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) != 0
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in jail) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in jail)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                kids = [
                    int(k) for k in Path(f"/proc/{current}/task/{tid}/children").read_text().split()
                ]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _alive(pid: int) -> bool:
    """Running, not a zombie (an orphan's zombie waits for the host's init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False
