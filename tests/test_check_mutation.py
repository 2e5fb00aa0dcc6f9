"""``envgym check --mutation``: verifier mutants, run in the sandbox, judged by check's criteria.

Bounded: the AST mutants are unit-tested on a small source; the sandbox run takes a handful of
mutants of one one-task retail bundle, and the real ``envgym check`` is run on the same mutants
to hold the mutation run's judgement (killed or not) to check's own.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from envgym.bundle import load_bundle, write_manifest
from envgym.check import check_bundle
from envgym.envs.procedural_kit.build import build_procedural_bundle
from envgym.envs.retail_orders.build import RECIPE as RETAIL
from envgym.mutation import mutants
from envgym.mutation_run import MutantResult, MutationReport, run_mutation

pytestmark = pytest.mark.timeout(600)

SOURCE = """
LIMIT = 3

def verify(submission, task):
    out = {}
    total = submission.get("total")
    if total is None or abs(total - 10) > 0.005:
        out.setdefault("total", []).append("wrong")
    if len(out) < LIMIT and total != 0:
        out["x"] = ["y"]
    return {"checks": [{"name": k, "passed": False} for k in out] or [{"name": "ok", "passed": True}]}
"""


def test_mutants_cover_every_kind_and_parse() -> None:
    found = mutants(SOURCE)
    kinds = {m.kind for m in found}
    assert kinds == {
        "compare_flip",
        "compare_shift",
        "boolop_swap",
        "if_true",
        "if_false",
        "drop",
        "constant",
        "return_empty",
    }
    for m in found:
        ast.parse(m.source)
        assert m.source != ast.unparse(ast.parse(SOURCE))
    assert "LIMIT = 3" in found[0].source and not any("LIMIT = 4" in m.source for m in found), (
        "module-level constants are not mutated"
    )
    assert any("> 0.05" in m.source for m in found) and any("> 0.0005" in m.source for m in found)
    assert len({m.source for m in found}) == len(found)
    assert len(mutants(SOURCE, limit=3)) == 3


def test_a_surviving_mutant_that_pays_fails_the_report() -> None:
    kill = MutantResult("a", "drop", 1, "", changed=True, killed=True, pays_wrong=3)
    equivalent = MutantResult("b", "constant", 2, "", changed=False, killed=False, pays_wrong=0)
    stricter = MutantResult("c", "compare_shift", 3, "", changed=True, killed=False, pays_wrong=0)
    paying = MutantResult("d", "if_true", 4, "", changed=True, killed=False, pays_wrong=1)
    assert MutationReport("x", 3, 10, (kill, equivalent, stricter)).passed
    report = MutationReport("x", 4, 10, (kill, equivalent, stricter, paying))
    assert not report.passed and report.kill_rate == pytest.approx(1 / 3)
    assert [s["id"] for s in report.to_dict()["paying_survivors"]] == ["d"]


@pytest.fixture(scope="module")
def retail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_procedural_bundle(
        RETAIL, tmp_path_factory.mktemp("r") / "b", seed=0, n_tasks=1, difficulties=(3,)
    )


def _chosen(source: str) -> dict[str, str]:
    """A handful of mutants: the total tolerance loosened, the rating floor switched off, a cosmetic
    change (the detail text keeps four problems, not three), the customer check flipped."""
    lines = source.splitlines()
    floor = next(
        i for i, x in enumerate(lines, 1) if 'rows[sku]["rating"] < meta["min_rating"]' in x
    )
    out = {}
    for m in mutants(source):
        if "abs(total - expected) > 0.05:" in m.source and "tolerance" not in out:
            out["tolerance"] = m.id
        elif m.kind == "if_false" and m.line == floor:
            out["floor_off"] = m.id
        elif "problems[:4]" in m.source and "cosmetic" not in out:
            out["cosmetic"] = m.id
        elif "answer['customer'] == meta['customer']" in m.source and "customer" not in out:
            out["customer"] = m.id
    assert len(out) == 4, out
    return out


def test_mutation_run_kills_what_check_kills(retail: Path, tmp_path: Path) -> None:
    bundle = load_bundle(retail)
    source = (retail / "verifier.py").read_text()
    chosen = _chosen(source)
    report = run_mutation(bundle, only=lambda m: m.id in chosen.values(), corruptions_per_task=5)
    by = {r.id: r for r in report.results}
    assert (
        by[chosen["tolerance"]].killed
        and by[chosen["floor_off"]].killed
        and by[chosen["customer"]].killed
    )
    assert by[chosen["floor_off"]].pays_wrong > 0  # the rating witness, at least
    assert not by[chosen["cosmetic"]].changed and not by[chosen["cosmetic"]].killed
    assert report.passed and report.kill_rate == 1.0
    assert report.to_dict()["behaviour_changing"] == 3
    # The same mutants through the real envgym check: the same judgement.
    sources = {m.id: m.source for m in mutants(source)}
    for name, mutant_id in chosen.items():
        copy = tmp_path / name
        shutil.copytree(retail, copy)
        (copy / "verifier.py").write_text(sources[mutant_id])
        manifest = json.loads((copy / "manifest.json").read_text())
        write_manifest(
            copy,
            name=manifest["name"],
            category=manifest["category"],
            provenance=manifest["provenance"],
            description=manifest.get("description", ""),
        )
        check = check_bundle(load_bundle(copy), reruns=1, corruptions_per_task=5)
        assert (not check.passed) == by[mutant_id].killed, (name, check.tasks[0].problems)


def test_cli_check_mutation_reports_the_kill_rate(retail: Path) -> None:
    from typer.testing import CliRunner

    from envgym.cli import app

    result = CliRunner().invoke(
        app,
        [
            "check",
            str(retail),
            "--json",
            "--reruns",
            "1",
            "--corruptions",
            "5",
            "--mutation",
            "--max-mutants",
            "2",
        ],
    )
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["mutation"]["mutants"] == 2 and 0.0 <= out["mutation"]["kill_rate"] <= 1.0
    assert result.exit_code == (0 if out["passed"] and out["mutation"]["passed"] else 1)
    bad = CliRunner().invoke(app, ["check", str(retail), "--mutation", "--max-mutants", "-1"])
    assert bad.exit_code != 0 and "--max-mutants" in bad.output and "Traceback" not in bad.output


def _machine_written_notes(root: Path) -> Path:
    from synth_notes import make_witnessed_notes

    root = make_witnessed_notes(root)
    write_manifest(
        root, name="notes", category="test", provenance={"agent": "llm", "model": "m", "seed": 0}
    )
    return root


def test_synthesis_validation_mutates_a_machine_written_verifier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envgym import mutation_run
    from envgym.synth_agents.validate import validate_bundle

    root = _machine_written_notes(tmp_path / "notes")
    reports: list[MutationReport] = []
    real = mutation_run.run_mutation
    monkeypatch.setattr(
        mutation_run, "run_mutation", lambda *a, **kw: reports.append(real(*a, **kw)) or reports[-1]
    )
    result = validate_bundle(root, reruns=1, corruptions_per_task=5)  # on: a model wrote it
    assert result.passed, result.problems
    assert len(reports) == 1 and reports[0].mutants > 0 and reports[0].kill_rate == 1.0

    paying = MutantResult(
        "d",
        "if_true",
        4,
        "if test -> True",
        changed=True,
        killed=False,
        pays_wrong=2,
        example="t: {}",
    )
    monkeypatch.setattr(
        mutation_run, "run_mutation", lambda *a, **kw: MutationReport("notes", 1, 9, (paying,))
    )
    default = validate_bundle(root, reruns=1, corruptions_per_task=5)
    assert default.reasons == ("mutant_survives",)
    assert validate_bundle(root, reruns=1, corruptions_per_task=5, mutation=False).passed
