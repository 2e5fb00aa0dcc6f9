"""The pass@k filter: the stopping rule, early stopping through the rollout engine, resume, CLI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envgym.bundle import load_bundle
from envgym.cli import app
from envgym.envs.retail_orders.build import build_bundle
from envgym.rollout import EpisodeResult
from envgym.synth_agents.filter_run import filter_run
from envgym.synth_agents.passk import (
    ALWAYS,
    ERRORED,
    KEEP,
    NEVER,
    FilterConfig,
    Tally,
    filter_bundle,
)
from envgym.synth_agents.recorder import SynthRecorder
from envgym.synth_agents.slip_policy import SlipPolicy, smollm2_tokenizer

pytestmark = pytest.mark.timeout(180)
runner = CliRunner()


def play(tally: Tally, outcomes: str) -> list[int | None]:
    """Run 'P'/'F'/'E' outcomes through the tally one at a time; the reserved sample indices."""
    seen = []
    for o in outcomes:
        sample = tally.reserve()
        seen.append(sample)
        if sample is None:
            break
        tally.add(
            EpisodeResult(
                task_id=tally.task_id,
                sample=sample,
                reward=1.0 if o == "P" else 0.0,
                error="env" if o == "E" else None,
                prompt_tokens=10,
                sampled_tokens=5,
            )
        )
    return seen


def test_keep_is_decided_by_the_first_success() -> None:
    t = Tally("t", k=100, drop_always_solved=False)
    assert play(t, "FFPF") == [0, 1, 2, None]
    assert (t.decision, t.n, t.c, t.tokens, t.sampled_tokens) == (KEEP, 3, 1, 45, 15)


def test_never_solved_needs_all_k_samples() -> None:
    t = Tally("t", k=4, drop_always_solved=False)
    assert play(t, "FFFFF") == [0, 1, 2, 3, None]
    assert t.decision == NEVER


def test_drop_always_solved_needs_a_failure_to_keep() -> None:
    t = Tally("t", k=5, drop_always_solved=True)
    assert play(t, "PPF") == [0, 1, 2] and t.decision == KEEP
    t = Tally("t", k=3, drop_always_solved=True)
    assert play(t, "PPPP") == [0, 1, 2, None] and t.decision == ALWAYS


def test_errors_do_not_count_and_give_up_eventually() -> None:
    t = Tally("t", k=2, drop_always_solved=False, max_errors=2)
    assert play(t, "EEFF") == [0, 1, 2, 3] and (t.n, t.errors, t.decision) == (2, 2, NEVER)
    t = Tally("t", k=5, drop_always_solved=False, max_errors=1)
    assert play(t, "EEF") == [0, 1, None] and t.decision == ERRORED


def test_inflight_samples_count_towards_k() -> None:
    t = Tally("t", k=2, drop_always_solved=False)
    assert (t.reserve(), t.reserve(), t.reserve()) == (0, 1, None)


@pytest.fixture(scope="module")
def tokenizer():  # noqa: ANN201 - a transformers tokenizer
    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def retail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle(
        tmp_path_factory.mktemp("retail") / "b", seed=1, n_tasks=2, difficulties=(1, 2)
    )


def run_filter(root: Path, slip: float, config: FilterConfig, tokenizer) -> list:  # noqa: ANN001
    async def main() -> list:
        policy = SlipPolicy(root, slip=slip, tokenizer=tokenizer)
        try:
            return await filter_bundle(load_bundle(root), policy, config)
        finally:
            await policy.aclose()

    return asyncio.run(main())


def test_filter_stops_early_and_counts_tokens(retail: Path, tokenizer, require_backend) -> None:  # noqa: ANN001
    require_backend("bwrap")
    solved = run_filter(retail, 0.0, FilterConfig(k=10, width=2), tokenizer)
    assert [(r.decision, r.n, r.c) for r in solved] == [
        (KEEP, 2, 2),
        (KEEP, 2, 2),
    ]  # both lanes ran once
    assert all(r.tokens > 0 and r.full_tokens_estimate == 5 * r.tokens for r in solved)
    always = run_filter(retail, 0.0, FilterConfig(k=4, width=2, drop_always_solved=True), tokenizer)
    assert [(r.decision, r.n, r.c, r.kept) for r in always] == [(ALWAYS, 4, 4, False)] * 2
    never = run_filter(retail, 1.0, FilterConfig(k=3, width=1), tokenizer)
    assert [(r.decision, r.n, r.c, r.pass_rate, r.difficulty) for r in never] == [
        (NEVER, 3, 0, 0.0, 1.0)
    ] * 2


def test_filter_run_resumes_per_task(
    retail: Path, tmp_path: Path, tokenizer, require_backend
) -> None:  # noqa: ANN001
    require_backend("bwrap")
    recorder = SynthRecorder(tmp_path / "out", None)
    bundle = load_bundle(retail)
    record = {
        "status": "kept",
        "content_hash": bundle.manifest.content_hash,
        "tasks": [t.id for t in bundle.tasks],
        "bundle": str(retail),
    }
    made: list[Path] = []

    def factory(root: Path) -> SlipPolicy:
        made.append(root)
        return SlipPolicy(root, slip=1.0, tokenizer=tokenizer)

    config = FilterConfig(k=2, width=1)
    first = filter_run(recorder, [record], model="slip", factory=factory, config=config)
    assert (first.tasks, first.kept, dict(first.decisions)) == (2, 0, {NEVER: 2})
    again = filter_run(recorder, [record], model="slip", factory=factory, config=config)
    assert again.to_dict() == first.to_dict() and len(made) == 1  # nothing re-run, no model loaded
    lines = [json.loads(x) for x in (tmp_path / "out" / "synth.jsonl").read_text().splitlines()]
    assert sorted(
        (x["type"], x["task_id"], x["decision"]) for x in lines
    ) == [  # journaled as decided
        ("filter", "retail-001-d1", NEVER),
        ("filter", "retail-002-d2", NEVER),
    ]


def test_cli_filter_with_agent_policies(tmp_path: Path, require_backend) -> None:
    require_backend("bwrap")
    base = [
        "synth",
        "retail",
        "--n",
        "1",
        "--out",
        str(tmp_path / "o"),
        "--db",
        f"sqlite:///{tmp_path}/d.db",
        "--workers",
        "1",
        "--tasks-per-bundle",
        "2",
        "--json",
    ]
    gold = runner.invoke(app, base + ["--filter-k", "3", "--filter-model", "gold"])
    assert gold.exit_code == 0, gold.output
    f = json.loads(gold.stdout.strip().splitlines()[-1])["filter"]
    assert (f["tasks"], f["kept"], f["decisions"]) == (2, 2, {KEEP: 2})
    rand = runner.invoke(app, base + ["--filter-k", "2", "--filter-model", "random"])
    f = json.loads(rand.stdout.strip().splitlines()[-1])["filter"]
    assert (f["tasks"], f["kept"], f["decisions"]) == (2, 0, {NEVER: 2})
    table = runner.invoke(app, base[:-1] + ["--filter-k", "2", "--filter-model", "random"])
    assert "kept by pass@2" in table.stdout and "0/2 tasks" in table.stdout


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_cli_filter_with_the_embedded_model(tmp_path: Path, require_backend) -> None:
    require_backend("bwrap")
    result = runner.invoke(
        app,
        [
            "synth",
            "retail",
            "--n",
            "1",
            "--out",
            str(tmp_path / "o"),
            "--db",
            f"sqlite:///{tmp_path}/d.db",
            "--workers",
            "1",
            "--tasks-per-bundle",
            "1",
            "--json",
            "--filter-k",
            "2",
            "--filter-model",
            "smollm2",
            "--filter-max-turns",
            "3",
            "--filter-episode-tokens",
            "192",
            "--filter-max-tokens",
            "64",
        ],
    )
    assert result.exit_code == 0, result.output
    f = json.loads(result.stdout.strip().splitlines()[-1])["filter"]
    assert f["tasks"] == 1 and sum(f["decisions"].values()) == 1
    record = next(
        json.loads(x)
        for x in (tmp_path / "o" / "synth.jsonl").read_text().splitlines()
        if json.loads(x)["type"] == "filter"
    )
    assert (
        record["model"] == "smollm2"
        and record["n"] + record["errors"] >= 1
        and record["tokens"] > 0
    )
    assert record["kept"] == (record["decision"] == KEEP) and 0.0 <= record["pass_rate"] <= 1.0
