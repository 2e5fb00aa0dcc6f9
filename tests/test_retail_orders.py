"""Retail orders and returns: database, tools, tasks, verifier, strictness, envgym check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.bundle import load_bundle
from envgym.check import check_bundle
from envgym.envs.procedural_kit.build import UnsolvableTask, strictness_problem
from envgym.envs.procedural_kit.local import LocalBundle
from envgym.envs.retail_orders.build import build_bundle
from envgym.envs.retail_orders.data import write_db
from envgym.envs.retail_orders.tasks import basket_total

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle(tmp_path_factory.mktemp("retail") / "b", seed=3, n_tasks=5)


def failed(report: dict) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["passed"]}


def test_database_is_deterministic(tmp_path: Path) -> None:
    a, b, c = (
        write_db(tmp_path / f"{n}.sqlite", seed) for n, seed in (("a", 1), ("b", 1), ("c", 2))
    )
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    with pytest.raises(FileExistsError):
        write_db(a, 1)


def test_bundle_tasks_cycle_difficulties_and_kinds(bundle: Path) -> None:
    tasks = load_bundle(bundle).tasks
    assert [t.difficulty for t in tasks] == [1, 2, 3, 4, 5]
    assert [t.metadata["kind"] for t in tasks] == [
        "basket",
        "returns",
        "basket",
        "returns",
        "basket",
    ]
    assert [len(t.metadata["categories"]) for t in tasks if t.metadata["kind"] == "basket"] == [
        2,
        3,
        8,
    ]
    assert tasks[3].metadata["one_per_order"] and tasks[3].metadata["exclude_category"]


def test_basket_total_rounds_to_cents() -> None:
    assert basket_total([19, 20], 5) == 37.05
    assert basket_total([10, 10, 13], 10) == 29.7
    assert basket_total([7], 0) == 7.0


def test_tools_on_known_rows(bundle: Path) -> None:
    with LocalBundle(bundle).episode() as ep:
        assert ep.call_tool("days_between", start_date="2025-03-01", end_date="2025-03-15") == 14
        assert ep.call_tool("days_between", start_date="2025-03-15", end_date="2025-03-01") == -14
        assert ep.call_tool("get_tier_discount", tier="gold") == 10
        cats = ep.call_tool("list_categories")
        assert cats == sorted(cats) and "electronics" in cats
        prices = [p["price"] for p in ep.call_tool("list_products", category="books")]
        assert prices == sorted(prices)
        assert all(
            p["rating"] >= 4.0
            for p in ep.call_tool("list_products", category="toys", min_rating=4.0)
        )
        with pytest.raises(KeyError, match="no customer"):
            ep.ctx.run(ep.bundle.tool_functions["get_customer"], name="Nobody Here")
        with pytest.raises(KeyError, match="no category"):
            ep.call_tool("list_products", category="spaceships")


def test_verifier_names_each_broken_rule(bundle: Path) -> None:
    tasks = [t.to_dict() for t in load_bundle(bundle).tasks]
    with LocalBundle(bundle).episode() as ep:
        basket = tasks[2]
        gold = ep.solve(basket).submission
        answer = json.loads(gold["answer_text"])
        assert failed(ep.verify(gold, basket)) == set()
        swapped = dict(answer, skus=answer["skus"][::-1])
        assert "category_order" in failed(ep.verify({"answer_text": json.dumps(swapped)}, basket))
        off = dict(answer, total=round(answer["total"] + 0.01, 2))
        assert failed(ep.verify({"answer_text": json.dumps(off)}, basket)) == {"total_correct"}
        # an unreadable answer reports the parse check alone (no "not checked" failures)
        assert failed(ep.verify({"answer_text": "not json"}, basket)) == {"valid_json"}
        assert [c["name"] for c in ep.verify({"answer_text": "not json"}, basket)["checks"]] == [
            "valid_json"
        ]
        returns = tasks[3]
        gold = ep.solve(returns).submission
        answer = json.loads(gold["answer_text"])
        assert failed(ep.verify(gold, returns)) == set()
        doubled = dict(answer, returns=answer["returns"] * 2)
        # staged: a listed-twice line fails the first stage, so one_per_order is not reported
        assert failed(ep.verify({"answer_text": json.dumps(doubled)}, returns)) == {"no_duplicates"}
        bogus = dict(answer, returns=[{"order_id": "ORD-1", "sku": "XYZ-0000"}])
        assert failed(ep.verify({"answer_text": json.dumps(bogus)}, returns)) == {"line_exists"}


def test_strictness_gate_catches_a_lenient_verifier(bundle: Path, tmp_path: Path) -> None:
    task = load_bundle(bundle).tasks[0].to_dict()
    with LocalBundle(bundle).episode() as ep:
        assert strictness_problem(ep, task) is None
    lenient = tmp_path / "lenient"
    lenient.mkdir()
    for name in ("tools.py", "solution.py"):
        (lenient / name).write_text((bundle / name).read_text())
    (lenient / "state").mkdir()
    (lenient / "state" / "db.sqlite").write_bytes((bundle / "state" / "db.sqlite").read_bytes())
    (lenient / "verifier.py").write_text(
        "import json\n"
        "def verify_retail(submission, task):\n"
        "    ok = 'skus' in str(submission.get('answer_text'))\n"
        "    return {'checks': [{'name': 'has_skus', 'passed': ok, 'detail': ''}]}\n"
    )
    with LocalBundle(lenient).episode() as ep:
        assert strictness_problem(ep, task) == "verifier accepts a corrupted answer"


def test_build_options(tmp_path: Path) -> None:
    root = build_bundle(tmp_path / "one", seed=5, n_tasks=2, difficulties=(4,))
    assert [t.difficulty for t in load_bundle(root).tasks] == [4, 4]
    with pytest.raises(FileExistsError):
        build_bundle(root, seed=5)
    with pytest.raises(ValueError, match="difficulties"):
        build_bundle(tmp_path / "bad", difficulties=(0,))
    with pytest.raises(ValueError, match="at least one task"):
        build_bundle(tmp_path / "none", n_tasks=0)
    assert issubclass(UnsolvableTask, RuntimeError)


def test_envgym_check_passes_in_the_sandbox(bundle: Path, require_backend) -> None:
    require_backend("bwrap")
    report = check_bundle(load_bundle(bundle), sandbox="bwrap")
    assert report.passed, report.to_dict()
    assert all(t.rejection_rate == 1.0 for t in report.tasks)
