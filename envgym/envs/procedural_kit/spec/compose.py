"""A task of a given level: its conditions drawn from one *anchor* row, so at least one row meets
them all.  Difficulty is composition depth (docs/ENV_SPEC.md, "Levels"):

====  ====================================================================================
1     one attribute filter; the best row by an objective
2     two filters; objective; report one of the row's numbers
3     two filters, a join over a relation, a budget; objective; report
4     two filters, a join, an aggregate over related rows, a conditional rule; objective;
      report (an aggregate where the template has one)
5     three filters, join, aggregate, conditional, budget; objective; report; then a
      state-changing action on the row, checked in the final state
====  ====================================================================================

A building block the template lacks is replaced: a join by an aggregate and the reverse, any
other block by one more filter, so every level keeps its depth where the spec allows it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from envgym.envs.procedural_kit.spec.bundle_files import verifier as shipped
from envgym.envs.procedural_kit.spec.model import Attribute, Entity, Spec, TaskTemplate
from envgym.envs.procedural_kit.spec.state import Row, World


@dataclass(frozen=True)
class Shape:
    filters: int
    joins: int = 0
    aggregates: int = 0
    conditionals: int = 0
    budget: bool = False
    report: str = ""  # "" | "attr" | "any"
    action: bool = False


SHAPES = {
    1: Shape(filters=1),
    2: Shape(filters=2, report="attr"),
    3: Shape(filters=2, joins=1, budget=True, report="attr"),
    4: Shape(filters=2, joins=1, aggregates=1, conditionals=1, report="any"),
    5: Shape(
        filters=3, joins=1, aggregates=1, conditionals=1, budget=True, report="any", action=True
    ),
}


def step(attr: Attribute) -> Any:
    """The smallest move of a value of ``attr`` (a near-miss sits one step past a bound)."""
    if attr.type == "int":
        return 1
    if attr.type == "number":
        return 10**-attr.decimals if attr.decimals else 1
    return 1  # dates: one day, applied by ``beyond``


def beyond(attr: Attribute, op: str, bound: Any) -> Any:
    """The value one step on the wrong side of ``op bound`` (None when below zero)."""
    from datetime import date, timedelta

    sign = 1 if op == "le" else -1
    if attr.type == "date":
        return (date.fromisoformat(bound) + timedelta(days=sign)).isoformat()
    value = round(bound + sign * step(attr), 6)
    return None if value < 0 else value


def _nice(attr: Attribute, value: Any, op: str) -> Any:
    """A round bound on the anchor's side: ``le`` rounds up, ``ge`` down."""
    if attr.type == "number":
        return float(math.ceil(value) if op == "le" else math.floor(value))
    return value


def ordered_bound(
    attr: Attribute, values: list[Any], anchor: Any, rng: random.Random
) -> tuple[str, Any]:
    """(op, bound) the anchor meets, set at a quantile of ``values`` so a fair share also meets it."""
    op = rng.choice(("le", "ge"))
    pool = sorted(v for v in values if v is not None)
    q = rng.uniform(0.45, 0.8) if op == "le" else rng.uniform(0.2, 0.55)
    pick = pool[int(q * (len(pool) - 1))]
    bound = max(anchor, pick) if op == "le" else min(anchor, pick)
    return op, _nice(attr, bound, op)


def _condition_on(
    attr: Attribute, values: list[Any], anchor: Any, rng: random.Random
) -> dict[str, Any]:
    if attr.type in ("category", "bool", "text"):
        return {"op": "eq", "value": anchor}
    op, bound = ordered_bound(attr, values, anchor, rng)
    return {"op": op, "value": bound}


@dataclass(frozen=True)
class Plan:
    """The blocks one draw composes, before values are set from the anchor."""

    objective: str
    sense: str
    filters: tuple[str, ...]
    joins: tuple[int, ...]  # indexes into the template's joins
    aggregates: tuple[int, ...]
    conditionals: tuple[int, ...]
    budget: str
    report: tuple[str, Any]  # ("attr", name) | ("aggregate", index) | ("", None)
    action: str


def plan(spec: Spec, template: TaskTemplate, level: int, rng: random.Random) -> Plan | None:
    """The blocks of one draw at ``level``; a block the template lacks is made up by another
    (relations first: they need the most reasoning), so depth holds where the spec allows."""
    shape = SHAPES[level]
    objective = rng.choice(template.objectives)
    used = {objective}
    conds = [
        i
        for i, c in enumerate(template.conditionals)
        if c.when != objective and c.then != objective
    ]
    rng.shuffle(conds)
    conds = conds[: shape.conditionals]
    short = shape.conditionals - len(conds) + int(shape.action and not template.actions)
    used |= {template.conditionals[i].when for i in conds}
    used |= {template.conditionals[i].then for i in conds}
    budgets = [b for b in template.budgets if b not in used] if shape.budget else []
    budget = rng.choice(budgets) if budgets else ""
    short += int(shape.budget and not budget)
    used.add(budget)
    free = [f for f in template.filters if f not in used]
    if not free:  # a level keeps at least one direct filter (what the greedy baseline uses)
        return None
    rng.shuffle(free)
    joins, aggs = list(range(len(template.joins))), list(range(len(template.aggregates)))
    rng.shuffle(joins)
    rng.shuffle(aggs)
    count = {"j": shape.joins, "a": shape.aggregates, "f": shape.filters}
    pools = {"j": joins, "a": aggs, "f": free}
    for name, pool in pools.items():
        short += max(0, count[name] - len(pool))
        count[name] = min(count[name], len(pool))
    for name, pool in pools.items():
        take = min(short, len(pool) - count[name])
        count[name] += take
        short -= take
    report: tuple[str, Any] = ("", None)
    if shape.report == "any" and template.aggregates:
        report = ("aggregate", rng.randrange(len(template.aggregates)))
    elif shape.report and template.reports:
        report = ("attr", rng.choice(template.reports))
    return Plan(
        objective=objective,
        sense=rng.choice(("min", "max")),
        filters=tuple(free[: count["f"]]),
        joins=tuple(joins[: count["j"]]),
        aggregates=tuple(aggs[: count["a"]]),
        conditionals=tuple(conds),
        budget=budget,
        report=report,
        action=rng.choice(template.actions) if shape.action and template.actions else "",
    )


def aggregate_value(world: World, agg: dict[str, Any], parent: Any) -> Any:
    """The aggregate over ``parent``'s related rows, computed as the shipped verifier does."""
    rows = [r for r in world[agg["child"]] if r[agg["relation"]] == parent]
    return shipped.aggregate_rows(agg, rows)


def _rule(name: str, taken: set[str]) -> str:
    out, n = name, 2
    while out in taken:
        out, n = f"{name}_{n}", n + 1
    taken.add(out)
    return out


def constraints(
    spec: Spec, template: TaskTemplate, p: Plan, world: World, anchor: Row, rng: random.Random
) -> list[dict[str, Any]] | None:
    """The conditions of ``p`` with values the anchor meets; None if one cannot be set."""
    target = spec.entity(template.target)
    taken: set[str] = set()
    out: list[dict[str, Any]] = []
    rows = world[target.name]

    def column(entity: Entity, name: str, pool: list[Row]) -> list[Any]:
        return [r[name] for r in pool]

    for name in p.filters:
        attr = target.attribute(name)
        assert attr is not None
        cond = _condition_on(attr, column(target, name, rows), anchor[name], rng)
        prefix = {"eq": "", "le": "max_", "ge": "min_"}[cond["op"]]
        out.append({"rule": _rule(prefix + name, taken), "kind": "attr", "attribute": name, **cond})
    for i in p.joins:
        join = template.joins[i]
        rel = spec.relation(target.name, join.relation)
        assert rel is not None
        parent_entity = spec.entity(rel.target)
        parent = next(r for r in world[rel.target] if r[parent_entity.key] == anchor[rel.name])
        attr = parent_entity.attribute(join.attribute)
        assert attr is not None
        cond = _condition_on(
            attr, column(parent_entity, attr.name, world[rel.target]), parent[attr.name], rng
        )
        out.append({
            "rule": _rule(f"{rel.name}_{attr.name}", taken), "kind": "join",
            "relation": rel.name, "to": rel.target, "attribute": attr.name, **cond,
        })  # fmt: skip
    for i in p.aggregates:
        a = template.aggregates[i]
        agg = {
            "child": a.child,
            "relation": a.relation,
            "agg": a.op,
            "attribute": a.attribute or None,
        }
        value = aggregate_value(world, agg, anchor[target.key])
        if value is None:
            return None
        op = "le" if a.op == "count" and value == 0 else rng.choice(("le", "ge"))
        if a.op == "count":
            bound = value
        else:  # a cent of room: float sums in SQLite and Python may differ in the last bit
            bound = (
                math.floor(value * 100 + 1) / 100
                if op == "le"
                else math.ceil(value * 100 - 1) / 100
            )
        child = spec.entity(a.child)
        out.append({
            "rule": _rule(f"{child.name}_{a.op}" + (f"_{a.attribute}" if a.attribute else ""), taken),
            "kind": "aggregate", **agg, "op": op, "value": bound,
        })  # fmt: skip
    for i in p.conditionals:
        c = template.conditionals[i]
        then = target.attribute(c.then)
        assert then is not None
        op, bound = ordered_bound(then, column(target, c.then, rows), anchor[c.then], rng)
        out.append({
            "rule": _rule(f"if_{c.when}_then_{c.then}", taken), "kind": "conditional",
            "if": {"attribute": c.when, "value": anchor[c.when]},
            "then": {"attribute": c.then, "op": op, "value": bound},
        })  # fmt: skip
    if p.budget:
        attr = target.attribute(p.budget)
        assert attr is not None
        pool = sorted(column(target, p.budget, rows))
        pick = pool[int(rng.uniform(0.5, 0.8) * (len(pool) - 1))]
        bound = _nice(attr, max(anchor[p.budget], pick), "le")
        out.append({
            "rule": _rule("budget", taken), "kind": "attr", "role": "budget",
            "attribute": p.budget, "op": "le", "value": bound,
        })  # fmt: skip
    return out
