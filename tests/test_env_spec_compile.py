"""The spec compiler: deterministic bundles whose code is the fixed templates, tools in the
domain's words, every rule with a witness, difficulty measured by baselines, and `envgym check`
passing for every example spec (docs/ENV_SPEC.md)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from envgym.bundle import CODE_FILES, hash_bundle, load_bundle
from envgym.check import check_bundle
from envgym.envs.procedural_kit.local import LocalBundle, passed
from envgym.envs.procedural_kit.spec.compile import (
    GREEDY,
    SHALLOW,
    TEMPLATES,
    CompileError,
    cap_rows,
    compile_spec,
    greedy_outcomes,
)
from envgym.envs.procedural_kit.spec.validate import load_spec
from envgym.sandbox.runner import BundleRunner

EXAMPLES = (
    Path(__file__).resolve().parents[1] / "envgym" / "envs" / "procedural_kit" / "spec" / "examples"
)
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.json"))


def _spec(name: str):
    return load_spec(json.loads((EXAMPLES / f"{name}.json").read_text()))


@pytest.mark.timeout(120)
def test_same_seed_same_bundle_other_seed_other_bundle(tmp_path: Path) -> None:
    spec = _spec("library_loans")
    a = compile_spec(spec, tmp_path / "a", seed=3, n_tasks=3, difficulties=(1, 3, 5))
    b = compile_spec(spec, tmp_path / "b", seed=3, n_tasks=3, difficulties=(1, 3, 5))
    c = compile_spec(spec, tmp_path / "c", seed=4, n_tasks=3, difficulties=(1, 3, 5))
    assert hash_bundle(a) == hash_bundle(b)
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    assert hash_bundle(a) != hash_bundle(c)
    # the code is the fixed templates, byte for byte: nothing of the spec is pasted into it
    for file in CODE_FILES:
        assert (a / file).read_bytes() == (TEMPLATES / file).read_bytes()
    bundle = load_bundle(a)
    assert [t.difficulty for t in bundle.tasks] == [1, 3, 5]
    assert all(t.witnesses and t.baseline == GREEDY for t in bundle.tasks)


@pytest.mark.timeout(120)
def test_tools_are_typed_in_the_domains_words_and_refuse_bad_arguments(tmp_path: Path) -> None:
    root = compile_spec(_spec("clinic_appointments"), tmp_path / "b", seed=0, n_tasks=1)
    runner = BundleRunner(root, module_prefix="spec_test_", max_stdout_bytes=1000)
    loaded = runner.load({})
    assert loaded["ok"], loaded
    tools = {t["name"]: t for t in loaded["value"]["tools"]}
    assert {"book_slot", "search_slots", "slot_doctor", "visit_summary", "submit_result"} <= set(
        tools
    )
    slots = tools["search_slots"]["parameters"]["properties"]
    assert slots["mode"]["anyOf"][0]["enum"] == ["in_person", "video"]
    assert slots["max_fee"]["type"] == ["number", "null"]
    local = LocalBundle(root)
    with local.episode() as ep:
        some = ep.call_tool("search_slots", mode="video", max_fee=100.0)
        assert some and all(r["mode"] == "video" and r["fee"] <= 100 for r in some)
        with pytest.raises(TypeError, match="max_fee must be float, not str"):
            ep.call_tool("search_slots", max_fee="100")
        with pytest.raises(TypeError):
            ep.call_tool("search_slots", colour="red")
        # a value is a parameter, never SQL
        assert ep.call_tool("search_slots", doctor="x' OR '1'='1") == []
        with pytest.raises(KeyError, match="no appointment slot"):
            ep.call_tool("get_slot", slot_id="SL-0000")
        open_slot = ep.call_tool("search_slots", state="open")[0]["slot_id"]
        assert ep.call_tool("book_slot", slot_id=open_slot)["state"] == "booked"
        with pytest.raises(ValueError, match="is booked, not open"):
            ep.call_tool("book_slot", slot_id=open_slot)


@pytest.mark.timeout(120)
def test_a_hostile_tool_table_is_refused_at_import(tmp_path: Path) -> None:
    root = compile_spec(_spec("library_loans"), tmp_path / "b", seed=0, n_tasks=1)
    table = json.loads((root / "tools.json").read_text())
    table["tools"][0]["name"] = "x = __import__('os')"
    (root / "tools.json").write_text(json.dumps(table))
    with pytest.raises(ValueError, match="is not a plain identifier"):
        LocalBundle(root)
    table["tools"][0]["name"] = "sqlite"  # would shadow what tools.py uses
    (root / "tools.json").write_text(json.dumps(table))
    with pytest.raises(ValueError, match="clashes with a name of tools.py"):
        LocalBundle(root)


@pytest.mark.timeout(120)
def test_every_rule_has_a_witness_and_the_verdict_is_staged(tmp_path: Path) -> None:
    root = compile_spec(_spec("insurance_claims"), tmp_path / "b", seed=1, n_tasks=5)
    local = LocalBundle(root)
    for task in load_bundle(root).tasks:
        declared = task.metadata["declared_rules"]
        assert [w.rule for w in task.witnesses] == declared
        assert len(declared) == len(set(declared)) >= 4
        with local.episode() as ep:
            for w in task.witnesses:
                report = ep.verify(dict(w.submission), task.to_dict())
                assert [c["name"] for c in report["checks"] if not c["passed"]] == [w.rule]
            solved = ep.solve(task.to_dict())
            assert passed(ep.verify(solved.submission, task.to_dict()))
            # staged: an answer naming no row reports nothing past existence
            nothing = {task.metadata["target"]: "NOPE"}
            if task.metadata["report"]:
                nothing[task.metadata["report"]["field"]] = 0
            report = ep.verify({"answer_text": json.dumps(nothing)}, task.to_dict())
            assert [c["name"] for c in report["checks"]][-1].endswith("_exists")


def test_a_level_no_template_offers_is_named(tmp_path: Path) -> None:
    raw = json.loads((EXAMPLES / "library_loans.json").read_text())
    raw["tasks"] = [raw["tasks"][1]]  # members: levels 1-3 only
    with pytest.raises(CompileError, match="no task template of 'library_loans' offers level 4"):
        compile_spec(raw, tmp_path / "b", n_tasks=5)


@pytest.mark.timeout(300)
def test_difficulty_is_measured_by_baselines(tmp_path: Path) -> None:
    """Greedy (first row under the direct filters) and shallow (the objective over the row's own
    attribute conditions) answer every task; each is judged by the task's verifier."""
    rates: dict[str, dict[int, list[bool]]] = {
        GREEDY: defaultdict(list),
        SHALLOW: defaultdict(list),
    }
    for name in NAMES:
        for seed in (0,):
            root = compile_spec(_spec(name), tmp_path / f"{name}-{seed}", seed=seed, n_tasks=10)
            for solver, by_level in rates.items():
                for level, solved in greedy_outcomes(root, solver):
                    by_level[level].append(solved)
    share = {s: {lvl: sum(v) / len(v) for lvl, v in by.items()} for s, by in rates.items()}
    assert all(len(v) == 6 for v in rates[GREEDY].values())
    assert share[GREEDY][5] <= 0.2 and share[SHALLOW][5] <= 0.2
    assert max(share[GREEDY].values()) <= 0.25
    # the shallow baseline solves what has no relation to follow, and not what has
    assert share[SHALLOW][1] >= 0.9 and share[SHALLOW][2] >= 0.9
    assert share[SHALLOW][4] < share[SHALLOW][1] and share[SHALLOW][5] < share[SHALLOW][2]


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", NAMES)
def test_every_example_compiles_to_a_bundle_envgym_check_passes(tmp_path: Path, name: str) -> None:
    root = compile_spec(_spec(name), tmp_path / "b", seed=0, n_tasks=5)
    report = check_bundle(load_bundle(root), corruptions_per_task=10, reruns=2)
    problems = {t.task_id: t.problems for t in report.tasks if not t.passed}
    assert report.passed, problems
    assert all(t.rule_coverage == 1.0 for t in report.tasks)
    assert sorted(t.difficulty for t in report.tasks) == [1, 2, 3, 4, 5]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("name", "example"),
    [("Library Loans", "library loans"), ("clinic", "clinic appointments"),
     ("insurance-claims", "insurance claims")],
)  # fmt: skip
def test_synth_routes_the_example_categories_to_the_compiler(
    tmp_path: Path, name: str, example: str
) -> None:
    from envgym.synth_agents.categories import find_category

    category = find_category(name)
    assert category.name == example
    root = category.build(tmp_path / "b", 7, 2, (2, 5), None)
    bundle = load_bundle(root)
    assert bundle.manifest.category == example
    assert [t.difficulty for t in bundle.tasks] == [2, 5]


@pytest.mark.timeout(120)
def test_an_action_on_any_other_row_fails_the_action_check(tmp_path: Path) -> None:
    root = compile_spec(
        _spec("library_loans"), tmp_path / "b", seed=2, n_tasks=1, difficulties=(5,)
    )
    task = load_bundle(root).tasks[0].to_dict()
    action = task["metadata"]["action"]
    local = LocalBundle(root)
    with local.episode() as ep:
        gold = ep.solve(task).submission
        assert passed(ep.verify(gold, task))
        chosen = json.loads(gold["answer_text"])["book"]
        other = next(
            k for k, state in action["states"].items() if state == action["from"] and k != chosen
        )
        ep.call_tool(action["tool"], isbn=other)  # one more row moved: collateral
        failed = [c["name"] for c in ep.verify(gold, task)["checks"] if not c["passed"]]
        assert failed == [action["rule"]]
    with local.episode() as ep:  # the right answer without the action done
        failed = [c["name"] for c in ep.verify(gold, task)["checks"] if not c["passed"]]
        assert failed == [action["rule"]]


def _edited(raw: dict, rng) -> dict:
    """``raw`` with one random edit: a field dropped, a number or flag changed, a name swapped."""
    import copy

    out = copy.deepcopy(raw)
    spots: list[tuple[object, object]] = []
    stack: list[object] = [out]
    while stack:
        node = stack.pop()
        keys = (
            list(node)
            if isinstance(node, dict)
            else range(len(node))
            if isinstance(node, list)
            else []
        )
        for k in keys:
            spots.append((node, k))
            stack.append(node[k])
    node, key = rng.choice(spots)
    value = node[key]
    if rng.random() < 0.3:
        del node[key]
    elif isinstance(value, bool):
        node[key] = not value
    elif isinstance(value, (int, float)):
        node[key] = rng.choice([0, 1, 8, value * 3, -5])
    elif isinstance(value, str):
        node[key] = rng.choice([s for n, k in spots if isinstance(s := n[k], str)])
    return out


@pytest.mark.heavy  # about 35 s on the shared 2-core machine under load
@pytest.mark.timeout(600)
def test_an_edited_spec_is_refused_by_name_or_compiles(tmp_path: Path) -> None:
    """A spec one edit away from an example is refused (SpecError), compiles, or has no task of
    some level on its rows (UnsolvableTask): never a crash, never a bundle that fails its proof."""
    import random

    from envgym.envs.procedural_kit.build import UnsolvableTask
    from envgym.envs.procedural_kit.spec.validate import SpecError

    rng = random.Random(11)
    raws = [json.loads((EXAMPLES / f"{n}.json").read_text()) for n in NAMES]
    seen: dict[str, int] = defaultdict(int)
    for trial in range(20):
        raw = _edited(rng.choice(raws), rng)
        try:
            spec = load_spec(raw)
        except SpecError:
            seen["refused"] += 1
            continue
        try:
            compile_spec(spec, tmp_path / str(trial), seed=trial, n_tasks=1, difficulties=(5,))
            seen["compiled"] += 1
        except UnsolvableTask:
            seen["unsolvable"] += 1
    assert seen["refused"] and seen["compiled"], dict(seen)


@pytest.mark.timeout(300)
def test_a_capped_world_has_small_tables_and_still_checks(tmp_path: Path) -> None:
    """``max_rows`` (``envgym synth --max-rows``) caps the drawn tables (the near-miss rows each
    task plants come on top); every level still compiles to a bundle the full check passes;
    below the schema's 8 it is named."""
    import sqlite3

    def counts(root: Path) -> dict[str, int]:
        db = sqlite3.connect(root / "state" / "db.sqlite")
        try:
            return {e.name: db.execute(f'SELECT COUNT(*) FROM "{e.name}"').fetchone()[0]
                    for e in spec.entities}  # fmt: skip
        finally:
            db.close()

    spec = _spec("library_loans")
    big = counts(compile_spec(spec, tmp_path / "a", seed=0, n_tasks=5))
    root = compile_spec(spec, tmp_path / "b", seed=0, n_tasks=5, max_rows=10)
    small = counts(root)
    capped = cap_rows(spec, 10)
    assert [e.rows for e in capped.entities] == [min(e.rows, 10) for e in spec.entities]
    assert sum(small.values()) < sum(big.values()) / 2, (small, big)
    report = check_bundle(load_bundle(root), corruptions_per_task=10, reruns=2)
    assert report.passed, {t.task_id: t.problems for t in report.tasks if not t.passed}
    with pytest.raises(ValueError, match="max_rows must be at least 8, not 7"):
        compile_spec(spec, tmp_path / "c", seed=0, n_tasks=1, max_rows=7)


def test_max_rows_is_refused_by_name_for_a_fixed_family_before_any_job() -> None:
    from envgym.suite_manifest import SuiteError
    from envgym.synth_agents.procedural import ProceduralAgent
    from envgym.synth_agents.suite import SuiteConfig

    ProceduralAgent("newsroom", max_rows=10)  # a corpus domain: compiled from a spec
    with pytest.raises(ValueError, match="'retail orders' is a hand-written family"):
        ProceduralAgent("retail orders", max_rows=10)
    config = SuiteConfig(("newsroom", "trip planning"), per_category=1, max_rows=10)
    with pytest.raises(SuiteError, match="'trip planning' is a hand-written family"):
        config.check()
    with pytest.raises(SuiteError, match="at least 8, not 5"):
        SuiteConfig(("newsroom",), per_category=1, max_rows=5).check()


def test_the_specs_keyword_names_every_category_max_rows_applies_to() -> None:
    from envgym.synth_agents.categories import all_names, find_category
    from envgym.synth_agents.suite import SuiteConfig
    from envgym.synth_agents.suite_categories import read_categories

    specs = read_categories("specs")
    assert "newsroom" in specs and "library loans" in specs
    assert set(all_names()) - set(specs) == {
        "trip planning",
        "retail orders",
        "meeting scheduling",
        "shipment logistics",
    }
    assert all(find_category(n).spec_written for n in specs)
    SuiteConfig(specs, per_category=1, max_rows=10).check()  # every one accepts the cap
