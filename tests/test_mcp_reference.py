"""Real third-party MCP servers consumed as envgym toolsets (docs/MCP.md).

The reference filesystem server (npm) and the git server (PyPI, in its own venv) are installed
on first use by a session-scoped fixture (``tests/mcp_reference.py``: pinned versions, cached in
the envgym cache, so a second run starts at once).  Each test builds a bundle whose state the
server works on (``{state_dir}`` in its command) and whose verifier checks that state; the
agent's calls are scripted.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp_reference import MissingTool, filesystem_server, git_server

from envgym.bundle import write_manifest
from envgym.bundle_env import BundleEnv
from envgym.mcp.client import ServerSpec
from envgym.mcp.sandbox import McpSandbox
from envgym.mcp.toolset import McpToolset
from envgym.sandbox import open_sandbox
from envgym.sandbox.bwrap import bwrap_available

SUBMIT_TOOLS = '''
def submit_done(note: str) -> str:
    """Say the work is done.

    Args:
        note: anything.
    """
    return "submitted"
'''

FS_VERIFIER = """
from envgym.runtime import state_dir


def verify_copy(submission, task):
    done = state_dir() / "done.txt"
    text = done.read_text() if done.is_file() else None
    return {"checks": [{"name": "done_written", "passed": text is not None, "detail": ""},
                       {"name": "first_todo", "passed": (text or "").strip() == "buy milk", "detail": repr(text)}]}
"""

GIT_VERIFIER = """
import subprocess

from envgym.runtime import state_dir


def verify_commit(submission, task):
    repo = str(state_dir() / "repo")
    git = lambda *a: subprocess.run(["git", "-C", repo, *a], capture_output=True, text=True).stdout.strip()
    return {"checks": [{"name": "committed", "passed": git("log", "-1", "--format=%s") == "add notes", "detail": ""},
                       {"name": "clean", "passed": git("status", "--porcelain") == "", "detail": ""}]}
"""

SOLUTION = "def solve(tools, task):\n    tools.submit_done(note='done')\n"


def _bundle(root: Path, *, name: str, verifier: str, function: str, prompt: str) -> Path:
    (root / "tools.py").write_text(SUBMIT_TOOLS)
    (root / "solution.py").write_text(SOLUTION)
    (root / "verifier.py").write_text(verifier)
    task = {
        "id": name,
        "prompt": prompt,
        "solution": "solve",
        "verifier": function,
        "difficulty": 1,
        "submit_tool": "submit_done",
        "metadata": {},
    }
    (root / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    write_manifest(root, name=name, category="mcp", provenance={"agent": "test", "seed": 0})
    return root


@pytest.fixture(scope="session")
def servers() -> dict[str, list[str]]:
    try:
        return {"filesystem": filesystem_server(), "git": git_server()}
    except MissingTool as err:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):  # set-up provides them there
            pytest.fail(str(err))
        pytest.skip(str(err))


class Agent:
    """Scripted tool calls against an env; returns each reply."""

    def __init__(self, env: BundleEnv) -> None:
        self.env, self.n = env, 0

    def __call__(self, name: str, **args):
        self.n += 1
        obs, reward, terminated, truncated, info = self.env.step(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{self.n}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        return obs["messages"][-1]["content"], reward, terminated


@pytest.mark.timeout(600)  # the first run installs the servers (npm, pip) in the session fixture
@pytest.mark.parametrize(
    "backend", ["inprocess", "bwrap"]
)  # bwrap: the verifier sees the server's writes
def test_filesystem_server_as_toolset(servers, tmp_path: Path, backend: str) -> None:
    if backend == "bwrap" and not bwrap_available():
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("bubblewrap unavailable (scripts/setup.sh installs it)")
        pytest.skip("bubblewrap unavailable")
    root = tmp_path / "fs-bundle"
    (root / "state" / "docs").mkdir(parents=True)
    (root / "state" / "docs" / "todo.txt").write_text("buy milk\nwrite report\n")
    bundle = _bundle(
        root,
        name="fs-copy",
        verifier=FS_VERIFIER,
        function="verify_copy",
        prompt="Write the first line of docs/todo.txt into done.txt, then call submit_done.",
    )
    fs = McpToolset(
        ServerSpec(command=(*servers["filesystem"], "{state_dir}"), name="filesystem"), prefix="fs_"
    )
    box = McpSandbox(open_sandbox(bundle, backend=backend), [fs])
    env = BundleEnv(bundle, sandbox=box)
    try:
        obs, _ = env.reset()
        assert {"fs_read_text_file", "fs_write_file", "fs_list_allowed_directories"} <= {
            t["function"]["name"] for t in obs["tools"]
        }
        agent = Agent(env)
        allowed, _, _ = agent("fs_list_allowed_directories")
        assert str(box.state_dir) in allowed  # the server works on this episode's state copy
        home = box.state_dir
        denied, _, _ = agent("fs_read_text_file", path="/etc/hostname")
        assert (
            denied.startswith("Error: fs_read_text_file failed (exception)") and "denied" in denied
        )
        bad, _, _ = agent(
            "fs_write_file", path=str(home / "x.txt")
        )  # missing `content`: never sent
        assert "invalid arguments for fs_write_file" in bad and not (home / "x.txt").exists()
        todo, _, _ = agent("fs_read_text_file", path=str(home / "docs" / "todo.txt"))
        assert todo.splitlines()[0] == "buy milk"
        agent("fs_write_file", path=str(home / "done.txt"), content=todo.splitlines()[0])
        _, reward, terminated = agent("submit_done", note="ok")
        assert terminated and reward == 1.0

        env.reset()  # a fresh state copy, and the server restarted on it
        gone, _, _ = Agent(env)("fs_read_text_file", path=str(box.state_dir / "done.txt"))
        assert gone.startswith("Error:")
        _, reward, terminated = Agent(env)("submit_done", note="no-op")  # the no-op agent fails
        assert terminated and reward == 0.0
    finally:
        env.close()


@pytest.mark.timeout(600)
def test_git_server_as_toolset(servers, tmp_path: Path) -> None:
    root = tmp_path / "git-bundle"
    repo = root / "state" / "repo"
    repo.mkdir(parents=True)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q", "-b", "main")
    git("config", "user.name", "envgym test")
    git("config", "user.email", "test@envgym.invalid")
    (repo / "README.md").write_text("hello\n")
    git("add", "README.md")
    git("commit", "-q", "-m", "first")
    (repo / "notes.txt").write_text("remember the milk\n")
    bundle = _bundle(
        root,
        name="git-commit",
        verifier=GIT_VERIFIER,
        function="verify_commit",
        prompt="Commit notes.txt in the repository with the message 'add notes'.",
    )
    server = ServerSpec(command=(*servers["git"], "--repository", "{state_dir}/repo"), name="git")
    box = McpSandbox(open_sandbox(bundle, backend="inprocess"), [McpToolset(server)])
    env = BundleEnv(bundle, sandbox=box)
    try:
        env.reset()
        agent = Agent(env)
        path = str(box.state_dir / "repo")
        status, _, _ = agent("git_status", repo_path=path)
        assert "notes.txt" in status
        bad, _, _ = agent("git_add", repo_path=path, files=[])  # minItems 1, checked by envgym
        assert "invalid arguments for git_add" in bad
        agent("git_add", repo_path=path, files=["notes.txt"])
        agent("git_commit", repo_path=path, message="add notes")
        log, _, _ = agent("git_log", repo_path=path, max_count=1)
        assert "add notes" in log
        _, reward, terminated = agent("submit_done", note="ok")
        assert terminated and reward == 1.0

        env.reset()
        _, reward, _ = Agent(env)("submit_done", note="no-op")
        assert reward == 0.0
    finally:
        env.close()
