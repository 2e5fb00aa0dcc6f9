"""Near-miss rows: for each condition of a task, a copy of its gold row that breaks exactly that
condition (and is better by the objective, so the condition is what rules it out), plus one copy
that meets every condition but is worse by the objective.

They make every condition bind (ignore one and a better-looking wrong row wins), give every rule
a per-rule witness (a submission naming the near-miss fails that rule alone), and defeat the
greedy baseline (the first row under the direct filters is often one of them).  Attributes the
task does not mention are drawn afresh, so a near-miss reads like any other row.
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from typing import Any

from envgym.envs.procedural_kit.spec.compose import aggregate_value, beyond, step
from envgym.envs.procedural_kit.spec.model import Attribute, Spec
from envgym.envs.procedural_kit.spec.settle import failed_conditions
from envgym.envs.procedural_kit.spec.state import Keys, Row, World, draw_row

TRIES = 4  # per condition
AGGREGATE_STEPS = 8  # children added or removed to push an aggregate past its bound


def shift(attr: Attribute, value: Any, k: int) -> Any:
    """``value`` moved ``k`` steps (dates by days); None when it would go below zero."""
    if attr.type == "date":
        return (date.fromisoformat(value) + timedelta(days=k)).isoformat()
    out = round(value + k * step(attr), 6)
    if attr.type == "int":
        out = int(out)
    return None if out < 0 else out


def referenced(meta: dict[str, Any]) -> set[str]:
    """Target attributes the task mentions (kept on copies; the rest are redrawn)."""
    out = {meta["objective"]["attribute"]}
    for c in meta["constraints"]:
        if c["kind"] == "attr":
            out.add(c["attribute"])
        elif c["kind"] == "conditional":
            out |= {c["if"]["attribute"], c["then"]["attribute"]}
        elif c["kind"] == "join":
            out.add(c["relation"])
    if meta.get("report") and meta["report"]["kind"] == "attr":
        out.add(meta["report"]["attribute"])
    if meta.get("action"):
        out.add(meta["action"]["attribute"])
    return out


def _aggregates(meta: dict[str, Any]) -> list[dict[str, Any]]:
    out = [c for c in meta["constraints"] if c["kind"] == "aggregate"]
    if meta.get("report") and meta["report"]["kind"] == "aggregate":
        out.append(meta["report"])
    return out


class _Copy:
    """A copy of the gold row (new key) and copies of its related rows, with the same aggregates."""

    def __init__(
        self,
        spec: Spec,
        meta: dict[str, Any],
        world: World,
        gold: Row,
        keys: Keys,
        rng: random.Random,
    ) -> None:
        target = spec.entity(meta["target"])
        keep = referenced(meta)
        fresh = draw_row(spec, target, world, keys, rng)
        self.row = {k: (gold[k] if k in keep else v) for k, v in fresh.items()}
        self.row[target.key] = fresh[target.key]
        self.children: dict[tuple[str, str], list[Row]] = {}
        self.parents: dict[str, list[Row]] = {}  # parent rows made for a join near-miss
        for agg in _aggregates(meta):
            pair = (agg["child"], agg["relation"])
            if pair in self.children:
                continue
            child = spec.entity(agg["child"])
            rows = []
            for r in world[child.name]:
                if r[agg["relation"]] == gold[target.key]:
                    rows.append(
                        {**r, child.key: keys.new(child), agg["relation"]: self.row[target.key]}
                    )
            self.children[pair] = rows

    def added(self) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {name: list(rows) for name, rows in self.parents.items()}
        for (child, _), rows in self.children.items():
            out.setdefault(child, []).extend(rows)
        return out


def _merged(world: World, extra: list[dict[str, list[Row]]]) -> World:
    out = {name: list(rows) for name, rows in world.items()}
    for part in extra:
        for name, rows in part.items():
            out[name].extend(rows)
    return out


def _break(
    spec: Spec,
    meta: dict[str, Any],
    c: dict[str, Any],
    copy: _Copy,
    world: World,
    keys: Keys,
    rng: random.Random,
) -> bool:
    target = spec.entity(meta["target"])
    row = copy.row
    if c["kind"] == "attr" or c["kind"] == "conditional":
        spot = c if c["kind"] == "attr" else c["then"]
        attr = target.attribute(spot["attribute"])
        assert attr is not None
        if c["kind"] == "conditional":
            row[c["if"]["attribute"]] = c["if"]["value"]
        row[attr.name] = _moved(attr, spot["op"], spot["value"], rng)
        return row[attr.name] is not None
    if c["kind"] == "join":
        parent = spec.entity(c["to"])
        same = [
            j for j in meta["constraints"] if j["kind"] == "join" and j["relation"] == c["relation"]
        ]
        pool = [
            p
            for p in world[c["to"]]
            if all(_meets(j["op"], p[j["attribute"]], j["value"]) == (j is not c) for j in same)
        ]
        if pool:
            row[c["relation"]] = rng.choice(pool)[parent.key]
            return True
        # no such parent yet: a copy of the gold's parent with the one attribute moved
        base = next(p for p in world[c["to"]] if p[parent.key] == row[c["relation"]])
        attr = parent.attribute(c["attribute"])
        assert attr is not None
        moved = _moved(attr, c["op"], c["value"], rng)
        if moved is None:
            return False
        made = {**base, parent.key: keys.new(parent), attr.name: moved}
        copy.parents.setdefault(parent.name, []).append(made)
        row[c["relation"]] = made[parent.key]
        return True
    return _break_aggregate(spec, c, copy, copy.row[target.key], world, keys, rng)


def _moved(attr: Attribute, op: str, bound: Any, rng: random.Random) -> Any:
    """A value of ``attr`` that breaks ``op bound`` by the least (None when there is none)."""
    if op == "eq":
        return rng.choice([v for v in (attr.values or (True, False)) if v != bound])
    return beyond(attr, op, bound)


def _meets(op: str, value: Any, bound: Any) -> bool:
    if value is None:
        return False
    return {"eq": value == bound, "le": value <= bound, "ge": value >= bound}[op]


def _break_aggregate(
    spec: Spec,
    c: dict[str, Any],
    copy: _Copy,
    parent: str,
    world: World,
    keys: Keys,
    rng: random.Random,
) -> bool:
    """Add or drop related rows of the copy until its aggregate is past the bound."""
    child = spec.entity(c["child"])
    rows = copy.children[(c["child"], c["relation"])]
    attr = child.attribute(c["attribute"]) if c["attribute"] else None
    for _ in range(AGGREGATE_STEPS):
        value = aggregate_value({c["child"]: rows}, c, parent)
        if value is None or not _meets(c["op"], value, c["value"]):
            return True
        raise_it = c["op"] == "le"
        if (raise_it and c["agg"] == "min") or (
            not raise_it and c["agg"] in ("count", "sum", "max")
        ):
            if not rows:
                return False
            pick = max if not raise_it else min
            rows.remove(pick(rows, key=lambda r: r[attr.name] if attr else 0))
        else:
            new = draw_row(spec, child, world, keys, rng)
            new[c["relation"]] = parent
            if attr is not None:
                hi = max(attr.max, c["value"] * 2 + 1)
                new[attr.name] = _typed(attr, hi if raise_it else attr.min)
            rows.append(new)
    return False


def _typed(attr: Attribute, value: float) -> Any:
    return int(round(value)) if attr.type == "int" else round(float(value), attr.decimals)


def near_misses(
    spec: Spec, meta: dict[str, Any], world: World, gold: Row, keys: Keys, rng: random.Random
) -> dict[str, list[Row]]:
    """Rows to add: one near-miss per condition (when one can be made) and one worse match."""
    target = spec.entity(meta["target"])
    objective = target.attribute(meta["objective"]["attribute"])
    assert objective is not None
    better = -1 if meta["objective"]["sense"] == "min" else 1
    added: list[dict[str, list[Row]]] = []
    for c in meta["constraints"]:
        for _ in range(TRIES):
            copy = _Copy(spec, meta, world, gold, keys, rng)
            if not _break(spec, meta, c, copy, world, keys, rng):
                continue
            improved = shift(objective, gold[objective.name], better * rng.randint(1, 3))
            if improved is not None:
                copy.row[objective.name] = improved
            part = {target.name: [copy.row], **copy.added()}
            trial = _merged(world, [*added, part])
            if failed_conditions(spec, meta, trial, copy.row) == [c["rule"]]:
                added.append(part)
                break
    copy = _Copy(spec, meta, world, gold, keys, rng)
    worse = shift(objective, gold[objective.name], -better * rng.randint(1, 4))
    if worse is not None:
        copy.row[objective.name] = worse
        part = {target.name: [copy.row], **copy.added()}
        if not failed_conditions(spec, meta, _merged(world, [*added, part]), copy.row):
            added.append(part)
    out: dict[str, list[Row]] = {}
    for part in added:
        for name, rows in part.items():
            out.setdefault(name, []).extend(rows)
    return out
