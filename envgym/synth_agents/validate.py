"""Validation of every bundle, whatever made it (procedural generator or LLM agent).

One call, :func:`validate_bundle`, runs these in order (1 and 2 stop it at the first failure):

1. ``load_bundle``: files, JSON schemas, content hash, parseable code, typed tools;
2. the static solution rules (:mod:`envgym.synth_agents.solution_rules`): imports, forbidden names,
   dunders, reflection — the solution may only call tools and compute;
3. ``envgym.check.check_bundle`` in a bwrap sandbox: the gold passes in the sandbox, the
   no-op and the empty submission are rejected, ≥ 95% of single-field corruptions are
   rejected, three reruns agree;
4. the dynamic isolation check (:mod:`envgym.synth_agents.isolation`): the gold run with the state
   reachable only through tools;
5. the provenance checks (:mod:`envgym.synth_agents.provenance`), in the same sandbox: the gold
   answer comes from tool results (not from task metadata the agent never sees), and the verifier
   judges against the data (not against the metadata alone);
6. the tool probe (:mod:`envgym.synth_agents.tool_probe`), in the isolation check's sandbox: every
   tool callable with its schema;
7. for a machine-written verifier (a model in the provenance), once 3-6 passed: verifier
   mutation (:mod:`envgym.mutation_run`), a seeded sample of single mutants of verifier.py; one
   that ``envgym check`` does not catch and that pays an answer the original rejects fails it.

Near-duplicates need the other bundles of a run, so the pipeline checks them
(:mod:`envgym.synth_agents.dedup`).  A bundle is valid when every task passes every check; the
result names each failure with a stable reason code (:data:`REASONS`) so runs can be summarized.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envgym.bundle import Bundle, BundleError, load_bundle
from envgym.check import TaskCheck, check_bundle
from envgym.sandbox import Limits, Sandbox, SandboxUnavailable, open_sandbox
from envgym.state import EpisodeDirs
from envgym.synth_agents.isolation import GuardedRun, IsolationResult
from envgym.synth_agents.provenance import check_provenance
from envgym.synth_agents.solution_rules import check_solution_source
from envgym.synth_agents.tool_probe import probe_tools

REASONS = {
    "build_failed": "the generator or agent could not produce a bundle",
    "malformed_bundle": "the bundle does not load (files, schema, hash, syntax, tool hints)",
    "solution_not_tools_only": "solution.py breaks the static tools-only rules",
    "solution_reads_state": "the gold solution touched the episode state directly",
    "answer_not_from_tools": "the gold answer does not come from tool results (no data call, copied from "
    "task metadata the prompt does not show, or unchanged without the data)",
    "verifier_answer_key": "the verifier accepts the gold answer without the data (it judges against metadata)",
    "gold_failed": "the gold solution does not pass its verifier in the sandbox",
    "noop_accepted": "the verifier accepts the empty/no-op submission",
    "corruptions_accepted": "the verifier accepts too many corrupted answers",
    "reruns_disagree": "reruns of the gold solution disagree",
    "rules_uncovered": "a verifier rule has no valid per-rule witness in tasks.jsonl (one that fails that rule alone)",
    "exploit_accepted": "the verifier accepts a generic exploit (prompt echo, format example, huge or nested values)",
    "verifier_error": "the verifier crashed, timed out or returned a malformed report",
    "mutant_survives": "a mutant of the verifier that envgym check does not catch pays an answer the "
    "original verifier rejects (envgym check --mutation)",
    "check_failed": "envgym check found another problem (e.g. a witness or declared rule the verifier "
    "does not report)",
    "tool_broken": "a tool cannot be called with its documented schema (or hangs/crashes)",
    "duplicate": "every task near-duplicates an earlier one",
    "sandbox_unavailable": "the sandbox backend cannot run here",
    # LLM agent, spec mode (envgym.synth_agents.spec_agent)
    "no_spec": "the model gave no valid spec in its rounds (prose, not JSON, too large or deep, "
    "or refused by the spec validator)",
    "spec_unsolvable": "the model's spec is valid but no strict task could be drawn on any redraw",
    # LLM agent stages (envgym.synth_agents.llm_agent)
    "category_rejected": "the category is empty or names no domain",
    "no_data": "the model produced no usable database",
    "no_tools": "the model produced no loadable, schema-true tools",
    "no_agreement": "the model's solution and verifier never agreed",
    "no_witnesses": "the model gave no valid per-rule witness for every verifier check",
    "policy_error": "the model backend failed (server down, bad replies)",
}
MIN_REJECTION = 0.95
MAX_MUTANTS = 60  # per synthesized bundle: about a second each in the sandbox


@dataclass(frozen=True)
class Problem:
    reason: str  # a key of REASONS
    detail: str
    task_id: str | None = None


@dataclass(frozen=True)
class ValidationResult:
    bundle: str  # directory name
    content_hash: str
    state_hash: str
    passed: bool
    problems: tuple[Problem, ...] = ()
    tasks: tuple[dict[str, Any], ...] = ()  # envgym check's per-task figures
    seconds: float = 0.0

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.reason for p in self.problems))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reasons": list(self.reasons)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ValidationResult:
        problems = tuple(Problem(**p) for p in data.get("problems", ()))
        return cls(
            bundle=data["bundle"],
            content_hash=data["content_hash"],
            state_hash=data["state_hash"],
            passed=bool(data["passed"]),
            problems=problems,
            tasks=tuple(data.get("tasks", ())),
            seconds=float(data.get("seconds", 0.0)),
        )


def state_hash(root: Path) -> str:
    """SHA-256 of the bundle's ``state/`` files (what makes two worlds the same world)."""
    digest = hashlib.sha256()
    state = Path(root) / "state"
    for path in sorted(p for p in state.rglob("*") if p.is_file()):
        digest.update(path.relative_to(state).as_posix().encode() + b"\0" + path.read_bytes())
    return "sha256:" + digest.hexdigest()


def validate_bundle(
    root: Path,
    *,
    sandbox: str = "bwrap",
    corruptions_per_task: int = 20,
    reruns: int = 3,
    seed: int = 0,
    limits: Limits | None = None,
    mutation: bool | None = None,
    max_mutants: int = MAX_MUTANTS,
) -> ValidationResult:
    """Validate one bundle directory; never raises for anything the bundle's code does.

    ``mutation=True`` runs a seeded sample of ``max_mutants`` verifier mutants after the checks
    (envgym.mutation_run); a surviving mutant that pays a wrong answer fails the bundle.
    ``mutation=None`` (the default, the pipeline's too) turns it on for a machine-written verifier
    (a model in the provenance) in a real sandbox: a model's verifier is the one nobody reviewed.
    ``False`` turns it off (a hand-written or generator-made verifier, or a quick look).
    """
    import time

    started = time.perf_counter()
    root = Path(root)
    shash = state_hash(root) if (root / "state").is_dir() else ""

    def result(
        problems: list[Problem], tasks: tuple[dict[str, Any], ...] = (), content: str = ""
    ) -> ValidationResult:
        return ValidationResult(
            root.name,
            content,
            shash,
            not problems,
            tuple(problems),
            tasks,
            time.perf_counter() - started,
        )

    try:
        bundle = load_bundle(root)
    except BundleError as exc:
        return result([Problem("malformed_bundle", str(exc))])
    content = bundle.manifest.content_hash
    names = tuple(dict.fromkeys(t.solution for t in bundle.tasks))
    violations = check_solution_source((root / "solution.py").read_text(), names)
    if violations:
        return result(
            [Problem("solution_not_tools_only", "; ".join(map(str, violations[:5])))],
            content=content,
        )
    try:
        run: GuardedRun | _PlainRun = (
            _PlainRun(bundle, limits)
            if sandbox == "inprocess"
            else GuardedRun(bundle, sandbox=sandbox, limits=limits)
        )
    except SandboxUnavailable as exc:
        return result([Problem("sandbox_unavailable", str(exc))], content=content)
    with run:  # one sandbox for check, isolation, provenance and the probe
        try:
            specs = run.box.describe_tools()
        except BundleError as exc:
            return result([Problem("malformed_bundle", str(exc))], content=content)
        # The guard only constrains solution frames; a gold that reads the state fails check
        # here too, and is reported once, as solution_reads_state.  Synthesized bundles must
        # bring their own per-rule witnesses (docs/CHECK.md): none are derived.
        report = check_bundle(
            bundle,
            sandbox=run.box,
            corruptions_per_task=corruptions_per_task,
            reruns=reruns,
            seed=seed,
            min_rejection=MIN_REJECTION,
            derive_witnesses=False,
        )
        isolation = run.solve_all()
        reads = {r.task_id for r in isolation if not r.ok}
        problems = [
            Problem("solution_reads_state", r.detail, r.task_id) for r in isolation if not r.ok
        ]
        checks = list(report.tasks)
        for check in checks:
            problems += [
                p
                for p in _check_problems(check)
                if not (p.reason == "gold_failed" and p.task_id in reads)
            ]
        passed_gold = {c.task_id for c in checks if c.gold_passed}
        problems += _provenance(run.box, run.dirs, bundle, isolation, passed_gold)
        run.fresh()
        calls = [call for r in isolation for call in r.calls]
        problems += [Problem("tool_broken", str(f)) for f in probe_tools(run.box, specs, calls)]
    if mutation is None:
        mutation = bundle.manifest.provenance.model is not None and sandbox != "inprocess"
    if mutation and not problems:
        problems += _mutation_problems(
            bundle, sandbox, limits, corruptions_per_task, seed, max_mutants
        )
    figures = tuple(c.to_dict() for c in checks)
    return result(problems, figures, content)


def _mutation_problems(
    bundle: Bundle,
    sandbox: str,
    limits: Limits | None,
    corruptions: int,
    seed: int,
    max_mutants: int,
) -> list[Problem]:
    from envgym.mutation_run import run_mutation, summary

    try:
        report = run_mutation(
            bundle,
            sandbox=sandbox,
            limits=limits,
            corruptions_per_task=corruptions,
            seed=seed,
            max_mutants=max_mutants,
        )
    except (ValueError, SandboxUnavailable) as exc:
        return [Problem("sandbox_unavailable", f"mutation: {exc}")]
    return [] if report.passed else [Problem("mutant_survives", summary(report)[:500])]


class _PlainRun:
    """GuardedRun's interface without the guard, for the ``inprocess`` backend (the guard patches
    the interpreter it runs in, which would be this one): the isolation check is skipped."""

    def __init__(self, bundle: Bundle, limits: Limits | None) -> None:
        self.bundle = bundle
        self.dirs = EpisodeDirs(bundle.state_dir)
        self.box = open_sandbox(bundle.root, backend="inprocess", limits=limits)

    def fresh(self) -> None:
        self.box.reset(self.dirs.refill())

    def solve_all(self) -> list[IsolationResult]:
        out = []
        for task in self.bundle.tasks:
            self.fresh()
            solved = self.box.solve(task.solution, task.to_dict(), task.submit_tool)
            out.append(
                IsolationResult(
                    task.id,
                    ok=True,
                    skipped=True,
                    calls=tuple(solved.calls),
                    submission=solved.submission if solved.outcome.ok else None,
                )
            )
        return out

    def __enter__(self) -> _PlainRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.box.close()
        self.dirs.cleanup()


def _provenance(
    box: Sandbox,
    dirs: EpisodeDirs,
    bundle: Bundle,
    runs: list[IsolationResult],
    passed_gold: set[str],
) -> list[Problem]:
    """Provenance problems of every task whose gold passed ``envgym check`` and ran cleanly here."""
    out = []
    for task, run in zip(bundle.tasks, runs):
        if run.ok and run.submission is not None and task.id in passed_gold:
            for p in check_provenance(box, dirs, task, list(run.calls), run.submission):
                out.append(Problem(p.reason, f"{p.kind}: {p.detail}", task.id))
    return out


def _check_problems(check: TaskCheck) -> list[Problem]:
    detail = "; ".join(check.problems)[:500]
    out = []
    if not check.gold_passed:
        out.append(Problem("gold_failed", detail, check.task_id))
    elif not check.noop_rejected:
        out.append(Problem("noop_accepted", detail, check.task_id))
    if check.gold_passed and (
        check.corruptions_tried == 0 or check.rejection_rate < check.min_rejection
    ):
        why = detail or "no corruption could be made of the gold answer"
        out.append(Problem("corruptions_accepted", why, check.task_id))
    if check.gold_passed and not check.reruns_agree:
        out.append(Problem("reruns_disagree", detail, check.task_id))
    if check.gold_passed and check.rule_coverage < 1.0:
        missing = [r for r in check.required_rules if r not in check.rules_covered]
        out.append(
            Problem("rules_uncovered", f"no valid witness for {missing}; " + detail, check.task_id)
        )
    if check.exploits_failed:
        out.append(Problem("exploit_accepted", ", ".join(check.exploits_failed[:5]), check.task_id))
    if check.verifier_errors:
        out.append(Problem("verifier_error", detail, check.task_id))
    if not out and not check.passed:  # every problem of envgym check fails validation too
        out.append(Problem("check_failed", detail or "envgym check failed", check.task_id))
    return out
