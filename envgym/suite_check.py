"""``envgym check SUITE``: the full adversarial check on a seeded random sample of a suite.

A suite of a thousand bundles is too many to check one by one by hand, and checking only the
first few would check the categories that happen to sort first.  This draws ``sample`` bundles
with ``random.Random(seed)`` over the manifest's bundles (every split) and runs on each:

* ``envgym check`` as for one bundle (gold, no-op, corruptions, exploits, witnesses, reruns);
* optionally verifier mutation (``--mutation``), each bundle with its own sampling seed so that
  bundles which share a verifier (every compiled spec bundle ships the same ``verifier.py``) do
  not all draw the same mutants;
* optionally extra named solvers of ``solution.py`` (``--baseline shallow_spec``) run as baselines
  in the same sandbox, judged by the task's verifier on fresh state: a stronger yardstick than the
  task's own greedy baseline, reported per level beside it;
* rule coverage counted against the rules the task's *conditions* set (for a compiled spec task:
  its constraints, objective, report and action, read from its metadata), independently of both
  the verifier's report and the compiler's own ``declared_rules`` list.

A bundle whose files do not match the content hash the suite lists is a failure, not a skip.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envgym.bundle import Bundle, BundleError, load_bundle
from envgym.check import CheckReport, CheckRunner, check_bundle, run_baseline
from envgym.mutation_run import MutationReport, run_mutation
from envgym.sandbox import open_sandbox
from envgym.suite_manifest import Suite, SuiteBundle

Progress = Callable[[int, int, str], None]  # (done, total, bundle path)


@dataclass(frozen=True)
class BundleResult:
    path: str
    category: str
    error: str | None = None  # the bundle did not load or does not match the suite's hash
    check: CheckReport | None = None
    mutation: MutationReport | None = None
    # solver -> [(difficulty, solved)] for each extra baseline
    baselines: dict[str, list[tuple[int, bool]]] = field(default_factory=dict)
    spec_rules: int = 0  # rules the tasks' conditions set (compiled spec tasks only)
    spec_rules_covered: int = 0  # of those, covered by a valid witness in the check

    @property
    def passed(self) -> bool:
        return (
            self.error is None
            and self.check is not None
            and self.check.passed
            and (self.mutation is None or self.mutation.passed)
            and self.spec_rules_covered == self.spec_rules
        )


@dataclass(frozen=True)
class SuiteCheck:
    suite: str
    bundles_in_suite: int
    seed: int
    results: tuple[BundleResult, ...]

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        checks = [r.check for r in self.results if r.check is not None]
        mutations = [r.mutation for r in self.results if r.mutation is not None]
        changed = sum(m.changed for m in mutations)
        killed = sum(m.killed for m in mutations)
        spec_rules = sum(r.spec_rules for r in self.results)
        out: dict[str, Any] = {
            "suite": self.suite,
            "bundles_in_suite": self.bundles_in_suite,
            "sampled": len(self.results),
            "seed": self.seed,
            "passed": self.passed,
            "bundles_passed": sum(r.passed for r in self.results),
            "tasks": sum(len(c.tasks) for c in checks),
            "tasks_passed": sum(t.passed for c in checks for t in c.tasks),
            "exploits": {
                "tried": sum(t.exploits_tried for c in checks for t in c.tasks),
                "accepted": sum(len(t.exploits_failed) for c in checks for t in c.tasks),
            },
            "spec_rule_coverage": {
                "rules": spec_rules,
                "covered": sum(r.spec_rules_covered for r in self.results),
            },
            "baselines": {"task_baseline": solve_share_per_level(_own_baselines(checks))},
            "failures": [
                {"path": r.path, "category": r.category, "why": _why(r)}
                for r in self.results
                if not r.passed
            ],
        }
        for name in sorted({n for r in self.results for n in r.baselines}):
            outcomes = [o for r in self.results for o in r.baselines.get(name, [])]
            out["baselines"][name] = solve_share_per_level(outcomes)
        if mutations:
            out["mutation"] = {
                "bundles": len(mutations),
                "mutants": sum(len(m.results) for m in mutations),
                "behaviour_changing": changed,
                "killed": killed,
                "kill_rate": killed / changed if changed else 1.0,
                "paying_survivors": sum(len(m.paying_survivors) for m in mutations),
            }
        return out


def sample_bundles(suite: Suite, sample: int, seed: int) -> list[SuiteBundle]:
    """``sample`` bundles of every split drawn with ``random.Random(seed)`` (0: all), in
    manifest order so a report reads category by category."""
    if sample < 0:
        raise ValueError(f"--sample must be 0 (all) or more, got {sample}")
    bundles = list(suite.bundles)
    if sample == 0 or sample >= len(bundles):
        return bundles
    chosen = set(random.Random(seed).sample(range(len(bundles)), sample))
    return [b for i, b in enumerate(bundles) if i in chosen]


def check_suite(
    suite: Suite,
    *,
    sample: int,
    seed: int = 0,
    sandbox: str = "bwrap",
    corruptions: int = 20,
    reruns: int = 3,
    mutation: bool = False,
    max_mutants: int | None = None,
    baselines: tuple[str, ...] = (),
    progress: Progress | None = None,
) -> SuiteCheck:
    chosen = sample_bundles(suite, sample, seed)
    results = []
    for i, entry in enumerate(chosen):
        if progress is not None:
            progress(i, len(chosen), entry.path)
        # each bundle its own mutant sample, fixed by the run's seed and the bundle's path
        bundle_seed = random.Random(f"{seed}\0{entry.path}").randrange(2**31)
        results.append(
            _check_one(
                suite,
                entry,
                sandbox=sandbox,
                corruptions=corruptions,
                reruns=reruns,
                mutation_seed=bundle_seed if mutation else None,
                max_mutants=max_mutants,
                baselines=baselines,
            )
        )
    return SuiteCheck(str(suite.root), len(suite.bundles), seed, tuple(results))


def _check_one(
    suite: Suite,
    entry: SuiteBundle,
    *,
    sandbox: str,
    corruptions: int,
    reruns: int,
    mutation_seed: int | None,
    max_mutants: int | None,
    baselines: tuple[str, ...],
) -> BundleResult:
    try:
        bundle = load_bundle(suite.root / entry.path)
    except (BundleError, ValueError, OSError) as exc:
        return BundleResult(entry.path, entry.category, error=f"does not load: {exc}")
    if bundle.manifest.content_hash != entry.content_hash:
        return BundleResult(
            entry.path,
            entry.category,
            error=f"content hash {bundle.manifest.content_hash} is not the suite's "
            f"{entry.content_hash}",
        )
    report = check_bundle(bundle, sandbox=sandbox, corruptions_per_task=corruptions, reruns=reruns)
    mutated = None
    if mutation_seed is not None:
        mutated = run_mutation(
            bundle,
            sandbox=sandbox,
            corruptions_per_task=corruptions,
            seed=mutation_seed,
            max_mutants=max_mutants,
        )
    rules, covered = _spec_rule_coverage(bundle, report)
    return BundleResult(
        entry.path,
        entry.category,
        check=report,
        mutation=mutated,
        baselines=_extra_baselines(bundle, sandbox, baselines),
        spec_rules=rules,
        spec_rules_covered=covered,
    )


def _extra_baselines(
    bundle: Bundle, sandbox: str, names: tuple[str, ...]
) -> dict[str, list[tuple[int, bool]]]:
    # a solver the bundle does not define is left out, not counted as a failure to solve: it
    # is looked up by reading solution.py (parsed, never run on the host)
    defined = _functions(bundle)
    present = tuple(n for n in names if n in defined)
    if not present:
        return {}
    out: dict[str, list[tuple[int, bool]]] = {name: [] for name in present}
    with open_sandbox(bundle.root, backend=sandbox) as box:
        runner = CheckRunner(bundle, box)
        try:
            for task in bundle.tasks:
                for name in present:
                    out[name].append((task.difficulty, run_baseline(runner, task, name)))
        finally:
            runner.close()
    return out


def _functions(bundle: Bundle) -> set[str]:
    try:
        tree = ast.parse((bundle.root / "solution.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError, RecursionError):
        return set()
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def spec_rules(metadata: Mapping[str, Any]) -> list[str]:
    """The rules a compiled spec task's conditions set, read from its metadata (not from the
    verifier's report nor from the compiler's ``declared_rules``); [] for other tasks."""
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("constraints"), list):
        return []
    parts = [metadata.get("objective"), metadata.get("report"), metadata.get("action")]
    rules = [c.get("rule") for c in metadata["constraints"] if isinstance(c, Mapping)]
    rules += [p.get("rule") for p in parts if isinstance(p, Mapping)]
    target = metadata.get("target")
    head = ["valid_json", f"{target}_exists"] if isinstance(target, str) else []
    return head + [r for r in rules if isinstance(r, str)]


def _spec_rule_coverage(bundle: Bundle, report: CheckReport) -> tuple[int, int]:
    by_id = {t.task_id: t for t in report.tasks}
    rules = covered = 0
    for task in bundle.tasks:
        wanted = set(spec_rules(task.metadata))
        checked = by_id.get(task.id)
        rules += len(wanted)
        if checked is not None:
            covered += len(wanted & set(checked.rules_covered))
    return rules, covered


def _own_baselines(checks: list[CheckReport]) -> list[tuple[int, bool]]:
    return [
        (t.difficulty, t.baseline_solved)
        for c in checks
        for t in c.tasks
        if t.baseline_solved is not None
    ]


def solve_share_per_level(outcomes: list[tuple[int, bool]]) -> dict[str, dict[str, Any]]:
    """``{level: {tasks, solved, share}}`` of (level, solved) outcomes, levels in order (the
    suite report's figure too)."""
    levels: dict[int, list[bool]] = {}
    for level, solved in outcomes:
        levels.setdefault(level, []).append(solved)
    return {
        str(k): {"tasks": len(v), "solved": sum(v), "share": sum(v) / len(v)}
        for k, v in sorted(levels.items())
    }


def _why(result: BundleResult) -> str:
    if result.error is not None:
        return result.error
    reasons = []
    if result.check is not None and not result.check.passed:
        bad = [t for t in result.check.tasks if not t.passed]
        first = bad[0].problems[0] if bad and bad[0].problems else "see envgym check"
        reasons.append(f"{len(bad)} task(s) fail envgym check ({first})")
    if result.mutation is not None and not result.mutation.passed:
        reasons.append(f"{len(result.mutation.paying_survivors)} mutant(s) survive and pay")
    if result.spec_rules_covered != result.spec_rules:
        reasons.append(
            f"{result.spec_rules - result.spec_rules_covered} rule(s) the conditions set "
            "have no witness"
        )
    return "; ".join(reasons)
