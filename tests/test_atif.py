"""`envgym export trajectories --format atif`: stored episodes as ATIF, checked by Harbor's models.

Harbor's `Trajectory` model (in its own venv `.venv-harbor`, through a subprocess) validates
every written trajectory; the content is checked against the evaluation that produced it:
reasoning, tool calls and their results, token ids and log-probs from the per-token record.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import typer
from bundle_factory import make_notes_bundle
from test_rollout_doubles import ScriptedPolicy
from typer.testing import CliRunner

from envgym.evaluate import EvalConfig, ModelRef, evaluate
from envgym.record import EpisodeRecord, Segment
from envgym.rollout.episode import EpisodeResult
from envgym.store import Store
from envgym.store.atif import episode_trajectory, write_trajectories

REPO = Path(__file__).resolve().parents[1]
HARBOR_PYTHON = REPO / ".venv-harbor" / "bin" / "python"
DOUBLE = ModelRef("scripted-double", "test", "double:v1")
SCRIPT = [("get_note", {"key": "secret"}), ("submit_result", {"answer_text": "tangerine"})]

VALIDATE = """
import json, sys
from harbor.models.trajectories import Trajectory
for line in open(sys.argv[1], encoding="utf-8"):
    Trajectory.model_validate(json.loads(line))
print("valid")
"""


def harbor_validate(path: Path) -> None:
    if not HARBOR_PYTHON.is_file():
        pytest.fail(f"{HARBOR_PYTHON} is missing: scripts/harbor_venv.sh builds it (set-up)")
    done = subprocess.run([str(HARBOR_PYTHON), "-c", VALIDATE, str(path)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "valid" in done.stdout, done.stderr[-3000:]


def cli() -> typer.Typer:
    from envgym.apps.export import register

    root = typer.Typer()
    register(root)
    return root


@pytest.fixture
def store(tmp_path: Path) -> Store:
    url = f"sqlite:///{tmp_path / 'eval.db'}"
    store = Store(url)
    bundle = make_notes_bundle(tmp_path / "b")
    policy = ScriptedPolicy(lambda task, sample: SCRIPT, reasoning="I should look it up.")  # type: ignore[arg-type]
    evaluate(str(bundle), DOUBLE, EvalConfig(k=2, sandbox="inprocess"), store=store, policy=policy)
    yield store
    store.close()


def test_an_eval_run_exports_as_valid_atif_with_calls_results_and_tokens(
    store: Store, tmp_path: Path
) -> None:
    [run] = store.evaluations()
    out = tmp_path / "t.jsonl"
    done = CliRunner().invoke(cli(), ["export", "trajectories", "--format", "atif", "--db",
                                      store.url, "--eval", run.key[:20], "--out", str(out),
                                      "--json"])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["episodes"] == 2
    harbor_validate(out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    episode = store.episodes(run.key)[0]
    first = lines[0]
    assert first["agent"]["model_name"] == "scripted-double"
    assert first["extra"]["reward"] == 1.0 and first["extra"]["report"]["passed"] is True
    agent = [s for s in first["steps"] if s["source"] == "agent"]
    assert [s["tool_calls"][0]["function_name"] for s in agent] == ["get_note", "submit_result"]
    assert agent[0]["tool_calls"][0]["arguments"] == {"key": "secret"}
    result = agent[0]["observation"]["results"][0]
    assert result["content"] == "tangerine"
    assert result["source_call_id"] == agent[0]["tool_calls"][0]["tool_call_id"]
    assert [s["reasoning_content"] for s in agent] == [
        "I should look it up. 0",
        "I should look it up. 1",
    ]
    # token ids and log-probs are the record's, turn by turn
    turns = [(seg, a, b) for seg in episode.record.segments for a, b in seg.turns]
    assert len(turns) == len(agent)
    for step, (seg, a, b) in zip(agent, turns):
        assert step["metrics"]["completion_token_ids"] == seg.token_ids[a:b]
        assert step["metrics"]["prompt_token_ids"] == seg.token_ids[:a]
        assert step["metrics"]["logprobs"] == pytest.approx(seg.sampled_logprobs[a:b])
    assert first["final_metrics"]["total_completion_tokens"] == episode.sampled_tokens


def test_all_runs_export_to_a_directory_and_without_token_ids(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "dir"
    done = CliRunner().invoke(cli(), ["export", "trajectories", "--db", store.url, "--out",
                                      str(out), "--no-token-ids"])  # fmt: skip
    assert done.exit_code == 0, done.output
    files = sorted(out.glob("*.json"))
    assert len(files) == 2
    joined = tmp_path / "joined.jsonl"
    joined.write_text("".join(json.dumps(json.loads(f.read_text())) + "\n" for f in files))
    harbor_validate(joined)
    steps = json.loads(files[0].read_text())["steps"]
    assert all("prompt_token_ids" not in s.get("metrics", {}) for s in steps)


def test_bad_eval_keys_and_formats_are_clear_errors(store: Store, tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(cli(), ["export", "trajectories", "--db", store.url, "--eval", "zzz",
                                 "--out", str(tmp_path / "x.jsonl")])  # fmt: skip
    assert done.exit_code == 2 and "no evaluation" in done.output
    done = runner.invoke(cli(), ["export", "trajectories", "--db", store.url, "--format", "xml",
                                 "--out", str(tmp_path / "x")])  # fmt: skip
    assert done.exit_code == 2 and "--format" in done.output
    done = runner.invoke(cli(), ["export", "trajectories", "--db", store.url, "--format",
                                 "jsonl", "--out", str(tmp_path / "e.jsonl")])  # fmt: skip
    assert done.exit_code == 0 and len((tmp_path / "e.jsonl").read_text().splitlines()) == 2


def test_odd_episodes_still_give_valid_atif(tmp_path: Path) -> None:
    """Malformed arguments, results for calls not made, a result before any call, missing
    log-probs, a record that does not match the messages, and no messages at all."""
    seg = Segment()
    seg.add_context([1, 2, 3])
    seg.add_sampled([7, 8], [-0.1, math.nan])  # the backend did not report one log-prob
    messages = [
        {"role": "tool", "tool_call_id": "ghost", "content": "early"},
        {"role": "system", "content": [{"type": "text", "text": "sys"}]},
        {"role": "user", "content": "go", "name": "envgym"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "[1]"}},
            {"id": "c3", "type": "function", "function": {"name": "h", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "error: bad JSON"},
        {"role": "tool", "tool_call_id": "other", "content": "x"},
        {"role": "assistant", "content": "done"},
    ]  # fmt: skip
    odd = EpisodeResult("t\n$(x)", 0, messages=messages, record=EpisodeRecord(segments=[seg]))
    empty = EpisodeResult("e", 1, error="env", error_message="boom")
    matched = EpisodeResult("m", 2, messages=messages[1:4], record=EpisodeRecord(segments=[seg]))
    out = tmp_path / "odd.jsonl"
    rows = [("k", "m", odd), ("k", "m", empty), ("k", "m", matched)]
    assert write_trajectories(out, rows) == 3
    harbor_validate(out)
    first, second, third = (json.loads(line) for line in out.read_text().splitlines())
    assert "no step carries token metrics" in first["notes"]
    calls = next(s for s in first["steps"] if s.get("tool_calls"))["tool_calls"]
    assert calls[0]["extra"] == {"raw_arguments": "{not json"} and calls[0]["arguments"] == {}
    assert calls[1]["extra"] == {"raw_arguments": "[1]"} and calls[2]["arguments"] == {}
    assert second["steps"][0]["message"] == "boom"
    metrics = [s for s in third["steps"] if s["source"] == "agent"][0]["metrics"]
    assert metrics["completion_token_ids"] == [7, 8] and "logprobs" not in metrics
    assert metrics["prompt_token_ids"] == [1, 2, 3]
    assert episode_trajectory(odd, evaluation="k", model="m")["session_id"] == "k/t\n$(x)#0"
