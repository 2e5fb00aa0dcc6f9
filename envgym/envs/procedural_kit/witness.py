"""Per-rule witnesses and greedy baselines for procedural tasks (docs/CHECK.md).

A witness for rule R is a submission whose verdict fails exactly R (every other reported check
passes).  They are *found*, never assumed: a category proposes candidates built from the task's
constraints (one item swapped, one start time moved, one route replaced ...), each candidate is
run through the bundle's own verifier here, in process, and the first one that fails exactly one
not-yet-covered rule becomes that rule's witness.  A task with a rule no candidate isolates is
thrown away by the kit, so every task written has full rule coverage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

Submission = dict[str, Any]
Verify = Callable[[Submission], dict[str, Any]]  # submission -> verifier report
# A category's candidate source: (world, task, gold submission) -> (submission, why) pairs.
Candidates = Callable[[Any, dict[str, Any], Submission], Iterable[tuple[Submission, str]]]
# Condition probes: (world, task, gold) -> (submission, why, condition) triples.  One witness per
# rule cannot see a rule that lost one of its conditions (a route check that no longer looks at
# lane joins still rejects a route that ends elsewhere) or a threshold moved a little (a total
# tolerance of 0.05 instead of 0.005 still rejects a total $1 off): a probe per condition and per
# boundary does.  ``condition`` is ``"<rule>:<what>"``; the first probe of a condition whose verdict
# fails exactly that rule is kept.
ConditionCandidates = Callable[
    [Any, dict[str, Any], Submission], Iterable[tuple[Submission, str, str]]
]
MAX_CONDITION_WITNESSES = 32  # per task: each one costs a verifier run in every envgym check


def failed_checks(report: dict[str, Any]) -> list[str]:
    return [c["name"] for c in report["checks"] if not c["passed"]]


def generic_candidates() -> Iterator[tuple[Submission, str]]:
    """Format breaks every answer_text family shares (the parse check's witness)."""
    yield {"answer_text": "{not json"}, "answer_text is not JSON"
    yield {"answer_text": "[]"}, "answer_text is JSON but not the object the task asks for"


def find_witnesses(
    verify: Verify, rules: list[str], candidates: Iterable[tuple[Submission, str]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Witnesses (tasks.jsonl form) for ``rules``, in rule order, and the rules left without one."""
    found: dict[str, dict[str, Any]] = {}
    for submission, note in candidates:
        failed = failed_checks(verify(submission))
        if len(failed) == 1 and failed[0] in rules and failed[0] not in found:
            found[failed[0]] = {"rule": failed[0], "submission": submission, "note": note}
            if len(found) == len(rules):
                break
    return [found[r] for r in rules if r in found], [r for r in rules if r not in found]


def condition_witnesses(
    verify: Verify, rules: list[str], probes: Iterable[tuple[Submission, str, str]]
) -> list[dict[str, Any]]:
    """Extra witnesses, one per probed condition: its first probe whose verdict fails exactly the
    condition's rule.

    A probe that fails other rules too (or none: the condition cannot be broken alone by it) is
    passed over; the ones kept are proved against the original verifier, so a weakened
    verifier that accepts one fails ``envgym check``.
    """
    kept: dict[str, dict[str, Any]] = {}
    for submission, note, condition in probes:
        rule = condition.split(":", 1)[0]
        if condition in kept or rule not in rules:
            continue
        if failed_checks(verify(submission)) == [rule]:
            kept[condition] = {
                "rule": rule,
                "submission": submission,
                "note": f"{note} [{condition}]",
            }
            if len(kept) >= MAX_CONDITION_WITNESSES:
                break
    return list(kept.values())
