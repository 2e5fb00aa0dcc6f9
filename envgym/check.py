"""``envgym check``: is every task of a bundle solvable, and is its verifier strict?

For each task, in the sandbox (docs/CHECK.md):
1. the gold solution runs (calling only tools), submits, and its submission passes the verifier;
   ``reruns`` runs agree on the submission and the verdict;
2. on the state the gold run left: random single-field corruptions are rejected
   (≥ ``min_rejection``), and every generic exploit (``envgym.adversarial``) is rejected, or,
   where it is the gold answer in another form, accepted or rejected;
3. on fresh state: every rule the task declares (``envgym.check_rules``: its generator's
   constraints and its witnesses, known independently of the verifier) is reported by the gold
   verdict, and every rule declared or reported has a per-rule witness, a submission whose
   verdict fails exactly that rule (declared in tasks.jsonl, or found among the corruptions);
   the empty submission and the no-op are rejected;
4. the task's greedy ``baseline`` (if any) runs and its solve rate is reported per difficulty.

A verifier that raises, crashes, times out or returns a malformed report fails the task: a
broken verifier is never read as a rejection.  Any problem found fails the task: a problem is
never a mere note (a witness whose rule the verifier stopped reporting was once only noted, and
the task passed while its verifier paid answers breaking that rule).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from envgym.adversarial import exploits
from envgym.bundle import Bundle, Task
from envgym.check_rules import declared_rules
from envgym.corrupt import corruptions
from envgym.sandbox import Limits, Sandbox, SolveOutcome, open_sandbox
from envgym.state import EpisodeDirs
from envgym.verdict import Verdict


@dataclass(frozen=True)
class TaskCheck:
    task_id: str
    difficulty: int
    gold_passed: bool
    noop_rejected: bool
    corruptions_tried: int
    corruptions_rejected: int
    reruns_agree: bool
    tool_calls: int  # by the gold solution
    problems: tuple[str, ...] = ()
    min_rejection: float = 0.95
    rules: tuple[str, ...] = ()  # the check names the gold verdict reports
    rules_covered: tuple[str, ...] = ()  # rules with a valid per-rule witness
    # the rules the task declares independently of the verifier (envgym.check_rules)
    declared_rules: tuple[str, ...] = ()
    witnesses_declared: int = 0
    witnesses_valid: int = 0
    exploits_tried: int = 0
    exploits_rejected: int = 0  # including gold-form exploits the verifier rejected
    exploits_failed: tuple[str, ...] = ()  # names of exploits accepted although not the gold
    verifier_errors: int = 0  # verdicts that were crashes/timeouts/malformed reports
    baseline_solved: bool | None = None  # None: the task names no baseline

    @property
    def rejection_rate(self) -> float:
        return self.corruptions_rejected / self.corruptions_tried if self.corruptions_tried else 0.0

    @property
    def required_rules(self) -> tuple[str, ...]:
        """Every rule that needs a witness: declared by the task or reported by the verifier."""
        return tuple(dict.fromkeys(self.declared_rules + self.rules))

    @property
    def rule_coverage(self) -> float:
        required = self.required_rules
        return len(set(self.rules_covered) & set(required)) / len(required) if required else 0.0

    @property
    def passed(self) -> bool:
        return (
            self.gold_passed
            and self.noop_rejected
            and self.reruns_agree
            and self.corruptions_tried > 0
            and self.rejection_rate >= self.min_rejection
            and self.rule_coverage == 1.0
            and not self.exploits_failed
            and self.verifier_errors == 0
            and not self.problems
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "rejection_rate": self.rejection_rate,
            "rule_coverage": self.rule_coverage,
            "required_rules": list(self.required_rules),
            "passed": self.passed,
        }


@dataclass(frozen=True)
class CheckReport:
    bundle: str
    content_hash: str
    tasks: tuple[TaskCheck, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return bool(self.tasks) and all(t.passed for t in self.tasks)

    def baseline(self) -> dict[str, Any]:
        """Greedy-baseline solve rate per difficulty (tasks that name a baseline only)."""
        levels: dict[int, list[bool]] = {}
        for t in self.tasks:
            if t.baseline_solved is not None:
                levels.setdefault(t.difficulty, []).append(t.baseline_solved)
        by = {
            str(d): {"tasks": len(v), "solved": sum(v), "rate": sum(v) / len(v)}
            for d, v in sorted(levels.items())
        }
        rates = [row["rate"] for row in by.values()]
        return {
            "by_difficulty": by,
            # "Falls with level": never rises from one level to the next, and the top is below the bottom.
            "falls_with_level": len(rates) > 1
            and all(b <= a for a, b in zip(rates, rates[1:]))
            and rates[-1] < rates[0],
            "top_level_rate": rates[-1] if rates else None,
        }

    def to_dict(self) -> dict[str, Any]:
        covered = sum(len(set(t.rules_covered) & set(t.required_rules)) for t in self.tasks)
        rules = sum(len(t.required_rules) for t in self.tasks)
        return {
            "bundle": self.bundle,
            "content_hash": self.content_hash,
            "passed": self.passed,
            "rule_coverage": covered / rules if rules else 0.0,
            "exploits": {
                "tried": sum(t.exploits_tried for t in self.tasks),
                "failed": sum(len(t.exploits_failed) for t in self.tasks),
            },
            "verifier_errors": sum(t.verifier_errors for t in self.tasks),
            "baseline": self.baseline(),
            "tasks": [t.to_dict() for t in self.tasks],
        }


class CheckRunner:
    """One sandbox plus scratch state directories, shared by every check of one bundle.

    Synthesis validation uses it too, so a candidate bundle costs one sandbox, not three.
    """

    def __init__(self, bundle: Bundle, sandbox: Sandbox) -> None:
        self.bundle = bundle
        self.sandbox = sandbox
        self.dirs = EpisodeDirs(bundle.state_dir)
        self._schemas: dict[str, Mapping[str, Any]] | None = None

    def fresh_state(self) -> None:
        self.sandbox.reset(self.dirs.refill())

    def verify(self, task: Task, submission: dict[str, Any]) -> Verdict:
        """The verdict on ``submission``; a verifier fault is a verdict with ``error`` set."""
        try:
            outcome = self.sandbox.verify(task.verifier, submission, task.to_dict())
        except (ValueError, TypeError, RecursionError, OverflowError) as exc:  # not sendable
            return Verdict.broken("submission_unsendable", f"{type(exc).__name__}: {exc}")
        if not outcome.ok:
            error = outcome.error.value if outcome.error is not None else "error"
            return Verdict.broken("verifier_error", f"{error}: {outcome.message[:300]}")
        return Verdict.from_report(outcome.value)

    def solve(self, task: Task, function: str) -> SolveOutcome:
        return self.sandbox.solve(function, task.to_dict(), task.submit_tool)

    def submit_schema(self, task: Task) -> Mapping[str, Any]:
        if self._schemas is None:
            self._schemas = {t.name: t.parameters for t in self.sandbox.describe_tools()}
        return self._schemas.get(task.submit_tool or "", {})

    def close(self) -> None:
        self.dirs.cleanup()


def run_baseline(
    runner: CheckRunner,
    task: Task,
    solver: str,
    judge: Callable[[dict[str, Any]], Verdict] | None = None,
) -> bool:
    """Whether ``solver`` (a function of solution.py), run on fresh state, submits an answer
    the task's verifier passes (``judge``: how the caller has verdicts taken, so a check can
    count a verifier fault); a crash, a timeout or a broken verdict is not a solve."""
    runner.fresh_state()
    attempt = runner.solve(task, solver)
    if not attempt.outcome.ok or attempt.submission is None:
        return False
    verdict = (judge or (lambda sub: runner.verify(task, sub)))(attempt.submission)
    return verdict.error is None and verdict.passed


def check_task(
    runner: CheckRunner,
    task: Task,
    *,
    n_corruptions: int,
    reruns: int,
    rng: random.Random,
    min_rejection: float,
    derive_witnesses: bool = True,
    adversarial: bool = True,
) -> TaskCheck:
    problems: list[str] = []
    errors: list[str] = []

    def verify(submission: dict[str, Any], what: str) -> Verdict:
        verdict = runner.verify(task, submission)
        if verdict.error is not None:
            errors.append(f"{what}: {verdict.error}")
        return verdict

    runs: list[tuple[str, Verdict]] = []
    gold: dict[str, Any] | None = None
    tool_calls = 0
    for _ in range(max(1, reruns)):
        runner.fresh_state()
        solved = runner.solve(task, task.solution)
        if not solved.outcome.ok:
            problems.append(f"gold solution failed: {solved.outcome.message}")
            break
        if solved.submission is None:
            problems.append(f"gold solution never called {task.submit_tool}")
            break
        tool_calls = len(solved.calls)
        verdict = verify(solved.submission, "gold")
        runs.append((json.dumps(solved.submission, sort_keys=True), verdict))
        gold = solved.submission
    gold_passed = bool(runs) and all(v.passed for _, v in runs)
    if runs and not gold_passed:
        failed = next(v for _, v in runs if not v.passed).failed
        problems.append("gold rejected: " + "; ".join(f"{c.name}: {c.detail}" for c in failed[:3]))
    reruns_agree = len(runs) == max(1, reruns) and len({(s, v.passed) for s, v in runs}) == 1
    rules = tuple(c.name for c in runs[-1][1].checks) if gold_passed else ()
    declared, declared_problem = declared_rules(
        task.metadata, tuple(w.rule for w in task.witnesses)
    )
    if declared_problem is not None:
        problems.append(declared_problem)
    if gold_passed:
        for rule in declared:
            if rule not in rules:
                problems.append(
                    f"rule {rule!r} is declared by the task but the gold verdict does not "
                    "report it (the verifier does not check it)"
                )

    # Against the state the gold run left: only the answer differs from the gold.
    tried = rejected = 0
    derived: dict[str, str] = {}
    if gold is not None:
        for i, bad in enumerate(corruptions(gold, n_corruptions, rng)):
            tried += 1
            verdict = verify(bad, f"corruption {i}")
            rejected += not verdict.passed and verdict.error is None
            if verdict.error is None and len(verdict.failed_names) == 1:
                derived.setdefault(next(iter(verdict.failed_names)), f"corruption {i}")
        if tried and rejected / tried < min_rejection:
            problems.append(f"verifier accepted {tried - rejected}/{tried} corrupted answers")
    ex_tried = ex_rejected = 0
    ex_failed: list[str] = []
    if gold is not None and adversarial:
        for ex in exploits(task.prompt, gold, argument_schema=runner.submit_schema(task)):
            ex_tried += 1
            verdict = verify(ex.submission, f"exploit {ex.name}")
            ex_rejected += not verdict.passed
            if verdict.error is None and len(verdict.failed_names) == 1:
                derived.setdefault(next(iter(verdict.failed_names)), f"exploit {ex.name}")
            if verdict.passed and not ex.gold_form:
                ex_failed.append(ex.name)
        if ex_failed:
            problems.append(
                f"verifier accepted {len(ex_failed)} exploits: " + ", ".join(ex_failed[:5])
            )

    # Per-rule witnesses, each on fresh state.
    covered: set[str] = set()
    valid = 0
    for i, w in enumerate(task.witnesses):
        runner.fresh_state()
        verdict = verify(dict(w.submission), f"witness {i} ({w.rule})")
        if verdict.error is not None:
            continue
        if w.rule not in rules:
            problems.append(f"witness {i}: rule {w.rule!r} is not a check the gold verdict reports")
        elif verdict.passed:
            problems.append(f"witness {i} ({w.rule}): accepted, so the rule is not enforced")
        elif verdict.failed_names != {w.rule}:
            problems.append(
                f"witness {i} ({w.rule}): fails {sorted(verdict.failed_names)}, not only {w.rule}"
            )
        else:
            covered.add(w.rule)
            valid += 1
    if derive_witnesses:
        covered |= {r for r in derived if r in rules}
    for rule in rules:
        if rule not in covered:
            problems.append(f"rule {rule!r} has no witness (no submission fails only it)")
    covered &= set(rules)  # a witness can only cover a rule the verdict reports

    runner.fresh_state()
    blank = {k: "" for k in gold} if gold else {"content": ""}
    noop_rejected = not verify({}, "no-op").passed and not verify(blank, "blank").passed
    if not noop_rejected:
        problems.append("verifier accepted an empty submission")

    baseline_solved: bool | None = None
    if task.baseline is not None:
        baseline_solved = run_baseline(
            runner, task, task.baseline, lambda sub: verify(sub, "baseline")
        )
    if errors:
        problems.append(f"verifier broke on {len(errors)} submissions: " + "; ".join(errors[:3]))
    return TaskCheck(
        task_id=task.id,
        difficulty=task.difficulty,
        gold_passed=gold_passed,
        noop_rejected=noop_rejected,
        corruptions_tried=tried,
        corruptions_rejected=rejected,
        reruns_agree=reruns_agree,
        tool_calls=tool_calls,
        problems=tuple(problems),
        min_rejection=min_rejection,
        rules=rules,
        rules_covered=tuple(r for r in rules if r in covered),
        declared_rules=declared,
        witnesses_declared=len(task.witnesses),
        witnesses_valid=valid,
        exploits_tried=ex_tried,
        exploits_rejected=ex_rejected,
        exploits_failed=tuple(ex_failed),
        verifier_errors=len(errors),
        baseline_solved=baseline_solved,
    )


def check_bundle(
    bundle: Bundle,
    *,
    sandbox: str | Sandbox = "bwrap",
    corruptions_per_task: int = 20,
    reruns: int = 3,
    seed: int = 0,
    min_rejection: float = 0.95,
    limits: Limits | None = None,
    derive_witnesses: bool = True,
    adversarial: bool = True,
) -> CheckReport:
    """Check every task of ``bundle``; see the module docstring.

    ``derive_witnesses=False`` counts declared witnesses only (synthesis validation: a bundle
    must bring its own); ``adversarial=False`` skips the generic exploits.
    """
    box = (
        sandbox
        if isinstance(sandbox, Sandbox)
        else open_sandbox(bundle.root, backend=sandbox, limits=limits)
    )
    runner = CheckRunner(bundle, box)
    rng = random.Random(seed)
    try:
        box.describe_tools()  # a tools.py that does not import fails here, naming the file
        results = tuple(
            check_task(
                runner,
                t,
                n_corruptions=corruptions_per_task,
                reruns=reruns,
                rng=rng,
                min_rejection=min_rejection,
                derive_witnesses=derive_witnesses,
                adversarial=adversarial,
            )
            for t in bundle.tasks
        )
    finally:
        runner.close()
        if not isinstance(sandbox, Sandbox):
            box.close()
    return CheckReport(
        bundle=bundle.manifest.name, content_hash=bundle.manifest.content_hash, tasks=results
    )


_Runner = CheckRunner  # the old private name, kept for callers written before it was public
