"""Single-field corruptions and verifier-report parsing, with exact expectations."""

from __future__ import annotations

import json
import random

from envgym.corrupt import corruptions
from envgym.verdict import Verdict

PLAN = [
    {"time": "2025-10-01", "city": "Hangzhou", "hotel": "H1"},
    {"time": "2025-10-02", "city": "Suzhou", "hotel": "H2"},
]


def _diff_count(a: object, b: object) -> int:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        return sum(_diff_count(a.get(k, "<missing>"), b.get(k, "<missing>")) for k in keys)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return sum(_diff_count(x, y) for x, y in zip(a, b))
    return int(a != b)


def test_corruptions_change_exactly_one_field_inside_json_strings() -> None:
    gold = {"answer_text": json.dumps(PLAN)}
    bad = corruptions(gold, 50, random.Random(0))
    assert len(bad) >= 10
    assert len({json.dumps(b, sort_keys=True) for b in bad}) == len(bad)  # distinct
    for b in bad:
        assert b != gold
        plan = json.loads(b["answer_text"])
        assert _diff_count(PLAN, plan) == 1


def test_corruption_kinds_present() -> None:
    gold = {"answer_text": json.dumps(PLAN)}
    plans = [json.loads(b["answer_text"]) for b in corruptions(gold, 100, random.Random(1))]
    assert any(p[0]["hotel"] == "H2" for p in plans)  # swapped with a sibling's value
    assert any(p[1]["time"] == "2025-10-03" for p in plans)  # a date moved by a day
    assert any("hotel" not in p[0] for p in plans)  # a field dropped
    assert any(
        p[0].get("city") == "Hangzhou (unverified)" for p in plans
    )  # a name that does not exist


def test_corruptions_are_seeded() -> None:
    gold = {"a": 1, "b": "x"}
    assert corruptions(gold, 5, random.Random(3)) == corruptions(gold, 5, random.Random(3))
    assert {"a": 2, "b": "x"} in corruptions(gold, 10, random.Random(3))


def test_verdict_from_good_report() -> None:
    v = Verdict.from_report(
        {"checks": [{"name": "a", "passed": True}, {"name": "b", "passed": False, "detail": "why"}]}
    )
    assert not v.passed
    assert v.score == 0.5
    assert v.components() == {"a": 1.0, "b": 0.0}
    assert [c.detail for c in v.failed] == ["why"]


def test_verdict_malformed_reports_fail_closed() -> None:
    for report in (
        None,
        True,
        {"checks": "yes"},
        {"checks": []},
        {"checks": [1]},
        {"checks": [{"passed": True}]},
    ):
        v = Verdict.from_report(report)
        assert not v.passed
        assert v.checks[0].name == "verifier_output"
    # "passed" must be exactly True: truthy strings do not pass
    assert not Verdict.from_report({"checks": [{"name": "a", "passed": "yes"}]}).passed
