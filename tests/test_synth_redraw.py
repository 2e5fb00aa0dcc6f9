"""A procedural job whose database cannot hold a level redraws it from a derived seed."""

from __future__ import annotations

from pathlib import Path

import pytest

import envgym.synth_agents.procedural as procedural
from envgym.envs.procedural_kit.build import UnsolvableTask
from envgym.synth_agents.pipeline import Job


class _Category:
    """Fails with ``error`` for the first ``bad`` seeds it is asked to build."""

    name = slug = "fake"

    def __init__(self, bad: int, error: type[Exception] = UnsolvableTask) -> None:
        self.bad, self.error, self.seeds = bad, error, []

    def build(
        self, out: Path, seed: int, n_tasks: int, cycle: tuple[int, ...], max_rows: int | None
    ) -> None:
        self.seeds.append(seed)
        out.mkdir(parents=True)
        (out / "partial").write_text("left by a failed build")
        if len(self.seeds) <= self.bad:
            raise self.error(f"no strict task on seed {seed}")
        (out / "partial").unlink()
        (out / "built").write_text(str(seed))


def _make(monkeypatch: pytest.MonkeyPatch, category: _Category, tmp_path: Path):
    monkeypatch.setattr(procedural, "find_category", lambda _name: category)
    agent = procedural.ProceduralAgent("fake", tasks_per_bundle=1)
    return agent.make(Job(key="fake-7", index=0, seed=7), tmp_path / "staging")


def test_an_unlucky_database_is_redrawn_and_the_seed_recorded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    category = _Category(bad=2)
    outcome = _make(monkeypatch, category, tmp_path)
    assert outcome.made
    stride = procedural.REDRAW_STRIDE
    assert category.seeds == [7, 7 + stride, 7 + 2 * stride]
    assert outcome.info["database_seed"] == 7 + 2 * stride
    assert len(outcome.info["redraws"]) == 2
    assert sorted(p.name for p in (tmp_path / "staging").iterdir()) == ["built"]


def test_redraws_are_bounded_and_every_failure_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    category = _Category(bad=100)
    outcome = _make(monkeypatch, category, tmp_path)
    assert not outcome.made and outcome.reason == "build_failed"
    assert len(category.seeds) == procedural.REDRAWS + 1
    assert outcome.detail.count("UnsolvableTask") == procedural.REDRAWS + 1


def test_a_bug_is_not_retried(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    category = _Category(bad=1, error=KeyError)
    outcome = _make(monkeypatch, category, tmp_path)
    assert not outcome.made and "KeyError" in outcome.detail
    assert category.seeds == [7]
