"""``envgym filter`` and the kept-tasks file it writes: the pass@k filter of existing bundles
with a real policy (gold replays solve one task of each bundle and fail the other), the
trainer's config reading the file, resuming, a failure mid-run losing nothing decided, and
hostile or stale files refused by name."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from bundle_factory import SOLUTION, TASK, make_notes_bundle
from typer.testing import CliRunner

from envgym.bundle import load_bundle, write_manifest
from envgym.cli import app
from envgym.kept_tasks import KeptError, KeptTasks, load_kept, write_kept
from envgym.policy import SamplingParams
from envgym.rollout import RolloutBudget
from envgym.synth_agents.filter_run import model_policy_factory
from envgym.synth_agents.kept_run import filter_into, filter_settings, resume_or_start
from envgym.synth_agents.passk import FilterConfig
from envgym.trainer.config import ConfigError, config_from_dict

pytestmark = pytest.mark.timeout(300)
runner = CliRunner()
SOLVE_WRONG = '\n\ndef solve_wrong(tools, task):\n    tools.submit_result(answer_text="wrong")\n'
CONFIG = FilterConfig(
    k=2,
    params=SamplingParams(temperature=0.0, max_tokens=64),
    budget=RolloutBudget(max_turns=4, max_tokens=256),
    derive_budget=False,
    sandbox="inprocess",
)


def notes(root: Path, case: int) -> Path:
    """Two tasks: gold solves ``secret`` and submits a wrong answer to ``miss``."""
    tasks = [
        {**TASK, "prompt": f"Case {case}. {TASK['prompt']}"},
        {**TASK, "id": "miss", "solution": "solve_wrong", "prompt": f"Case {case}: the secret?"},
    ]
    make_notes_bundle(root, tasks=tasks)
    (root / "solution.py").write_text(SOLUTION + SOLVE_WRONG)
    write_manifest(root, name="notes", category="test", provenance={"agent": "test", "seed": case})
    return root


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """Two training bundles (categories a, b) and one held out (c), with a suite manifest."""
    root = tmp_path / "suite"
    rows = []
    for i, (cat, split) in enumerate([("a", "train"), ("b", "train"), ("c", "held_out")]):
        d = notes(root / f"b{i}", i)
        rows.append({"path": f"b{i}", "category": cat, "content_hash": load_bundle(d).manifest.content_hash,
                     "tasks": 2, "split": split})  # fmt: skip
    manifest = {"format": "envgym-suite", "version": 1, "bundles": rows,
                "splits": {"train": ["a", "b"], "validation": [], "held_out": ["c"]}}  # fmt: skip
    (root / "suite.json").write_text(json.dumps(manifest))
    return root


def cli_filter(suite: Path, out: Path, model: str = "gold", *extra: str) -> Any:
    args = ["filter", str(suite), "--model", model, "--out", str(out), "--sandbox", "inprocess"]
    args += ["--k", "2", "--temperature", "0", "--max-tokens", "64", "--max-turns", "4"]
    return runner.invoke(app, [*args, "--episode-tokens", "256", *extra, "--json"])


def envs(suite: Path, **entry: object) -> list[tuple[str, list[str] | None]]:
    config = config_from_dict({"envs": [{"id": str(suite), "sandbox": "inprocess", **entry}]})
    return [(e.id, e.tasks) for e in config.envs]


def test_the_filter_keeps_what_the_policy_solves_and_train_reads_it(
    suite: Path, tmp_path: Path
) -> None:
    out = tmp_path / "kept.json"
    result = cli_filter(suite, out)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["bundles"], summary["tasks"], summary["kept"]) == (2, 4, 2)
    assert summary["mean_pass_rate"] == 0.5
    kept = load_kept(out)
    assert sorted(Path(b.path).name for b in kept.bundles.values()) == ["b0", "b1"]  # train only
    for b in kept.bundles.values():
        assert b.kept == ("secret",) and b.pass_rates == {"secret": 1.0, "miss": 0.0}
    assert kept.settings["model"] == "gold" and kept.settings["k"] == 2
    # the trainer trains on exactly the kept tasks of the split's bundles
    assert envs(suite, split="train", kept=str(out)) == [
        (str(suite / "b0"), ["secret"]),
        (str(suite / "b1"), ["secret"]),
    ]
    assert envs(suite / "b1", kept=str(out)) == [(str(suite / "b1"), ["secret"])]
    # a policy that solves nothing keeps nothing, and the trainer says so
    none = tmp_path / "none.json"
    assert cli_filter(suite, none, "random").exit_code == 0
    assert load_kept(none).kept == 0
    with pytest.raises(ConfigError, match=r"envs\[0\]\.kept: .*keeps no task"):
        envs(suite, kept=str(none))


def test_a_rerun_resumes_and_other_settings_are_refused(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept.json"
    dirs = [suite / "b0", suite / "b1"]
    loads: list[Path] = []
    gold = model_policy_factory("gold", "inprocess")

    def factory(d: Path) -> Any:
        loads.append(d)
        return gold(d)

    settings = filter_settings("gold", "agent:gold:v1", CONFIG)
    first = asyncio.run(
        filter_into(dirs, factory, CONFIG, out, resume_or_start(out, settings, restart=False))
    )
    assert len(loads) == 2 and first.kept == 2
    written = out.read_bytes()
    again = asyncio.run(
        filter_into(dirs, factory, CONFIG, out, resume_or_start(out, settings, restart=False))
    )
    assert len(loads) == 2 and again == first and out.read_bytes() == written  # no model, no write
    other = filter_settings("gold", "agent:gold:v1", FilterConfig(**{**CONFIG.__dict__, "k": 3}))
    with pytest.raises(KeptError, match=r"other settings \(k: 2 → 3\).*--restart"):
        resume_or_start(out, other, restart=False)
    assert resume_or_start(out, other, restart=True) == KeptTasks(other, {})
    # through the CLI: the same refusal is an exit code 2 naming the setting
    refused = cli_filter(suite, out, "gold", "--k", "3")
    assert refused.exit_code == 2 and "k: 2 → 3" in refused.output


def test_a_failure_mid_run_keeps_every_bundle_already_decided(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept.json"
    dirs = [suite / "b0", suite / "b1"]
    gold = model_policy_factory("gold", "inprocess")

    def dies_on_b1(d: Path) -> Any:
        if d.name == "b1":
            raise RuntimeError("the model server went away")
        return gold(d)

    settings = filter_settings("gold", "agent:gold:v1", CONFIG)
    start = resume_or_start(out, settings, restart=False)
    with pytest.raises(RuntimeError, match="went away"):
        asyncio.run(filter_into(dirs, dies_on_b1, CONFIG, out, start, lanes=1))
    assert [Path(b.path).name for b in load_kept(out).bundles.values()] == ["b0"]
    done = asyncio.run(
        filter_into(dirs, gold, CONFIG, out, resume_or_start(out, settings, restart=False))
    )
    assert [Path(b.path).name for b in done.bundles.values()] == ["b0", "b1"]


def _valid(suite: Path, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "valid.json"
    assert cli_filter(suite, out).exit_code == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: [], "the top level is not an object"),
        (lambda d: {**d, "format": "envgym-suite"}, "'format' is 'envgym-suite'"),
        (lambda d: {**d, "version": 2}, "'version' is 2"),
        (lambda d: {**d, "settings": {"k": [2]}}, "'settings' must be an object"),
        (lambda d: {**d, "settings": {"t": float("nan")}}, "'settings' must be an object"),
        (lambda d: {**d, "bundles": {}}, "'bundles' must be a list"),
        (lambda d: {**d, "bundles": [1]}, r"bundles\[0\] is not an object"),
        (lambda d: {**d, "bundles": [{**d["bundles"][0], "tasks": True}]}, r"bundles\[0\]\.tasks"),
        (lambda d: {**d, "bundles": [{**d["bundles"][0], "kept": ["a", "a"]}]}, "repeats a task"),
        (lambda d: {**d, "bundles": [{**d["bundles"][0], "kept": [1]}]}, "list of task ids"),
        (lambda d: {**d, "bundles": [{**d["bundles"][0], "pass_rates": {"a": 2}}]}, r"in \[0, 1\]"),
        (lambda d: {**d, "bundles": d["bundles"] * 2}, "listed twice"),
        (lambda d: {**d, "bundles": [{**d["bundles"][0], "filtered": False}]}, "keeps nothing"),
        (lambda d: {**d, "bundles": [{**d["bundles"][0], "filtered": 1}]}, "must be a boolean"),
    ],
)
def test_a_bad_kept_file_is_refused_by_name(
    suite: Path, tmp_path: Path, change: Any, match: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(change(_valid(suite, tmp_path)), allow_nan=True))
    with pytest.raises(KeptError, match=match):
        load_kept(bad)
    with pytest.raises(ConfigError, match=r"envs\[0\]\.kept: .*" + match):
        envs(suite, kept=str(bad))


def test_files_that_are_links_huge_truncated_or_missing_are_refused(
    suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _valid(suite, tmp_path)
    real = tmp_path / "real.json"
    real.write_text(json.dumps(data))
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with pytest.raises(KeptError, match="symbolic link"):
        load_kept(link)
    (tmp_path / "cut.json").write_text(json.dumps(data)[:-9])
    with pytest.raises(KeptError, match="truncated or not JSON"):
        load_kept(tmp_path / "cut.json")
    with pytest.raises(KeptError, match="no kept-tasks file"):
        load_kept(tmp_path / "absent.json")
    monkeypatch.setattr("envgym.kept_tasks.MAX_BYTES", 100)
    with pytest.raises(KeptError, match="over the 100 allowed"):
        load_kept(real)


def test_stale_or_misused_kept_files_are_refused(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept.json"
    assert cli_filter(suite, out).exit_code == 0
    with pytest.raises(ConfigError, match=r"envs\[0\]: 'tasks' and 'kept' both choose tasks"):
        envs(suite / "b0", kept=str(out), tasks=["secret"])
    with pytest.raises(ConfigError, match=r"kept needs a bundle directory or a suite"):
        config_from_dict({"envs": [{"id": "notes-v0", "kept": str(out)}]})
    # a bundle the file never saw (the held-out one) and a bundle changed since the filter ran
    with pytest.raises(ConfigError, match=r"envs\[0\]\.kept: the bundle .*b2 .* is not in"):
        envs(suite, split="held_out", kept=str(out))
    notes(suite / "b1", 7)
    with pytest.raises(ConfigError, match=r"the bundle .*b1 .* is not in .*changed since"):
        envs(suite, split="train", kept=str(out))


def test_bad_options_are_refused_before_anything_runs(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept.json"
    for extra, match in [
        (("--max-turns", "0"), "must be ≥ 1"),
        (("--k", "0"), "filter needs k"),
        (("--split", "test"), "unknown split 'test'"),
        (("--lanes", "0"), "lanes must be ≥ 1"),
    ]:
        result = cli_filter(suite, out, "gold", *extra)
        assert result.exit_code == 2 and match in result.output, (extra, result.output)
    missing = runner.invoke(
        app, ["filter", str(tmp_path / "nowhere"), "-m", "gold", "-o", str(out)]
    )
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert not out.exists()
    write_kept(out, KeptTasks({"model": "gold"}, {}))  # an unrelated file is not overwritten
    assert cli_filter(suite, out).exit_code == 2 and load_kept(out).kept == 0


def test_a_sample_filters_some_bundles_and_records_the_rest(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept.json"
    result = cli_filter(suite, out, "gold", "--sample", "1")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["bundles"], summary["not_sampled"], summary["tasks"]) == (1, 1, 2)
    entries = load_kept(out).bundles.values()
    assert sorted(b.filtered for b in entries) == [False, True]
    assert [b.kept for b in entries if not b.filtered] == [()]
    sampled = [str(suite / Path(b.path).name) for b in entries if b.filtered]
    assert envs(suite, kept=str(out)) == [(sampled[0], ["secret"])]  # the other is left out
    # a larger sample later filters what the first left out, and only that
    whole = cli_filter(suite, out, "gold", "--sample", "2")
    assert json.loads(whole.stdout.strip().splitlines()[-1])["bundles"] == 2
    assert len(envs(suite, kept=str(out))) == 2
    assert "sample must be ≥ 1" in cli_filter(suite, out, "gold", "--sample", "0").output
