"""The synthesis pipeline mutates a machine-written verifier by default (docs/CHECK.md).

The bundle below passes every other validation step: its verifier's main test is lax on one
kind of answer (a wrong value with a remark, ``"plum (unverified)"``) and a guard covers it.
None of envgym check's probes reaches the guard, so a verifier one slip away from paying that
answer (the guard dropped) passes check; only the mutation stream (a corruption of a witness)
sees it, and the default pipeline rejects the bundle as ``mutant_survives``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from synth_notes import make_witnessed_notes

from envgym.bundle import write_manifest
from envgym.synth_agents.pipeline import Job, MakeOutcome, ValidationSettings, make_and_validate

pytestmark = pytest.mark.timeout(300)

ONE_SLIP_AWAY = """
from envgym.runtime import sqlite


def verify_secret(submission, task):
    key = task["metadata"]["key"]
    want = sqlite().execute("SELECT value FROM notes WHERE key = ?", (key,)).fetchone()[0]
    got = submission.get("answer_text")
    if not isinstance(got, str):
        return {"checks": [{"name": "correct", "passed": False, "detail": "no answer_text"}]}
    value, _, remark = got.partition(" (")
    passed = (value == want) != bool(remark)  # lax: a wrong value with a remark passes here ...
    if remark and value != want:  # ... and only this guard refuses it
        passed = False
    return {"checks": [{"name": "correct", "passed": passed, "detail": key}]}
"""


class WeakVerifierAgent:
    """Makes the notes bundle with the verifier above, as written by ``model``."""

    slug, name, category = "weak", "test:weak", "notes"

    def __init__(self, model: str | None) -> None:
        self.model = model

    def make(self, job: Job, staging: Path) -> MakeOutcome:
        make_witnessed_notes(staging)
        (staging / "verifier.py").write_text(ONE_SLIP_AWAY)
        write_manifest(
            staging,
            name="notes",
            category="notes",
            provenance={"agent": self.name, "model": self.model, "seed": job.seed},
        )
        return MakeOutcome(True)


def test_the_default_pipeline_rejects_a_machine_written_verifier_one_slip_from_paying(
    tmp_path: Path, require_backend
) -> None:
    require_backend("bwrap")
    started = time.perf_counter()
    result = make_and_validate(
        WeakVerifierAgent("m"), Job(0, 0, "weak-0"), tmp_path / "s", ValidationSettings()
    )
    seconds = time.perf_counter() - started
    assert result.validation is not None and result.validation.reasons == ("mutant_survives",), (
        result.validation.problems if result.validation else result.made
    )
    assert "pays" in result.validation.problems[
        0
    ].detail and "plum (unverified)" in result.validation.problems[0].detail.replace('\\"', '"')
    assert seconds < 120, f"validation with mutation took {seconds:.0f} s"


def test_a_verifier_no_model_wrote_is_not_mutated_by_default(
    tmp_path: Path, require_backend
) -> None:
    require_backend("bwrap")
    result = make_and_validate(
        WeakVerifierAgent(None), Job(0, 0, "weak-0"), tmp_path / "s", ValidationSettings()
    )
    assert result.validation is not None and result.validation.passed, result.validation
    off = make_and_validate(
        WeakVerifierAgent("m"),
        Job(0, 0, "weak-0"),
        tmp_path / "s",
        ValidationSettings(mutation=False),
    )
    assert off.validation is not None and off.validation.passed, off.validation


FENCE_REFUSED = """
from envgym.runtime import sqlite


def verify_secret(submission, task):
    key = task["metadata"]["key"]
    want = sqlite().execute("SELECT value FROM notes WHERE key = ?", (key,)).fetchone()[0]
    got = submission.get("answer_text")
    if not isinstance(got, str):
        return {"checks": [{"name": "correct", "passed": False, "detail": "no answer_text"}]}
    passed = got.strip().strip("`").strip() == want
    if got.startswith("```"):  # a fenced answer is refused (check lets a verifier choose)
        passed = False
    return {"checks": [{"name": "correct", "passed": passed, "detail": key}]}
"""


def test_a_mutant_that_only_accepts_the_gold_in_another_form_does_not_reject_the_bundle(
    tmp_path: Path, require_backend
) -> None:
    require_backend("bwrap")
    from envgym import mutation_run
    from envgym.bundle import load_bundle

    root = make_witnessed_notes(tmp_path / "notes")
    (root / "verifier.py").write_text(FENCE_REFUSED)
    write_manifest(
        root, name="notes", category="notes", provenance={"agent": "llm", "model": "m", "seed": 0}
    )
    report = mutation_run.run_mutation(load_bundle(root), corruptions_per_task=5)
    line = next(n for n, text in enumerate(FENCE_REFUSED.splitlines(), 1) if "startswith" in text)
    guard = [r for r in report.results if r.kind == "if_false" and r.line == line]
    # it only accepts the fenced gold: equivalent (check lets a verifier accept or refuse it)
    assert guard and (guard[0].changed, guard[0].killed, guard[0].pays_wrong) == (False, False, 0)
    assert report.passed, mutation_run.summary(report)
