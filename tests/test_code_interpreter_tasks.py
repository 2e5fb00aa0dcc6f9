"""Task families of the code interpreter: reasoning-gym generators with reference programs,
data-science tasks over generated files, bundles that pass ``envgym check``."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from envgym import registry
from envgym.bundle import load_bundle
from envgym.check import check_bundle
from envgym.envs.code_interpreter import data_tasks, reasoning
from envgym.envs.code_interpreter.build import build_bundle
from envgym.envs.code_interpreter.registration import register_envs

pytestmark = pytest.mark.timeout(300)


def test_reasoning_tasks_are_deterministic_and_difficulty_changes_the_generator() -> None:
    a = reasoning.generate("math", seed=3, per_generator=1, difficulties=(1, 5))
    b = reasoning.generate("math", seed=3, per_generator=1, difficulties=(1, 5))
    assert [t.task for t in a] == [t.task for t in b]
    assert {t.task["metadata"]["generator"] for t in a} == set(reasoning.generators("math"))
    primes = {
        t.task["difficulty"]: t.task for t in a if t.task["metadata"]["generator"] == "count_primes"
    }
    assert len(primes[1]["prompt"]) <= len(primes[5]["prompt"])
    # curriculum level 0 draws n <= 1000, level 4 up to 100000
    hi = lambda task: int(task["prompt"].split(" and ")[1].split()[0])  # noqa: E731
    assert hi(primes[1]) <= 1000 < hi(primes[5])


def test_every_generated_task_checks_against_reasoning_gym() -> None:
    from reasoning_gym.factory import get_score_answer_fn

    made = reasoning.generate("logic", seed=1, per_generator=1, difficulties=(2,))
    assert len(made) == len(reasoning.generators("logic"))
    tools = reasoning.bundle_module("tools")
    for item in made:
        task, meta = item.task, item.task["metadata"]
        # reasoning-gym's entry rebuilt from the seed stored with the task, not from generate()
        entry = reasoning.regenerate(task)
        assert task["prompt"] == entry["question"].strip(), task["id"]
        assert meta["answer"] == str(entry["answer"]), task["id"]
        printed = tools.python(meta["reference_code"]).strip()
        assert get_score_answer_fn(meta["generator"])(answer=printed, entry=entry) == 1.0, (
            task["id"],
            printed,
        )


# reasoning-gym's basic_arithmetic entry 0 at level 3 for this seed is wrong: "Calculate
# ( 8 / -( -9 - 7 + -15 ) )." with answer 0 (the value is 8/31).
WRONG_ENTRY_SEED = 3408567701406964553


def test_a_generator_entry_with_a_wrong_answer_key_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reasoning, "generators", lambda family: ["basic_arithmetic"])
    monkeypatch.setattr(reasoning, "task_seed", lambda seed, name, difficulty: WRONG_ENTRY_SEED)
    [made] = reasoning.generate("math", per_generator=1, difficulties=(3,))
    meta = made.task["metadata"]
    assert (meta["rg_seed"], meta["rg_index"]) == (WRONG_ENTRY_SEED, 1)  # draw 0 skipped
    assert made.task["id"] == "math-basic-arithmetic-d3-0"
    assert reasoning.regenerate(made.task)["answer"] == meta["answer"]


def test_a_reference_program_wrong_on_every_draw_fails_the_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reasoning, "generators", lambda family: ["basic_arithmetic"])
    name, (fam, kind, extra, _) = "basic_arithmetic", reasoning.PROGRAMS["basic_arithmetic"]
    monkeypatch.setitem(reasoning.PROGRAMS, name, (fam, kind, extra, lambda m: "print(987654321)"))
    with pytest.raises(RuntimeError, match="reference program disagreed.*987654321"):
        reasoning.generate("math", seed=1, per_generator=1, difficulties=(2,))


def test_task_seeds_are_secret_and_cannot_be_recomputed_from_what_the_agent_sees() -> None:
    """Before, a cell that knew the generator regenerated a task from seed*1000+difficulty."""
    from reasoning_gym.factory import DATASETS

    a = reasoning.generate("math", per_generator=1, difficulties=(1,))
    b = reasoning.generate("math", per_generator=1, difficulties=(1,))
    assert [t.task["id"] for t in a] == [
        t.task["id"] for t in b
    ]  # same ids, generators, difficulty
    seeds = [t.task["metadata"]["rg_seed"] for t in a + b]
    assert len(set(seeds)) == len(seeds)  # drawn per build, not a function of id/index/difficulty
    assert sum(x.task["prompt"] != y.task["prompt"] for x, y in zip(a, b)) >= len(a) // 2
    for item in a:
        assert str(item.task["metadata"]["rg_seed"]) not in item.task["prompt"]
    # The attack: regenerate with the conventional seeds (build seeds 0..49 under the old
    # seed*1000+difficulty scheme, and every small integer).  Level-1 generators have only a few
    # hundred distinct questions, so a candidate can reproduce a prompt by chance; what must not
    # happen is a candidate reproducing the task's whole *stream* (its entry and the next ones).
    candidates = sorted({s * 1000 + 1 for s in range(50)} | set(range(200)))
    for name in ("basic_arithmetic", "count_primes"):
        task = next(t.task for t in a if t.task["metadata"]["generator"] == name)
        meta = task["metadata"]
        assert meta["rg_seed"] not in candidates and meta["rg_seed"] >= 2**32
        stream = [
            e["question"]
            for e in DATASETS[name][0](
                config=reasoning._config(name, 1, seed=meta["rg_seed"], size=meta["rg_index"] + 6)
            )
        ]
        assert (
            stream[meta["rg_index"]].strip() == task["prompt"]
        )  # the stored seed does regenerate it
        for candidate in candidates:
            guess = [
                e["question"]
                for e in DATASETS[name][0](
                    config=reasoning._config(name, 1, seed=candidate, size=meta["rg_index"] + 6)
                )
            ]
            assert guess != stream, (name, candidate)


def test_unknown_family_and_difficulty_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown reasoning family 'poetry'; known: math, logic"):
        reasoning.generate("poetry")
    with pytest.raises(ValueError, match="difficulty must be 1..5, got 7"):
        reasoning.generate("math", difficulties=(7,))
    with pytest.raises(ValueError, match="families must be a non-empty subset"):
        build_bundle(tmp_path / "b", families=("poetry",))


def test_data_answers_match_an_independent_computation(tmp_path: Path) -> None:
    tasks = {t["id"]: t for t in data_tasks.generate(tmp_path, seed=0, per_template=1)}
    rows = list(csv.DictReader(open(tmp_path / "sales.csv")))
    task = tasks["data-orders-in-region-0"]
    region = task["prompt"].split(" the ")[1].split(" region")[0]
    assert int(task["metadata"]["answer"]) == sum(r["region"] == region for r in rows)
    median_task = tasks["data-median-monthly-revenue-0"]
    region = median_task["prompt"].split("For the ")[1].split(" region")[0]
    months = [0.0] * 12
    for r in rows:
        if r["region"] == region:
            months[int(r["date"][5:7]) - 1] += int(r["units"]) * float(r["unit_price"])
    assert abs(float(median_task["metadata"]["answer"]) - statistics.median(months)) <= 0.005
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sales.csv",
        "staff.sqlite",
        "weather.csv",
    ]


def test_each_family_bundle_passes_envgym_check(tmp_path: Path) -> None:
    for family in ("math", "logic", "data"):
        bundle_dir = build_bundle(
            tmp_path / family, families=(family,), seed=2, difficulties=(1, 3)
        )
        report = check_bundle(load_bundle(bundle_dir), reruns=2)
        assert report.passed, [t.problems for t in report.tasks if not t.passed]
        lines = [json.loads(x) for x in (bundle_dir / "tasks.jsonl").read_text().splitlines()]
        assert {t["metadata"]["family"] for t in lines} == {family}


def _check_failures(output: str) -> str:
    """What made ``envgym check --json`` fail: the report minus its passing tasks."""
    try:
        report = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return output[-3000:]
    failing = [t for t in report.get("tasks", []) if not t.get("passed")]
    rest = {k: v for k, v in report.items() if k != "tasks"}
    return json.dumps({**rest, "failing_tasks": failing})[-6000:]


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_envgym_check_code_interpreter_v0_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from envgym.cli import app

    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
    register_envs()
    result = CliRunner().invoke(app, ["check", "code-interpreter-v0", "--json"])
    assert result.exit_code == 0, _check_failures(result.output)
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["passed"] and len(report["tasks"]) >= 100
    assert registry.resolve_bundle("code-interpreter-v0").is_relative_to(tmp_path / "cache")


def test_draws_whose_answer_is_in_the_prompt_are_degenerate() -> None:
    from envgym.envs.code_interpreter.reasoning import _answer_in_prompt, bundle_module

    verifier = bundle_module("verifier")

    def task(prompt: str, answer: str, kind: str) -> dict:
        return {"id": "t", "prompt": prompt, "metadata": {"answer": answer, "answer_kind": kind}}

    # reasoning-gym drew these: the answer is already written in the question.
    assert _answer_in_prompt(
        task("Simplify the fraction $1/6$ to its lowest terms.", "$1/6$", "reduced_fraction"),
        verifier,
    )
    assert _answer_in_prompt(
        task("Simplify this expression: 8428*x**3\nUse ** for powers.", "8428*x**3", "expression"),
        verifier,
    )
    # reasoning-gym's polynomial generator can draw the zero polynomial: "Simplify this
    # expression: 0", whose answer is the bare constant it shows.
    assert _answer_in_prompt(
        task("Simplify this expression: 0\nUse ** instead of ^ for powers.", "0", "expression"),
        verifier,
    )
    # A real question: the answer has to be computed.
    assert not _answer_in_prompt(
        task("Simplify the fraction $20/82$ to its lowest terms.", "$10/41$", "reduced_fraction"),
        verifier,
    )
    assert not _answer_in_prompt(
        task("Simplify this expression: (4*x**2)*(2107*x)", "8428*x**3", "expression"), verifier
    )
    # A bare number that happens to occur in the prompt is not a gift (the policy cannot know which).
    assert not _answer_in_prompt(
        task("How many 1 bits does 7 have? Answer with a number such as 3.", "3", "number"),
        verifier,
    )
