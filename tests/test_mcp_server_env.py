"""``{state_dir}`` in a ServerSpec's ``env`` values is bound like in its command: a server that
takes its data file's path only from the environment (the reference memory server's
``MEMORY_FILE_PATH``) works on the episode's state, restarted on each fresh one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from bundle_factory import make_notes_bundle

from envgym.bundle_env import BundleEnv
from envgym.mcp.client import ServerSpec
from envgym.mcp.sandbox import McpSandbox
from envgym.mcp.toolset import McpToolset
from envgym.sandbox import open_sandbox

HOSTILE = Path(__file__).with_name("mcp_hostile_server.py")


def test_bind_fills_env_values_and_marks_the_spec_state_bound(tmp_path: Path) -> None:
    spec = ServerSpec(
        command=(sys.executable, "-V"), env={"MEMORY_FILE_PATH": "{state_dir}/m.json"}
    )
    assert spec.uses_state_dir
    bound = spec.bind(tmp_path)
    assert bound.env == {"MEMORY_FILE_PATH": f"{tmp_path}/m.json"}
    assert not ServerSpec(command=(sys.executable,), env={"A": "x"}).uses_state_dir


@pytest.mark.timeout(60)
def test_a_server_reading_its_path_from_env_runs_on_each_episodes_state(tmp_path: Path) -> None:
    bundle = make_notes_bundle(tmp_path / "notes")
    spec = ServerSpec(
        command=(sys.executable, str(HOSTILE)), env={"HOSTILE_STARTS": "{state_dir}/starts.log"}
    )
    box = McpSandbox(open_sandbox(bundle, backend="inprocess"), [McpToolset(spec)])
    env = BundleEnv(bundle, sandbox=box)
    try:
        env.reset()
        first = box.state_dir
        assert first is not None and (first / "starts.log").read_text() == "start\n"
        env.reset()  # a fresh state: the server is restarted with the new path
        second = box.state_dir
        assert second is not None and (second / "starts.log").read_text() == "start\n"
    finally:
        env.close()
