"""``envgym synth --agent procedural``: every category end to end, the summary, resume, kill -9."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from synth_notes import make_witnessed_notes
from typer.testing import CliRunner

from envgym.bundle import load_bundle
from envgym.cli import app
from envgym.store import Store
from envgym.synth_agents.pipeline import Job, MakeOutcome, run_synthesis
from envgym.synth_agents.recorder import SynthRecorder

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(180)


def synth(*args: str) -> dict:
    result = runner.invoke(app, ["synth", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "category", ["trip planning", "retail-orders", "Meeting Scheduling", "shipment_logistics"]
)
def test_each_category_makes_bundles_that_pass_envgym_check(
    tmp_path: Path, category: str, require_backend
) -> None:
    require_backend("bwrap")
    out = tmp_path / "out"
    payload = synth(
        category,
        "--n",
        "2",
        "--out",
        str(out),
        "--db",
        f"sqlite:///{tmp_path}/db.sqlite",
        "--workers",
        "1",
        "--tasks-per-bundle",
        "3",
    )
    s = payload["synthesis"]
    assert (s["requested"], s["made"], s["validated"], s["rejected"]) == (2, 2, 2, {})
    assert s["kept_tasks"] == 6
    bundles = sorted((out / "bundles").iterdir())
    assert len(bundles) == 2 and len({load_bundle(b).manifest.content_hash for b in bundles}) == 2
    for root in bundles:
        check = runner.invoke(app, ["check", str(root), "--json"])
        assert check.exit_code == 0, check.stdout
        assert json.loads(check.stdout)["passed"]
    # job 1 starts the difficulty cycle one level later: a run covers every level
    levels = [[t.difficulty for t in load_bundle(b).tasks] for b in bundles]
    assert levels == [[1, 2, 3], [2, 3, 4]]


def test_summary_table_and_resume_without_duplicates(tmp_path: Path, require_backend) -> None:
    require_backend("bwrap")
    out, db = tmp_path / "out", f"sqlite:///{tmp_path}/db.sqlite"
    first = runner.invoke(
        app,
        [
            "synth",
            "retail",
            "--n",
            "2",
            "--out",
            str(out),
            "--db",
            db,
            "--workers",
            "1",
            "--tasks-per-bundle",
            "1",
        ],
    )
    assert first.exit_code == 0, first.output
    for word in ("requested", "made", "validated", "retail orders"):
        assert word in first.stdout
    again = synth(
        "retail",
        "--n",
        "3",
        "--out",
        str(out),
        "--db",
        db,
        "--workers",
        "2",
        "--tasks-per-bundle",
        "1",
    )
    assert again["synthesis"]["resumed"] == 2 and again["synthesis"]["validated"] == 3
    keys = [json.loads(x)["key"] for x in (out / "synth.jsonl").read_text().splitlines()]
    assert keys == ["retail-orders-0", "retail-orders-1", "retail-orders-2"]
    with Store(db) as store:
        for root in (out / "bundles").iterdir():
            digest = load_bundle(root).manifest.content_hash
            assert [v.kind for v in store.validations(digest)] == ["synth"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["", "--n", "1"], "the category is empty"),
        (["underwater basket weaving", "--n", "1"], "no procedural category matches"),
        (["retail", "--n", "1", "--difficulties", "1,x"], "--difficulties must be"),
        (["retail", "--n", "1", "--agent", "wizard"], "--agent must be"),
        (["retail", "--n", "1", "--difficulties", "7"], "subset of 1..5"),
    ],
)
def test_bad_arguments_are_clear_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(
        app, ["synth", *args, "--out", str(tmp_path / "o"), "--db", f"sqlite:///{tmp_path}/d.db"]
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and message in text
    if "category" in message:
        assert "'trip planning'" in text and "'shipment logistics'" in text


class CopyAgent:
    """Makes the same notes bundle for every job: every job after the first is a duplicate."""

    slug, name, category = "copy", "test:copy", "notes"

    def make(self, job: Job, staging: Path) -> MakeOutcome:
        make_witnessed_notes(staging)  # synthesized bundles bring per-rule witnesses
        return MakeOutcome(True)


def test_near_duplicate_tasks_are_dropped_and_recorded(tmp_path: Path, require_backend) -> None:
    require_backend("bwrap")
    recorder = SynthRecorder(tmp_path / "out", None)
    summary = run_synthesis(CopyAgent(), n=2, seed=0, recorder=recorder)
    assert summary.validated == 1 and dict(summary.rejected) == {"duplicate": 1}
    record = recorder.job("copy-1")
    assert record is not None and record["duplicates"] == [
        {"task_id": "secret", "duplicate_of": "copy-0/secret", "similarity": 1.0}
    ]
    assert (
        tmp_path / "out" / "rejected" / "copy-1" / "tasks.jsonl"
    ).is_file()  # kept, with its reason


@pytest.mark.heavy
@pytest.mark.timeout(240)
def test_kill_9_mid_run_then_rerun_loses_and_duplicates_nothing(
    tmp_path: Path, require_backend
) -> None:
    require_backend("bwrap")
    out, db = tmp_path / "out", f"sqlite:///{tmp_path}/db.sqlite"
    argv = [
        sys.executable,
        "-m",
        "envgym.cli",
        "synth",
        "shipment logistics",
        "--n",
        "8",
        "--out",
        str(out),
        "--db",
        db,
        "--workers",
        "2",
        "--tasks-per-bundle",
        "2",
    ]
    journal = out / "synth.jsonl"
    for wanted in (1, 4):  # kill twice, at different points of the run
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if journal.exists() and len(journal.read_text().splitlines()) >= wanted:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    done = subprocess.run(argv + ["--json"], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])["synthesis"]
    assert summary["requested"] == 8 and summary["resumed"] >= 4
    records = [json.loads(x) for x in journal.read_text().splitlines()]
    keys = [r["key"] for r in records]
    assert sorted(keys) == sorted(f"shipment-logistics-{i}" for i in range(8)) and len(keys) == 8
    placed = sorted(
        p.name for d in ("bundles", "rejected") if (out / d).is_dir() for p in (out / d).iterdir()
    )
    assert placed == sorted(
        r["key"] for r in records if r["made"]
    )  # a failed build leaves no directory
    assert all(r["reasons"] == ["build_failed"] for r in records if not r["made"])
    assert not (out / ".staging").exists() or not any((out / ".staging").iterdir())
    with Store(db) as store:
        for name in os.listdir(out / "bundles"):
            digest = load_bundle(out / "bundles" / name).manifest.content_hash  # hash still matches
            assert [v.kind for v in store.validations(digest)] == ["synth"]
    shutil.rmtree(out)
