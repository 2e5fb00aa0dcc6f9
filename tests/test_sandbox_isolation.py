"""Attacks that won against the reused-worker, walk-and-chown design.

Each test is the attack as it was reported; each went red on the code before the fix
(docs/SANDBOX.md, "Episodes and restarts", lists what each one proves).
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envgym.sandbox import Limits, Sandbox, open_sandbox
from envgym.state import EpisodeDirs

TOOLS = '''
import json
import os
import sys
import threading
import time
from envgym.runtime import state_dir


def ping() -> str:
    """Ping."""
    return "pong"


def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "real"


def listing() -> list[str]:
    """The episode state's top-level names."""
    return sorted(os.listdir(state_dir()))


def swap_race(target: str) -> str:
    """Threads that swap /state/z between a directory and a symlink to ``target`` and churn files."""
    root = str(state_dir())

    def run(k: int) -> None:
        z = os.path.join(root, "z")
        n = 0
        while True:
            n += 1
            for step in (
                lambda: os.mkdir(z),
                lambda: open(os.path.join(z, "f"), "w").close(),
                lambda: os.unlink(os.path.join(z, "f")),
                lambda: os.rmdir(z),
                lambda: os.symlink(target, z),
                lambda: os.unlink(z),
                lambda: open(os.path.join(root, f"churn{k}-{n % 64}"), "w").close(),
                lambda: os.unlink(os.path.join(root, f"churn{k}-{(n + 32) % 64}")),
            ):
                try:
                    step()
                except OSError:
                    pass

    for k in range(2):
        threading.Thread(target=run, args=(k,), daemon=True).start()
    return "racing"


def ghost() -> str:
    """A thread that keeps writing into whatever /state is."""
    root = str(state_dir())

    def run() -> None:
        n = 0
        while True:
            n += 1
            try:
                with open(os.path.join(root, "ghost"), "w") as f:
                    f.write(str(n))
            except OSError:
                pass
            time.sleep(0.002)

    threading.Thread(target=run, daemon=True).start()
    return "haunting"


def forge() -> str:
    """A thread that waits for the next request and answers it first, on the real reply fd."""
    main = threading.main_thread().ident

    def frame_with(name: str):
        frame = sys._current_frames()[main]
        while frame is not None and name not in frame.f_locals:
            frame = frame.f_back
        return frame

    def run() -> None:
        frame = frame_with("rep")
        mine = frame.f_locals["rid"]
        while True:
            rid = frame.f_locals["rid"]
            if rid != mine:
                line = json.dumps({"id": rid, "ok": True, "value": "forged"}) + "\\n"
                os.write(frame.f_locals["rep"], line.encode())
                return
            time.sleep(0.001)

    threading.Thread(target=run, daemon=True).start()
    return "armed"


def fill(files: int, mib: int) -> dict[str, object]:
    """Write files of ``mib`` MiB into the state until one fails."""
    written = 0
    for n in range(files):
        try:
            with open(os.path.join(str(state_dir()), f"blob{n}"), "wb") as f:
                for _ in range(mib):
                    f.write(b"x" * (1 << 20))
            written += mib
        except OSError as exc:
            return {"written_mib": written, "error": f"{type(exc).__name__}: {exc.strerror}"}
    return {"written_mib": written, "error": None}


def environment() -> dict[str, str]:
    """The worker's environment, as Python and as the kernel hold it."""
    env = dict(os.environ)
    try:
        with open("/proc/self/environ", "rb") as f:
            env["__proc__"] = f.read().decode(errors="replace")
    except OSError as exc:
        env["__proc__"] = f"unreadable: {exc.strerror}"
    return env
'''

LIMITS = Limits(call_timeout_s=10, max_file_bytes=64 * 2**20)
MIB = 2**20


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend(
    request: pytest.FixtureRequest,
    require_backend: Callable[[str], None],
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    require_backend(request.param)
    # Each bwrap worker started by a bwrap of its own (forked workers, the root hosts' default,
    # meet these same attacks in test_sandbox_fork.py).
    monkeypatch.setenv("ENVGYM_SANDBOX_FORK", "0")
    return request.param


@pytest.fixture
def bundle(make_bundle: Callable[..., Path]) -> Path:
    return make_bundle(TOOLS)


@pytest.fixture
def dirs(bundle: Path) -> Iterator[EpisodeDirs]:
    made = EpisodeDirs(bundle / "state", quota_bytes=32 * MIB)
    yield made
    made.cleanup()


@pytest.fixture
def box(bundle: Path, backend: str) -> Iterator[Sandbox]:
    with open_sandbox(bundle, backend, LIMITS) as sandbox:
        yield sandbox


def _victim(tmp_path: Path) -> tuple[Path, tuple[int, int, int, bytes]]:
    """A root-owned host directory holding a root-owned file: what the race tries to chown."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    (victim / "f").write_bytes(b"host secret")  # the name the race's directory also holds
    os.chmod(victim / "f", 0o600)
    return victim, _fingerprint(victim / "f")


def _fingerprint(path: Path) -> tuple[int, int, int, bytes]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), path.read_bytes()


def _race(box: Sandbox, dirs: EpisodeDirs, tmp_path: Path, resets: int) -> None:
    victim, before = _victim(tmp_path)
    for n in range(resets):
        box.reset(dirs.refill())  # neither may raise (FileNotFoundError was seen in 36/300)
        assert box.call_tool("swap_race", {"target": str(victim)}).value == "racing"
        time.sleep(0.005)  # let the threads run into the next reset
        assert _fingerprint(victim / "f") == before, f"host file changed after {n + 1} resets"
        st = os.lstat(victim)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (before[0], before[1], 0o755)
    box.reset(dirs.refill())
    assert box.call_tool("listing", {}).value == ["db.sqlite"]


@pytest.mark.timeout(300)
def test_swap_race_cannot_touch_host_files(box: Sandbox, dirs: EpisodeDirs, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the ownership race needs a root host (the host chowns only as root)")
    _race(box, dirs, tmp_path, 30)


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_swap_race_cannot_touch_host_files_over_many_resets(
    box: Sandbox, dirs: EpisodeDirs, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the ownership race needs a root host (the host chowns only as root)")
    _race(box, dirs, tmp_path, 200)  # the host file changed after ~120 when reported


@pytest.mark.timeout(120)
def test_thread_of_episode_1_cannot_write_episode_2(box: Sandbox, dirs: EpisodeDirs) -> None:
    episode1 = dirs.refill()
    box.reset(episode1)
    assert box.call_tool("ghost", {}).value == "haunting"
    time.sleep(0.05)
    assert (episode1 / "ghost").exists()  # it runs during its own episode
    episode2 = dirs.refill()
    box.reset(episode2)
    assert box.call_tool("ping", {}).value == "pong"
    time.sleep(0.3)
    assert not (episode2 / "ghost").exists()
    assert box.call_tool("listing", {}).value == ["db.sqlite"]


@pytest.mark.timeout(120)
def test_thread_of_call_n_cannot_forge_the_reply_to_call_n_plus_1(
    box: Sandbox, dirs: EpisodeDirs
) -> None:
    box.reset(dirs.refill())
    for _ in range(3):
        assert box.call_tool("forge", {}).value == "armed"
        outcome = box.call_tool("slow", {"seconds": 0.3})
        assert outcome.ok and outcome.value == "real", outcome
    assert box.call_tool("ping", {}).value == "pong"


@pytest.mark.timeout(120)
def test_episode_state_is_bounded(box: Sandbox, dirs: EpisodeDirs) -> None:
    if not dirs.bounded:
        pytest.skip("no mount rights: the episode directory is not size-limited here")
    state = dirs.refill()
    box.reset(state)
    shm_before = shutil.disk_usage("/dev/shm").used
    outcome = box.call_tool("fill", {"files": 12, "mib": 16})  # 192 MiB into a 32 MiB quota
    assert outcome.ok, outcome
    assert outcome.value["error"] == "OSError: No space left on device"
    assert outcome.value["written_mib"] <= 32
    usage = os.statvfs(state)
    assert (usage.f_blocks - usage.f_bfree) * usage.f_frsize <= dirs.size_bytes
    # Host /dev/shm did not take the writes (other tests may use it meanwhile: a wide margin).
    assert shutil.disk_usage("/dev/shm").used - shm_before < 96 * MIB
    assert box.call_tool("ping", {}).value == "pong"
    box.reset(dirs.refill())  # a new episode starts with the space back
    assert box.call_tool("fill", {"files": 1, "mib": 16}).value == {
        "written_mib": 16,
        "error": None,
    }


def test_host_secret_not_in_worker_environment(
    bundle: Path, backend: str, dirs: EpisodeDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGYM_TEST_API_KEY", "hunter2")
    with open_sandbox(bundle, backend, LIMITS) as sandbox:
        sandbox.reset(dirs.refill())
        outcome = sandbox.call_tool("environment", {})
        assert outcome.ok, outcome
        env = outcome.value
        assert "PATH" in env or "LANG" in env  # the tool really read the worker's environment
        assert "ENVGYM_TEST_API_KEY" not in env and "hunter2" not in repr(env)
