"""Per-rule witnesses and greedy baselines for procedural tasks (issue 9, shared contract).

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


def failed_checks(report: dict[str, Any]) -> list[str]:
    return [c["name"] for c in report["checks"] if not c["passed"]]


def generic_candidates() -> Iterator[tuple[Submission, str]]:
    """Format breaks every answer_text family shares (the parse check's witness)."""
    yield {"answer_text": "{not json"}, "answer_text is not JSON"
    yield {"answer_text": "[]"}, "answer_text is JSON but not the object the task asks for"


def find_witnesses(verify: Verify, rules: list[str],
                   candidates: Iterable[tuple[Submission, str]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Witnesses (tasks.jsonl form) for ``rules``, in rule order, and the rules left without one."""
    found: dict[str, dict[str, Any]] = {}
    for submission, note in candidates:
        failed = failed_checks(verify(submission))
        if len(failed) == 1 and failed[0] in rules and failed[0] not in found:
            found[failed[0]] = {"rule": failed[0], "submission": submission, "note": note}
            if len(found) == len(rules):
                break
    return [found[r] for r in rules if r in found], [r for r in rules if r not in found]
