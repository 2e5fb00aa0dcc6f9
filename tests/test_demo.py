"""The demo's new step: the embedded model evaluated with pass@k and an HTML report."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from envgym.demo import DemoEval, demo_evaluation
from envgym.store import Store


@pytest.mark.heavy
@pytest.mark.timeout(400)
def test_demo_evaluates_the_embedded_model_and_writes_the_report(tmp_path: Path) -> None:
    console = Console(record=True, width=160)
    spec = DemoEval(tasks=1, k=2, max_tokens=32, max_turns=2, out_dir=tmp_path)
    assert demo_evaluation(console, spec) is True
    text = console.export_text()
    assert (
        "pass@2" in text
        and "pass^2" in text
        and f"HTML report: {tmp_path / 'report' / 'trip-planning-v0' / 'index.html'}" in text
    )
    report = tmp_path / "report" / "trip-planning-v0"
    assert (report / "index.html").is_file() and (report / "data.js").is_file()
    with Store(f"sqlite:///{tmp_path / 'demo.db'}") as store:
        [evaluation] = store.evaluations()
        episodes = store.episodes(evaluation.key)
    assert evaluation.model == "smollm2" and len(episodes) == 2
    for e in episodes:
        assert e.error is None and e.turns >= 1
        assert (
            e.record.sampled_tokens == e.sampled_tokens > 0
        )  # the model's own tokens were recorded

    again = Console(record=True, width=160)
    assert demo_evaluation(again, spec) is True  # a rerun reads the store, runs nothing
    assert "0 run now, 2 from the store" in again.export_text()


@pytest.mark.heavy
@pytest.mark.timeout(1200)
def test_demo_training_step_cold_starts_trains_and_draws_the_curves(tmp_path: Path) -> None:
    """The demo's training step at a smaller size (the end-to-end CLI test runs ``--no-train``:
    the default-size step costs ~15 minutes of a 2-core CI run)."""
    from envgym.demo_train import DemoTraining, demo_training

    console = Console(record=True, width=160)
    spec = DemoTraining(train_per_generator=1, sft_epochs=2, grpo_steps=1, group_size=2,
                        prompts=2, max_tokens=128, max_turns=2)
    assert demo_training(console, spec=spec, out=tmp_path) is True
    text = console.export_text()
    assert "cold start (envgym sft) and 1 GRPO steps" in text
    for row in ("(base)", "after cold start (SFT)", "after 1 GRPO steps"):
        assert row in text, row
    assert text.count("held-out pass@1 of") == 3
    assert (tmp_path / "grpo" / "metrics" / "curves.png").stat().st_size > 1000
    assert (tmp_path / "grpo" / "policy" / "train_run.json").is_file()
