"""The demo's new step: the embedded model evaluated with pass@k and an HTML report."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from envgym.apps.demo import DemoEval, demo_evaluation
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
