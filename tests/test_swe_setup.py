"""The setup agent on fixture repositories: a registry dependency, a hostile setup.py, a
dependency that does not exist, and a repair model that first answers garbage."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from swe_repos import make_repo

from envgym.envs.swe.repair import RepairModel
from envgym.envs.swe.setup_agent import ensure_env
from envgym.envs.swe.validation import run_tests

pytestmark = [pytest.mark.heavy]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 recording what connections send."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    received.append(conn.recv(1024))
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join()
    server.close()


HOSTILE_SETUP = """
import json, os, pathlib, socket
report = dict()
for name, path in (("outside", {outside!r}), ("var_tmp", {var_tmp!r})):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pathlib.Path(path).write_text("pwned")
        report[name] = "written"
    except OSError as exc:
        report[name] = type(exc).__name__
try:
    report["secret"] = pathlib.Path({secret!r}).read_text()
except OSError as exc:
    report["secret"] = type(exc).__name__
try:
    report["root_listing"] = sorted(os.listdir("/root"))
except OSError as exc:
    report["root_listing"] = type(exc).__name__
try:
    with socket.create_connection(("127.0.0.1", {port}), timeout=3) as conn:
        conn.sendall(b"setup.py was here")
    report["socket"] = "connected"
except OSError as exc:
    report["socket"] = type(exc).__name__
pathlib.Path("/venv/attack.json").write_text(json.dumps(report))
from setuptools import setup
setup(name="hostile", version="0.1", py_modules=["hostile"])
"""


@pytest.mark.timeout(300)
def test_setup_py_with_registry_requirement_is_jailed(
    cache: Path, tmp_path: Path, listener: tuple[int, list[bytes]]
) -> None:
    port, received = listener
    outside = tmp_path / "outside" / "pwned.txt"
    var_tmp = Path(f"/var/tmp/envgym-test-{uuid.uuid4().hex}/pwned.txt")
    secret = Path(f"/root/.envgym-test-secret-{uuid.uuid4().hex}")
    secret.write_text("top secret")
    secret.chmod(0o600)
    try:
        repo, _ = make_repo(
            tmp_path / "hostile",
            {
                "setup.py": HOSTILE_SETUP.format(
                    outside=str(outside), var_tmp=str(var_tmp), secret=str(secret), port=port
                ),
                "hostile.py": "import iniconfig\n\n\ndef parse(text):\n    return iniconfig.IniConfig('x.ini', data=text)\n",
                "requirements.txt": "iniconfig\n",
                "tests/test_hostile.py": f"""
import socket
from hostile import parse


def test_parse():
    assert parse("[a]\\nb = 1\\n")["a"]["b"] == "1"


def test_no_network_in_tests():
    with socket.create_connection(("127.0.0.1", {port}), timeout=3):
        pass


def test_the_env_is_read_only():
    open("/venv/planted.py", "w").close()
""",
            },
        )
        result = ensure_env(repo, repo_key="hostile", version="1")
        assert result.ok, result.reason
        assert result.recipe.install == (
            "python -m pip install -r requirements.txt",
            "python -m pip install -e .",
            "python -m pip install pytest",
        )
        attack = json.loads((result.env.venv / "attack.json").read_text())  # type: ignore[union-attr]
        # The writes landed in the jail's private /tmp or failed on its read-only root: never on the host.
        assert not outside.exists() and not var_tmp.exists() and not var_tmp.parent.exists()
        assert attack["var_tmp"] in ("OSError", "PermissionError", "FileNotFoundError")
        assert attack["secret"] == "FileNotFoundError" and secret.name not in attack["root_listing"]
        # Installs have the host network (the registry must be reachable): setup.py can connect.
        # That is the jail's documented contract for network=True; tests run without any network.
        assert attack["socket"] == "connected" and set(received) == {
            b"setup.py was here"
        }  # pip runs it more than once
        connections = len(received)
        workspace = Path(shutil.copytree(repo, tmp_path / "ws", symlinks=True))
        run = run_tests(workspace, result.env)  # type: ignore[arg-type]
        assert run.status == "ok", run.detail
        assert dict(run.outcomes) == {
            "tests/test_hostile.py::test_parse": "passed",
            "tests/test_hostile.py::test_no_network_in_tests": "failed",
            "tests/test_hostile.py::test_the_env_is_read_only": "failed",
        }
        assert len(received) == connections
        assert not list(repo.glob("*.egg-info"))  # setup ran in a copy: the checkout is untouched
    finally:
        secret.unlink()
        shutil.rmtree(var_tmp.parent, ignore_errors=True)


@pytest.mark.timeout(180)
def test_nonexistent_dependency_fails_with_the_step_named(cache: Path, tmp_path: Path) -> None:
    repo, _ = make_repo(
        tmp_path / "nodep",
        {
            "requirements.txt": "envgym-no-such-package-zq9==0.0.1\n",
            "test_x.py": "def test_x():\n    pass\n",
        },
    )
    result = ensure_env(repo, repo_key="nodep", version="1")
    assert not result.ok and result.env is None
    assert result.reason.startswith(
        "step 'install 1/2' (python -m pip install -r requirements.txt) failed: exit 1"
    )
    assert "envgym-no-such-package-zq9" in result.reason
    assert [s.name for s in result.log] == ["venv", "install 1/2"]
    assert not any((cache / "swe" / "envs").iterdir())  # nothing half-built left in the cache


class _ModelHandler(BaseHTTPRequestHandler):
    replies: list[tuple[int, str]] = []
    seen: list[dict[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802 — http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        code, content = type(self).replies.pop(0)
        payload = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": content}}]}
        ).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.timeout(240)
def test_repair_model_garbage_then_a_good_patch(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = make_repo(
        tmp_path / "needsenv",
        {
            "conftest.py": "import os\n\nif os.environ.get('DEMO_MODE') != '1':\n"
            "    raise RuntimeError('this suite needs DEMO_MODE=1')\n",
            "test_demo.py": "def test_demo():\n    pass\n",
        },
    )
    _ModelHandler.replies = [
        (200, "I think you should set DEMO_MODE, good luck!"),
        (500, "overloaded"),
        (200, '{"install": "python -m pip install demo"}'),
        (
            200,
            '```json\n{"env": {"DEMO_MODE": "1"}, "reason": "conftest.py requires DEMO_MODE=1"}\n```',
        ),
    ]
    _ModelHandler.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ModelHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("ENVGYM_TEST_MODEL_KEY", "sk-test")
    try:
        model = RepairModel(
            base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
            model="fixer",
            api_key_env="ENVGYM_TEST_MODEL_KEY",
            timeout_s=10,
        )
        result = ensure_env(repo, repo_key="needsenv", version="1", model=model, max_repairs=4)
    finally:
        server.shutdown()
        server.server_close()
    assert result.ok, result.reason
    assert dict(result.recipe.env) == {"DEMO_MODE": "1"}
    repairs = [s.tail for s in result.log if s.name == "model repair"]
    assert len(repairs) == 4
    assert repairs[0].startswith("reply rejected: reply is not JSON")
    assert repairs[1].startswith("model call failed: HTTPStatusError")
    assert repairs[2].startswith("reply rejected: install: not a list of command strings (got str)")
    assert repairs[3] == "model repair: conftest.py requires DEMO_MODE=1 (env)"
    assert [s.name for s in result.log][-2:] == ["model repair", "smoke test"]
    first = _ModelHandler.seen[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test"
    assert "this suite needs DEMO_MODE=1" in json.dumps(first["body"])
    # the cache now holds the repaired recipe: a second call is served from it
    again = ensure_env(repo, repo_key="needsenv", version="1")
    assert again.ok and again.cached and dict(again.recipe.env) == {"DEMO_MODE": "1"}


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_docker_backend_builds_and_runs_the_same_recipe(
    cache: Path, tmp_path: Path, require_backend: object
) -> None:
    require_backend("docker")  # type: ignore[operator]
    repo, _ = make_repo(
        tmp_path / "dock",
        {"test_d.py": "import sys\n\n\ndef test_d():\n    assert sys.prefix == '/venv'\n"},
    )
    result = ensure_env(repo, repo_key="dock", version="1", backend="docker")
    assert result.ok, result.reason
    assert (
        result.env is not None
        and result.env.backend == "docker"
        and result.env.image == "envgym-sandbox:latest"
    )
    workspace = Path(shutil.copytree(repo, tmp_path / "ws", symlinks=True))
    run = run_tests(workspace, result.env)
    assert run.status == "ok" and dict(run.outcomes) == {"test_d.py::test_d": "passed"}, run.detail
