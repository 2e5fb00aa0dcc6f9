"""``compile_spec``: a validated spec → a complete bundle that passes ``envgym check``.

1. rows are drawn from the spec (seeded);
2. each task is drafted at its level (``compose``), its gold settled on the rows in memory and
   its near-misses planted (``plant``); every task drafted so far is settled again on the new
   rows, and a draft that would break one is thrown away and drawn again;
3. the bundle is written: ``state/db.sqlite``, ``tools.json`` (the spec's tables and tools, as
   data), the fixed ``tools.py``/``solution.py``/``verifier.py`` copied verbatim, tasks.jsonl
   with per-rule witnesses and the greedy baseline, the manifest;
4. every task is proved in process on the written files (``LocalBundle``): the gold solution,
   run through the tools, passes; the no-op and every single-field corruption of the gold are
   rejected; every witness fails exactly its rule on fresh state.  A failure here is a compiler
   bug, raised as :class:`CompileError`, never a bundle written anyway.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from envgym.bundle import write_manifest
from envgym.bundle_write import copy_code_files, fresh_bundle_dir, write_tasks
from envgym.envs.procedural_kit.build import UnsolvableTask, strictness_problem
from envgym.envs.procedural_kit.local import LocalBundle
from envgym.envs.procedural_kit.spec.compose import Plan, constraints, plan
from envgym.envs.procedural_kit.spec.model import MIN_ROWS, Spec, TaskTemplate
from envgym.envs.procedural_kit.spec.plant import near_misses
from envgym.envs.procedural_kit.spec.prompt import render
from envgym.envs.procedural_kit.spec.settle import Settled, ranked, settle
from envgym.envs.procedural_kit.spec.state import Keys, World, draw_world, write_db
from envgym.envs.procedural_kit.spec.validate import load_spec, load_spec_text

TEMPLATES = Path(__file__).resolve().parent / "bundle_files"
EXAMPLES = Path(__file__).resolve().parent / "examples"
SOLVER, GREEDY, SHALLOW = "solve_spec", "greedy_spec", "shallow_spec"
VERIFIER, SUBMIT = "verify_spec", "submit_result"
MAX_DRAWS = 80  # per task
AGENT = "procedural:env_spec"


class CompileError(RuntimeError):
    """The spec offers no template for a level, or a written task failed its proof (a compiler
    bug).  Running out of draws on one seed's rows is the kit's ``UnsolvableTask`` instead: bad
    luck that another seed may not have (synthesis redraws then)."""


def compile_spec(
    spec: Spec | dict[str, Any],
    out_dir: Path,
    *,
    seed: int = 0,
    n_tasks: int = 5,
    difficulties: Sequence[int] = (1, 2, 3, 4, 5),
    name: str | None = None,
    max_rows: int | None = None,
) -> Path:
    """Write the bundle of ``spec`` into ``out_dir`` (absent or empty) and return it.

    Task ``i`` has difficulty ``difficulties[i % len(difficulties)]``.  ``spec`` may be a parsed
    spec object (validated here with :func:`load_spec`).  ``max_rows`` caps every entity's table
    (a smaller world: shorter tool results, so a small model's context and a CPU's prefill can
    hold an episode)."""
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    if max_rows is not None:
        spec = cap_rows(spec, max_rows)
    if not 1 <= n_tasks <= 200:
        raise ValueError("n_tasks must be in 1..200")
    if not difficulties or any(d not in (1, 2, 3, 4, 5) for d in difficulties):
        raise ValueError(
            f"difficulties must be a non-empty subset of 1..5, got {tuple(difficulties)!r}"
        )
    out = fresh_bundle_dir(out_dir)
    rng = random.Random(f"{AGENT}:{spec.name}:{seed}")
    keys = Keys(rng)
    world = draw_world(spec, rng, keys)
    metas: list[dict[str, Any]] = []
    for i in range(n_tasks):
        level = difficulties[i % len(difficulties)]
        world, meta = _draft(spec, level, world, metas, keys, rng)
        metas.append(meta)
    settled = [settle(spec, m, world) for m in metas]
    lines = [_line(spec, i, m, s) for i, (m, s) in enumerate(zip(metas, settled, strict=True))]
    (out / "state").mkdir(parents=True, exist_ok=True)
    write_db(out / "state" / "db.sqlite", spec, world)
    (out / "tools.json").write_text(json.dumps(spec.table(), indent=1, ensure_ascii=False) + "\n")
    copy_code_files(TEMPLATES, out)
    prove(out, lines)
    write_tasks(out, lines)
    write_manifest(
        out,
        name=name or f"{spec.name.replace('_', '-')}-seed{seed}",
        category=spec.category,
        description=spec.description or f"{spec.category}: compiled from a declarative spec",
        provenance={
            "agent": AGENT,
            "model": None,
            "seed": seed,
            "created_at": "1970-01-01T00:00:00+00:00",
        },
    )
    return out


def cap_rows(spec: Spec, max_rows: int) -> Spec:
    """``spec`` with no table above ``max_rows`` rows (at least the schema's 8)."""
    if max_rows < MIN_ROWS:
        raise ValueError(f"max_rows must be at least {MIN_ROWS}, not {max_rows}")
    entities = tuple(replace(e, rows=min(e.rows, max_rows)) for e in spec.entities)
    return replace(spec, entities=entities)


def compile_example(
    example: str,
    out_dir: Path,
    *,
    seed: int = 0,
    n_tasks: int = 5,
    difficulties: Sequence[int] = (1, 2, 3, 4, 5),
    max_rows: int | None = None,
) -> Path:
    """Compile one of the specs in ``examples/`` (``library_loans`` …) into ``out_dir``."""
    if example not in example_names():
        raise KeyError(f"no example spec {example!r}; examples: {', '.join(example_names())}")
    spec = load_spec_text((EXAMPLES / f"{example}.json").read_bytes())
    return compile_spec(
        spec, out_dir, seed=seed, n_tasks=n_tasks, difficulties=difficulties, max_rows=max_rows
    )


def example_names() -> list[str]:
    return sorted(p.stem for p in EXAMPLES.glob("*.json"))


def _draft(
    spec: Spec,
    level: int,
    world: World,
    metas: list[dict[str, Any]],
    keys: Keys,
    rng: random.Random,
) -> tuple[World, dict[str, Any]]:
    templates = [t for t in spec.tasks if level in t.levels]
    if not templates:
        raise CompileError(f"no task template of {spec.name!r} offers level {level}")
    problems: dict[str, int] = {}
    for _ in range(MAX_DRAWS):
        template = rng.choice(templates)
        p = plan(spec, template, level, rng)
        if p is None:
            problems["too few filters"] = problems.get("too few filters", 0) + 1
            continue
        target = spec.entity(template.target)
        pool = world[target.name]
        if p.action:
            tool = spec.tool("action", name=p.action)
            assert tool is not None
            pool = [r for r in pool if r[tool.attribute] == tool.start]
        if not pool:
            continue
        anchor = rng.choice(pool)
        cons = constraints(spec, template, p, world, anchor, rng)
        if cons is None:
            continue
        meta = _meta(spec, template, p, cons, level)
        base = _actionable(spec, meta, world) if p.action else world
        first = settle(spec, meta, base, witnesses=False)
        if isinstance(first, str):
            problems[first] = problems.get(first, 0) + 1
            continue
        added = near_misses(spec, meta, base, first.gold, keys, rng)
        trial = {n: rows + added.get(n, []) for n, rows in base.items()}
        verdicts = [settle(spec, m, trial) for m in [*metas, meta]]
        bad = [v for v in verdicts if isinstance(v, str)]
        if bad:
            problems[bad[0]] = problems.get(bad[0], 0) + 1
            continue
        return trial, meta
    top = ", ".join(f"{k} ({n}×)" for k, n in sorted(problems.items(), key=lambda kv: -kv[1])[:3])
    raise UnsolvableTask(
        f"{spec.name}: no level-{level} task in {MAX_DRAWS} draws: {top or 'no candidates'}"
    )


def _actionable(spec: Spec, meta: dict[str, Any], world: World) -> World:
    """``world`` with the task's best row put in the action's start state (a fresh copy of the
    rows; the other tasks are settled again on it before it is kept)."""
    best = ranked(spec, meta, world)
    action = meta["action"]
    if not best or best[0][action["attribute"]] == action["from"]:
        return world
    key = best[0][meta["key"]]
    rows = [
        {**r, action["attribute"]: action["from"]} if r[meta["key"]] == key else r
        for r in world[meta["target"]]
    ]
    return {**world, meta["target"]: rows}


def _meta(
    spec: Spec, template: TaskTemplate, p: Plan, cons: list[dict[str, Any]], level: int
) -> dict[str, Any]:
    target = spec.entity(template.target)
    keys = {target.name: target.key}
    lister = max(
        (t for t in spec.tools if t.kind == "list" and t.entity == target.name),
        key=lambda t: sum(c.get("attribute") in t.filters for c in cons if c["kind"] == "attr"),
    )
    lookup = spec.tool("lookup", entity=target.name)
    assert lookup is not None
    plan_: dict[str, Any] = {
        "list": lister.name,
        "lookup": lookup.name,
        "list_args": {},
        "follow": {},
        "aggregate": {},
    }
    for c in cons:
        if c["kind"] == "attr" and c["attribute"] in lister.filters:
            prefix = {"eq": "", "le": "max_", "ge": "min_"}[c["op"]]
            plan_["list_args"][prefix + c["attribute"]] = c["value"]
        elif c["kind"] == "join":
            keys[c["to"]] = spec.entity(c["to"]).key
            follow = spec.tool("follow", entity=target.name, relation=c["relation"])
            assert follow is not None
            plan_["follow"][c["relation"]] = follow.name
    report = None
    if p.report[0] == "attr":
        report = {
            "rule": f"{p.report[1]}_correct",
            "field": p.report[1],
            "kind": "attr",
            "attribute": p.report[1],
        }
    aggregates = [c for c in cons if c["kind"] == "aggregate"]
    if p.report[0] == "aggregate":
        a = template.aggregates[p.report[1]]
        child = spec.entity(a.child)
        field = f"{child.name}_count" if a.op == "count" else f"{a.op}_{a.attribute}"
        report = {
            "rule": f"{field}_correct", "field": field, "kind": "aggregate", "child": a.child,
            "relation": a.relation, "agg": a.op, "attribute": a.attribute or None,
        }  # fmt: skip
        aggregates.append(report)
    for a in aggregates:
        keys[a["child"]] = spec.entity(a["child"]).key
        tool = next(
            t
            for t in spec.tools
            if t.kind == "aggregate" and t.entity == a["child"] and a["relation"] in t.filters
        )
        plan_["aggregate"][a["child"]] = tool.name
    action = None
    if p.action:
        tool = spec.tool("action", name=p.action)
        assert tool is not None
        plan_["action"] = tool.name
        action = {
            "rule": f"{tool.name}_done", "tool": tool.name, "verb": tool.verb,
            "attribute": tool.attribute, "from": tool.start, "to": tool.end, "states": {},
        }  # fmt: skip
    meta = {
        "target": target.name,
        "key": target.key,
        "keys": keys,
        "level": level,
        "constraints": cons,
        "objective": {"rule": f"best_{p.objective}", "attribute": p.objective, "sense": p.sense},
        "report": report,
        "action": action,
        "plan": plan_,
    }
    return meta


def _line(spec: Spec, i: int, meta: dict[str, Any], settled: Settled | str) -> dict[str, Any]:
    if isinstance(settled, str):
        raise CompileError(f"task {i + 1}: {settled} after every task was planted")
    rules = declared_rules(meta)
    if [w["rule"] for w in settled.witnesses] != rules:
        found = [w["rule"] for w in settled.witnesses]
        raise CompileError(f"task {i + 1}: the verifier reports {found}, the task declares {rules}")
    meta = {
        **meta,
        "declared_rules": rules,
        "depth": len(meta["constraints"]) + 1 + bool(meta["report"]) + bool(meta["action"]),
    }
    return {
        "id": f"{spec.name.replace('_', '-')}-{i + 1:03d}-d{meta['level']}",
        "prompt": render(spec, meta),
        "solution": SOLVER,
        "verifier": VERIFIER,
        "difficulty": meta["level"],
        "submit_tool": SUBMIT,
        "system_prompt": None,
        "metadata": meta,
        "witnesses": settled.witnesses,
        "baseline": GREEDY,
    }


def declared_rules(meta: dict[str, Any]) -> list[str]:
    """The rules a task sets, from its conditions alone (not from what its verifier reports):
    envgym check holds the verifier to them (docs/CHECK.md, "Declared rules")."""
    rules = ["valid_json", f"{meta['target']}_exists"]
    rules += [c["rule"] for c in meta["constraints"]]
    rules.append(meta["objective"]["rule"])
    rules += [part["rule"] for part in (meta["report"], meta["action"]) if part]
    return rules


def prove(root: Path, lines: list[dict[str, Any]]) -> None:
    """Run each task's gold, corruptions and witnesses in process; :class:`CompileError` if any
    fails (the in-memory settle and the shipped code disagree: a compiler bug)."""
    local = LocalBundle(root)
    try:
        for line in lines:
            task = {k: v for k, v in line.items() if k not in ("witnesses", "baseline")}
            with local.episode() as episode:
                problem = strictness_problem(episode, task)
            if problem is not None:
                raise CompileError(f"{line['id']}: {problem}")
            with local.episode() as episode:
                for w in line["witnesses"]:
                    failed = [
                        c["name"]
                        for c in episode.verify(w["submission"], task)["checks"]
                        if not c["passed"]
                    ]
                    if failed != [w["rule"]]:
                        raise CompileError(f"{line['id']}: witness for {w['rule']} fails {failed}")
    finally:
        for module in (local.tools_module, local.solution_module, local.verifier_module):
            sys.modules.pop(module.__name__, None)


def greedy_outcomes(root: Path, solver: str = GREEDY) -> list[tuple[int, bool]]:
    """(difficulty, solved) of a baseline of solution.py (default: the greedy one) on each task
    of a compiled bundle, each on fresh state, judged by the bundle's verifier."""
    from envgym.envs.procedural_kit.build import baseline_solves

    local = LocalBundle(root)
    out = []
    try:
        with open(Path(root) / "tasks.jsonl", encoding="utf-8") as fh:
            tasks = [json.loads(line) for line in fh if line.strip()]
        for task in tasks:
            with local.episode() as episode:
                task = {**task, "baseline": solver}
                out.append((task["difficulty"], baseline_solves(episode, task)))
    finally:
        for module in (local.tools_module, local.solution_module, local.verifier_module):
            sys.modules.pop(module.__name__, None)
    return out
