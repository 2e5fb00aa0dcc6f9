"""The command line: list, show, check (good and bad bundles), play, bench."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bundle_factory import VERIFIER, make_notes_bundle
from typer.testing import CliRunner

from envgym.bundle import write_manifest
from envgym.cli import app
from envgym.kept_tasks import load_kept
from envgym.play import parse_command

runner = CliRunner()


def test_list_shows_trip_planning() -> None:
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    assert "trip-planning-v0" in result.stdout


def test_show_bundle(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    result = runner.invoke(app, ["show", str(root)])
    assert result.exit_code == 0, result.stdout
    assert "get_note" in result.stdout and "secret" in result.stdout


def test_unknown_env_is_a_clear_error() -> None:
    result = runner.invoke(app, ["check", "no-such-env-v0"])
    assert result.exit_code == 2
    assert "no environment 'no-such-env-v0'" in result.stderr


def test_malformed_bundle_is_named(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    (root / "solution.py").unlink()
    result = runner.invoke(app, ["check", str(root)])
    assert result.exit_code == 2
    assert "solution.py: required file is missing" in result.stderr


def test_check_good_bundle_json(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    result = runner.invoke(app, ["check", str(root), "--json"])
    assert result.exit_code == 0, result.stdout
    report = json.loads(result.stdout)
    (task,) = report["tasks"]
    assert (
        report["passed"] and task["gold_passed"] and task["noop_rejected"] and task["reruns_agree"]
    )
    assert task["corruptions_tried"] >= 1 and task["rejection_rate"] == 1.0


def _rebundle(root: Path, verifier: str) -> None:
    (root / "verifier.py").write_text(verifier)
    write_manifest(root, name="notes", category="test", provenance={"agent": "test"})


def test_check_rejects_rubber_stamp_verifier(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    _rebundle(
        root,
        "def verify_secret(submission, task):\n    return {'checks': [{'name': 'ok', 'passed': True}]}\n",
    )
    result = runner.invoke(app, ["check", str(root), "--json"])
    assert result.exit_code == 1
    (task,) = json.loads(result.stdout)["tasks"]
    assert task["gold_passed"] and not task["noop_rejected"] and task["rejection_rate"] == 0.0
    assert any("accepted an empty submission" in p for p in task["problems"])


def test_check_reports_gold_that_fails(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    _rebundle(root, VERIFIER.replace("got == want", "got == want + '!'"))
    result = runner.invoke(app, ["check", str(root), "--json"])
    assert result.exit_code == 1
    (task,) = json.loads(result.stdout)["tasks"]
    assert not task["gold_passed"]
    assert any(p.startswith("gold rejected: correct") for p in task["problems"])


def test_check_nondeterministic_solution_fails_reruns(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    (root / "solution.py").write_text(
        "import random\n\ndef solve_secret(tools, task):\n"
        "    tools.submit_result(answer_text=tools.get_note(key='secret') if random.random() < 0.5 else str(random.random()))\n"
    )
    write_manifest(root, name="notes", category="test", provenance={"agent": "test"})
    result = runner.invoke(app, ["check", str(root), "--json", "--reruns", "8"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["tasks"][0]["reruns_agree"] is False


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('get_note {"key": "secret"}', ("get_note", {"key": "secret"})),
        ("get_note key=secret", ("get_note", {"key": "secret"})),
        ("shout text='a b' times=3", ("shout", {"text": "a b", "times": 3})),
        ("list_keys", ("list_keys", {})),
        (
            "get_note {oops",
            "arguments are not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        ("get_note secret", "expected key=value, got 'secret'"),
    ],
)
def test_play_command_parsing(line: str, expected: object) -> None:
    assert parse_command(line) == expected


def test_play_an_episode_by_hand(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    keys = "\n".join(
        [
            ":tools",
            "get_note key=nothing",
            "get_note key=secret",
            "submit_result answer_text=tangerine",
        ]
    )
    result = runner.invoke(app, ["play", str(root)], input=keys + "\n")
    assert result.exit_code == 0, result.stdout
    assert "no note 'nothing'" in result.stdout
    assert "tangerine" in result.stdout
    assert "reward 1.0" in result.stdout


def test_bench_unknown_name() -> None:
    result = runner.invoke(app, ["bench", "warp-drive"])
    assert result.exit_code == 2
    assert "no benchmark 'warp-drive'" in result.stderr


def test_bench_without_a_name_lists_the_benchmarks() -> None:
    from envgym.bench import available

    listed = runner.invoke(app, ["bench"])
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.split() == sorted(available()) and {"env-step", "search", "train"} <= set(
        listed.stdout.split()
    )
    as_json = runner.invoke(app, ["bench", "--json"])
    assert json.loads(as_json.stdout) == {"benchmarks": sorted(available())}


@pytest.mark.heavy
@pytest.mark.timeout(720)
def test_bench_env_step_quick_json() -> None:
    # A real process: the MCP stdio client needs real file descriptors.  It takes ~30 s of CPU
    # but 3 min of wall time beside a loaded suite: the bound is for a hang, not for speed.
    proc = subprocess.run(
        [sys.executable, "-m", "envgym.cli", "bench", "env-step", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    payload = json.loads(proc.stdout)  # exactly one JSON object on stdout
    assert payload["benchmark"] == "env-step"
    for key in (
        "direct_call_us",
        "inprocess_call_us",
        "sandboxed_call_us",
        "mcp_stdio_call_us",
        "reset_ms",
    ):
        assert payload["metrics"][key] > 0
        assert key in payload["units"]
    assert payload["machine"]["cpus"] >= 1


@pytest.mark.heavy
@pytest.mark.timeout(3000)
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    # --quick: every step of the story at its smallest size (the default sizes run the same
    # code). ~11 minutes on a quiet 2-core machine; the bound leaves room for CI's other worker.
    env = {**os.environ, "ENVGYM_DEMO_DIR": str(tmp_path / "demo")}
    proc = subprocess.run(
        [sys.executable, "-m", "envgym.cli", "demo", "--quick"],
        capture_output=True,
        text=True,
        timeout=2900,
        env=env,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-2000:]
    assert "demo OK" in out
    story = tmp_path / "demo" / "story"
    manifest = json.loads((story / "suite" / "suite.json").read_text())
    categories = {split: len(names) for split, names in manifest["splits"].items()}
    assert categories == {"train": 3, "validation": 0, "held_out": 1}
    assert "envgym check" in out and "PASSED" in out  # the sampled bundle's full check
    sft = json.loads((story / "sft" / "sft_run.json").read_text())
    assert sft["data"]["examples"] > 0 and sft["config"]["max_turns"] == 3
    # the filter ran with the cold-started policy and kept something to train on
    kept = re.search(r"kept (\d+) of (\d+) training tasks", out)
    assert kept and 0 < int(kept[1]) <= int(kept[2]), out[-3000:]
    assert load_kept(story / "kept.json").kept == int(kept[1])  # the file GRPO trained from
    assert (story / "grpo" / "policy" / "train_run.json").is_file()
    assert (story / "grpo" / "metrics" / "curves.png").stat().st_size > 1000
    # held out: both policies scored on the held-out category, and their paired difference
    assert "held-out categories: greedy pass@1" in out
    assert re.search(r"GRPO − cold start: [+-]\d\.\d{3} 95% CI", out), out[-3000:]
    assert list((story / "report").glob("*/index.html"))
    # the SWE step: instances mined from wordstat's history, validated, checked
    assert (
        "envgym synth swe --repo wordstat --max-candidates 1" in out
        and "envgym check · swe-v0" in out
    )
    assert out.count("(step took") == 7  # six steps of the story, then SWE
