"""``envgym check --mutation``: run every single mutant of a bundle's verifier, in the sandbox.

For each mutant (``envgym.mutation``) a copy of the bundle gets the mutated verifier.py and its
own sandbox; the gold runs and, on the state it leaves, every probe is judged by the original
and by the mutant: what envgym check submits (the gold, the no-op, the witnesses, its
corruptions drawn with its seed, the generic exploits) and an extra stream (more corruptions of
the gold, corruptions of every witness).

* the mutant is *killed* when check's criteria fail it on those verdicts (:func:`check_fails`:
  gold rejected, a verifier fault, a declared rule not reported, no-op or exploit accepted, a
  witness that no longer fails exactly its rule, corruptions accepted, a rule without a witness).
  Judging check's probes in one sandbox start, rather than re-running check (a fresh state per
  witness), makes a mutant cost about a second; the tests hold the two to the same answer;
* it *changes behaviour* when some probe's verdict (passed, failed checks, fault) differs;
* it *pays a wrong answer* when the original rejects a probe that the mutant accepts.
The gold answer in another form (wrapped, fenced: ``gold_form``) is left out of both: check lets
a verifier accept or refuse it, so a mutant that only changes that is equivalent (a fault on it
still counts).

The kill rate is killed / behaviour-changing (a mutant that changes nothing on any probe is
counted as equivalent).  A surviving mutant that pays a wrong answer fails the bundle: check
would certify a verifier one slip away from rewarding wrong answers without noticing.

The host never imports or runs verifier code: each mutant runs in its own sandbox.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envgym.adversarial import exploits
from envgym.bundle import Bundle, Task, load_bundle, write_manifest
from envgym.check import CheckRunner
from envgym.check_rules import declared_rules
from envgym.corrupt import corruptions
from envgym.mutation import Mutant, mutants
from envgym.sandbox import Limits, open_sandbox

GOLD_CORRUPTIONS = 200  # extra probes per task drawn from the gold
WITNESS_CORRUPTIONS = 20  # per declared witness
MIN_REJECTION = 0.95  # as envgym check


@dataclass(frozen=True)
class Probe:
    submission: dict[str, Any]
    role: str  # gold | noop | witness | corruption | exploit | gold_form | stream
    rule: str = ""  # a witness's rule


@dataclass(frozen=True)
class ProbeOutcome:
    passed: bool
    failed: frozenset[str]
    reported: tuple[str, ...]
    error: bool


@dataclass(frozen=True)
class MutantResult:
    id: str
    kind: str
    line: int
    description: str
    changed: bool  # some probe's verdict differs from the original's
    killed: bool  # envgym check fails the mutant
    pays_wrong: int  # probes the original rejects and the mutant accepts
    example: str = ""  # one such probe, shortened
    problems: tuple[str, ...] = ()  # why check failed it (the first few)


@dataclass(frozen=True)
class MutationReport:
    bundle: str
    mutants: int
    probes: int
    results: tuple[MutantResult, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> int:
        return sum(r.changed for r in self.results)

    @property
    def killed(self) -> int:
        return sum(r.changed and r.killed for r in self.results)

    @property
    def kill_rate(self) -> float:
        return self.killed / self.changed if self.changed else 1.0

    @property
    def paying_survivors(self) -> tuple[MutantResult, ...]:
        return tuple(r for r in self.results if not r.killed and r.pays_wrong)

    @property
    def passed(self) -> bool:
        return not self.paying_survivors

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "mutants": self.mutants,
            "probes": self.probes,
            "behaviour_changing": self.changed,
            "killed": self.killed,
            "kill_rate": self.kill_rate,
            "passed": self.passed,
            "paying_survivors": [asdict(r) for r in self.paying_survivors],
            "survivors": [asdict(r) for r in self.results if r.changed and not r.killed],
        }


def probes_for(
    bundle: Bundle, gold: dict[str, dict[str, Any]], seed: int, corruptions_per_task: int
) -> dict[str, list[Probe]]:
    """Each task's probes: what envgym check submits (the gold, the no-op and blank answers, the
    witnesses, its corruptions drawn as it draws them, the exploits), then the extra stream."""
    check_rng, extra_rng = random.Random(seed), random.Random(f"mutation:{seed}")
    out: dict[str, list[Probe]] = {}
    for task in bundle.tasks:
        if task.id not in gold:
            continue
        g = gold[task.id]
        probes = [Probe(g, "gold"), Probe({}, "noop"), Probe({k: "" for k in g}, "noop")]
        probes += [Probe(dict(w.submission), "witness", w.rule) for w in task.witnesses]
        probes += [Probe(c, "corruption") for c in corruptions(g, corruptions_per_task, check_rng)]
        probes += [
            Probe(e.submission, "gold_form" if e.gold_form else "exploit")
            for e in exploits(task.prompt, g)
        ]
        stream = corruptions(g, GOLD_CORRUPTIONS, extra_rng)
        for w in task.witnesses:
            stream += corruptions(dict(w.submission), WITNESS_CORRUPTIONS, extra_rng)
        probes += [Probe(c, "stream") for c in stream]
        out[task.id] = probes
    return out


def _outcomes(
    runner: CheckRunner, bundle: Bundle, probes: dict[str, list[Probe]]
) -> dict[str, list[ProbeOutcome]]:
    out: dict[str, list[ProbeOutcome]] = {}
    for task in bundle.tasks:
        if task.id not in probes:
            continue
        runner.fresh_state()
        runner.solve(task, task.solution)  # the state the gold run leaves, as check judges on it
        verdicts = [runner.verify(task, p.submission) for p in probes[task.id]]
        out[task.id] = [
            ProbeOutcome(
                v.passed, v.failed_names, tuple(c.name for c in v.checks), v.error is not None
            )
            for v in verdicts
        ]
    return out


def check_fails(task: Task, probes: list[Probe], outcomes: list[ProbeOutcome]) -> str | None:
    """Why envgym check fails the task on these verdicts (its criteria, module docstring), or None."""
    gold = outcomes[0]
    if not gold.passed or gold.error:
        return "gold rejected"
    if any(o.error for o in outcomes):
        return "verifier error"
    rules = set(gold.reported)
    declared, _ = declared_rules(task.metadata, tuple(w.rule for w in task.witnesses))
    if not set(declared) <= rules:
        return f"declared rules not reported: {sorted(set(declared) - rules)}"
    covered: set[str] = set()
    tried = rejected = 0
    for probe, o in zip(probes, outcomes):
        if probe.role == "noop" and o.passed:
            return "no-op accepted"
        if probe.role == "witness":
            if o.failed != {probe.rule}:
                return f"witness for {probe.rule} fails {sorted(o.failed)}"
            covered.add(probe.rule)
        if probe.role == "exploit" and o.passed:
            return "exploit accepted"
        if probe.role == "corruption":
            tried += 1
            rejected += not o.passed
        if probe.role in ("corruption", "exploit", "gold_form") and len(o.failed) == 1:
            covered |= o.failed & rules
    if tried and rejected / tried < MIN_REJECTION:
        return f"accepted {tried - rejected}/{tried} corruptions"
    if not rules <= covered:
        return f"rules without a witness: {sorted(rules - covered)}"
    return None


def _gold(runner: CheckRunner, bundle: Bundle) -> dict[str, dict[str, Any]]:
    gold = {}
    for task in bundle.tasks:
        runner.fresh_state()
        solved = runner.solve(task, task.solution)
        if solved.outcome.ok and solved.submission is not None:
            gold[task.id] = solved.submission
    return gold


def run_mutation(
    bundle: Bundle,
    *,
    sandbox: str = "bwrap",
    limits: Limits | None = None,
    corruptions_per_task: int = 20,
    seed: int = 0,
    max_mutants: int | None = None,
    only: Callable[[Mutant], bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> MutationReport:
    """Mutate ``bundle``'s verifier.py and judge each mutant (module docstring).

    Raises ``ValueError`` for the ``inprocess`` backend: mutants run in a sandbox, never on the host.
    """
    if sandbox == "inprocess":
        raise ValueError(
            "verifier mutants run only in a sandbox (bwrap or docker), never in-process"
        )
    source = (bundle.root / "verifier.py").read_text(encoding="utf-8")
    chosen = [m for m in mutants(source) if only is None or only(m)]
    if max_mutants is not None and len(chosen) > max_mutants:
        chosen = sorted(random.Random(seed).sample(chosen, max_mutants), key=lambda m: m.id)
    box = open_sandbox(bundle.root, backend=sandbox, limits=limits)
    runner = CheckRunner(bundle, box)
    try:
        gold = _gold(runner, bundle)
        stream = probes_for(bundle, gold, seed, corruptions_per_task)
        original = _outcomes(runner, bundle, stream)
    finally:
        runner.close()
        box.close()
    results = []
    with tempfile.TemporaryDirectory(prefix="envgym-mutants-") as scratch:
        for i, mutant in enumerate(chosen):
            if progress is not None:
                progress(i, len(chosen))
            results.append(
                _judge(
                    bundle,
                    mutant,
                    Path(scratch) / f"m{i}",
                    stream,
                    original,
                    sandbox=sandbox,
                    limits=limits,
                    corruptions_per_task=corruptions_per_task,
                    seed=seed,
                )
            )
    return MutationReport(
        bundle=bundle.manifest.name,
        mutants=len(chosen),
        probes=sum(len(v) for v in stream.values()),
        results=tuple(results),
    )


def _judge(
    bundle: Bundle,
    mutant: Mutant,
    root: Path,
    stream: dict[str, list[Probe]],
    original: dict[str, list[ProbeOutcome]],
    *,
    sandbox: str,
    limits: Limits | None,
    corruptions_per_task: int,
    seed: int,
) -> MutantResult:
    shutil.copytree(bundle.root, root, symlinks=False)
    (root / "verifier.py").write_text(mutant.source, encoding="utf-8")
    m = bundle.manifest
    provenance = json.loads((root / "manifest.json").read_text(encoding="utf-8"))["provenance"]
    write_manifest(
        root, name=m.name, category=m.category, provenance=provenance, description=m.description
    )
    try:
        copy = load_bundle(root)
        box = open_sandbox(root, backend=sandbox, limits=limits)
    except Exception as exc:  # noqa: BLE001 - a mutant that does not even load is killed by loading
        shutil.rmtree(root, ignore_errors=True)
        return MutantResult(
            mutant.id,
            mutant.kind,
            mutant.line,
            mutant.description,
            True,
            True,
            0,
            problems=(f"does not load: {type(exc).__name__}",),
        )
    runner = CheckRunner(copy, box)
    try:
        seen = _outcomes(runner, copy, stream)
    finally:
        runner.close()
        box.close()
        shutil.rmtree(root, ignore_errors=True)
    changed, paid, example, why = False, 0, "", []
    for task in copy.tasks:
        if task.id not in original:
            continue
        after = seen.get(task.id, [])
        reason = check_fails(task, stream[task.id], after) if after else "gold did not run"
        if reason is not None:
            why.append(f"{task.id}: {reason}")
        for probe, b, a in zip(stream[task.id], original[task.id], after):
            if probe.role == "gold_form" and not a.error:  # the gold in another form: check lets a
                continue  # verifier accept or refuse it, so a mutant's verdict on it is no change
            changed |= (b.passed, b.failed, b.error) != (a.passed, a.failed, a.error)
            if not b.passed and a.passed:
                paid += 1
                example = (
                    example or f"{task.id} ({probe.role}): {json.dumps(probe.submission)[:160]}"
                )
    killed = bool(why)
    return MutantResult(
        mutant.id,
        mutant.kind,
        mutant.line,
        mutant.description,
        changed or killed,
        killed,
        paid,
        example,
        tuple(why[:3]),
    )


def summary(report: MutationReport) -> str:
    """One line for ``envgym check --mutation``, then one per paying survivor (at most five)."""
    head = (
        f"mutation: {report.mutants} mutants, {report.changed} change behaviour on {report.probes} probes, "
        f"{report.killed} killed ({report.kill_rate:.1%}); "
        f"{len(report.paying_survivors)} surviving mutants pay wrong answers"
    )
    lines = [head]
    for r in report.paying_survivors[:5]:
        lines.append(
            f"  line {r.line} {r.description} ({r.kind}) pays {r.pays_wrong}: {r.example[:120]}"
        )
    return "\n".join(lines)
