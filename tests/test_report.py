"""The static trajectory report: files, escaping, and the page itself in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from test_rollout_doubles import ScriptedPolicy

from envgym.evaluate import EvalConfig, ModelRef, evaluate, summarize
from envgym.report import write_report
from envgym.rollout import EpisodeResult
from envgym.store import Store

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def load_data(out: Path) -> dict:
    text = (out / "data.js").read_text()
    assert text.startswith("window.ENVGYM_REPORT = ") and text.endswith(";\n")
    return json.loads(text[len("window.ENVGYM_REPORT = ") : -2])


def test_report_files_escape_markup_and_replace_nan(tmp_path: Path) -> None:
    hostile = "</script><script>alert(1)</script>"
    eps = [
        EpisodeResult(
            task_id="a", sample=0, reward=1.0, messages=[{"role": "user", "content": hostile}]
        ),
        EpisodeResult(
            task_id="b", sample=0, error="policy", error_message="HTTP 500"
        ),  # b: no valid sample
    ]
    summary = summarize(eps, k=1)
    index = write_report(tmp_path, summary, eps)
    page = index.read_text()
    assert '<script src="data.js"></script>' in page
    assert not re.search(r"(src|href)=\"https?:", page)  # no CDN, nothing fetched
    raw = (tmp_path / "data.js").read_text()
    assert "</script>" not in raw and "NaN" not in raw
    data = load_data(tmp_path)
    assert data["episodes"][0]["messages"][0]["content"] == hostile
    assert data["episodes"][1]["passed"] is False and data["episodes"][1]["error"] == "policy"
    by_task = {t["task_id"]: t for t in data["summary"]["per_task"]}
    assert by_task["b"]["mean_reward"] is None
    assert json.loads((tmp_path / "report.json").read_text()) == data


def chromium(*args: str, profile: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed: apt-get install -y chromium")
    return subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[EpisodeResult]]:
    """A real evaluation: gold replays that pass, one with dropped reasoning, one errored."""
    from envgym import registry
    from envgym.bundle_env import BundleEnv

    tmp = tmp_path_factory.mktemp("report")
    env = BundleEnv(registry.resolve_bundle("trip-planning-v0"))
    gold = {}
    for task in ("hangzhou-3day", "trip-001-d1", "trip-002-d2"):
        env.reset(options={"task": task})
        gold[task] = env.gold_calls()
    env.close()

    # trip-001-d1 thinks aloud once (the env nudges it back to tools); under `discard-reasoning`
    # reasoning followed by any message is dropped. trip-002-d2 sample 1 hits a backend failure.
    def script(task: str, sample: int) -> list:
        return [gold[task][0], "hmm", *gold[task][1:]] if task == "trip-001-d1" else gold[task]

    policy = ScriptedPolicy(
        script,
        reasoning="because",
        fail=lambda s, t: "policy" if s == "trip-002-d2#1" and t == 1 else None,
    )
    run = evaluate(
        "trip-planning-v0",
        ModelRef("double", "test", "double:v1"),
        EvalConfig(k=2, limit=3, context="discard-reasoning"),
        store=Store(f"sqlite:///{tmp / 'r.db'}"),
        policy=policy,
    )
    write_report(tmp / "html", run.summary, run.episodes)
    return tmp, run.episodes


def dom(report_dir: Path, fragment: str, profile: Path) -> str:
    done = chromium(
        "--dump-dom", f"file://{report_dir / 'html' / 'index.html'}#{fragment}", profile=profile
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'data-ready="1"' in done.stdout, "the viewer script did not finish"
    return done.stdout


@pytest.mark.heavy
@pytest.mark.timeout(300)
def test_trajectories_render_and_filter_in_headless_chromium(
    report: tuple[Path, list[EpisodeResult]], tmp_path: Path
) -> None:
    out, episodes = report
    html = dom(out, "expand=all", tmp_path / "p1")
    assert html.count('<details class="trajectory"') == len(episodes) == 6
    assert "showing 6 of 6 trajectories" in html
    assert html.count('class="msg role-tool"') == sum(
        1 for e in episodes for m in e.messages if m["role"] == "tool"
    )
    assert (
        'class="reasoning dropped"' in html
        and "context policy dropped reasoning (from turn 2)" in html
    )
    assert "error (policy): server returned HTTP 500" in html
    first_call = next(e for e in episodes if e.task_id == "hangzhou-3day").messages[2][
        "tool_calls"
    ][0]["function"]
    assert f"→ {first_call['name']}({first_call['arguments']})" in html  # tool calls are shown
    assert re.search(r'<tr class="task-row" data-task="trip-002-d2">.*?1 / 1', html)

    errored = dom(out, "outcome=errored", tmp_path / "p2")
    assert "showing 1 of 6 trajectories" in errored
    visible = re.findall(r'<details class="trajectory"[^>]*>', errored)
    assert sum("hidden" not in d for d in visible) == 1
    assert [d for d in visible if "hidden" not in d][0].count('data-error="policy"') == 1

    one_task = dom(out, "task=trip-001-d1&outcome=passed", tmp_path / "p3")
    assert "showing 2 of 6 trajectories" in one_task


@pytest.mark.heavy
@pytest.mark.timeout(300)
def test_report_screenshot(report: tuple[Path, list[EpisodeResult]], tmp_path: Path) -> None:
    out, _ = report
    png = tmp_path / "report.png"
    done = chromium(
        f"--screenshot={png}",
        "--window-size=1200,1600",
        f"file://{out / 'html' / 'index.html'}#expand=all&task=trip-001-d1",
        profile=tmp_path / "p",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 1600)
    assert len(data) > 50_000  # a rendered page, not a blank one (a blank 1200×1600 page is ~9 kB)
