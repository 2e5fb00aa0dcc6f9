"""F2P / P2P / P2F / flaky: what repeated test runs before and after the gold patch say.

Pure functions over ``{node id: outcome}`` maps (``envgym/envs/swe/junit.py``), so the rules have
exact unit tests.  The rules (docs/SWE.md, "Environment setup and validation"):

* a run's outcome for a test is reduced to a class: ``pass`` (passed), ``fail`` (failed or
  error), ``skip`` (skipped, xfail) or ``absent``.  An absent test whose file failed to collect in
  that run counts as ``fail``: a test_patch that imports a name the fix adds makes the whole
  module fail to import before the fix, which is the most common F2P shape;
* **flaky**: a test whose class differs between the repeats of one side (base or gold).  Flaky
  tests are listed and excluded from everything else;
* **F2P**: ``fail`` in every base run and ``pass`` in every gold run;
* **P2P**: ``pass`` in every run on both sides;
* **P2F**: ``pass`` in every base run and not ``pass`` in the gold runs (failed, errored,
  skipped or disappeared): any regression rejects the instance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envgym.envs.swe.junit import collection_errors

PASS, FAIL, SKIP, ABSENT = "pass", "fail", "skip", "absent"
_CLASS = {"passed": PASS, "failed": FAIL, "error": FAIL, "skipped": SKIP}


@dataclass(frozen=True)
class Classification:
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    pass_to_fail: tuple[str, ...]
    flaky: tuple[str, ...]


def outcome_class(test_id: str, outcomes: Mapping[str, str]) -> str:
    """One run's class for one test (see the module docstring)."""
    outcome = outcomes.get(test_id)
    if outcome is not None:
        return _CLASS.get(outcome, FAIL)  # an unknown outcome is never a pass
    module = test_id.split("::", 1)[0]
    return FAIL if module in collection_errors(outcomes) else ABSENT


def classify(
    base_runs: Sequence[Mapping[str, str]], gold_runs: Sequence[Mapping[str, str]]
) -> Classification:
    """Classify every test id seen in any run; ids are sorted in every output tuple."""
    if not base_runs or not gold_runs:
        raise ValueError("classify needs at least one base run and one gold run")
    tests = sorted({i for run in (*base_runs, *gold_runs) for i in run if "::" in i})
    f2p: list[str] = []
    p2p: list[str] = []
    p2f: list[str] = []
    flaky: list[str] = []
    for test in tests:
        base = {outcome_class(test, run) for run in base_runs}
        gold = {outcome_class(test, run) for run in gold_runs}
        if len(base) > 1 or len(gold) > 1:
            flaky.append(test)
            continue
        (before,), (after,) = base, gold
        if before == FAIL and after == PASS:
            f2p.append(test)
        elif before == PASS and after == PASS:
            p2p.append(test)
        elif before == PASS:
            p2f.append(test)
    return Classification(tuple(f2p), tuple(p2p), tuple(p2f), tuple(flaky))


def check_expected(
    found: Classification, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]
) -> str:
    """Why an instance's own FAIL_TO_PASS / PASS_TO_PASS lists disagree with the runs ('' if they agree)."""
    problems: list[str] = []
    for test in fail_to_pass:
        if test in found.flaky:
            problems.append(f"FAIL_TO_PASS test {test} is flaky")
        elif test not in found.fail_to_pass:
            problems.append(f"FAIL_TO_PASS test {test} does not flip from fail to pass")
    for test in pass_to_pass:
        if test in found.flaky:
            problems.append(f"PASS_TO_PASS test {test} is flaky")
        elif test not in found.pass_to_pass:
            problems.append(f"PASS_TO_PASS test {test} does not pass before and after")
    return "; ".join(problems)
