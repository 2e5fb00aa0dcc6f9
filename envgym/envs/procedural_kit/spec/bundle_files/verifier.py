"""Verifier of a spec-compiled environment: one check per rule the task sets, judged on the state.

This file is the same in every compiled bundle (copied verbatim; docs/ENV_SPEC.md); the task's
``metadata`` names the rules.  Checks, in stages (a stage is reported only when every earlier one
passed, so each rule can fail alone and has a per-rule witness):

1. ``valid_json``: answer_text is a JSON object with the fields the task asks for;
2. ``<target>_exists``: it names a row of the target entity;
3. one check per condition: attribute filters, joins over relations, aggregates over related
   rows, conditional rules, budgets;
4. ``best_<attribute>``: no other row meeting every condition is as good or better;
   ``<field>_correct``: the reported number equals the row's own;
5. ``<action>_done``: the row was moved to the action's end state, and no other row's state
   changed (``metadata.action.states``: every row's state at the start).

``judge`` is pure (rows come from a ``World``), so the compiler runs this very code on rows in
memory while it draws tasks, and the bundle runs it on ``db.sqlite``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from envgym.runtime import sqlite

TOLERANCE = 0.006  # a reported number is rounded to cents; the exact value may sit half a cent off
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def verify_spec(submission: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    meta = task.get("metadata") or {}
    answer, problem = read_answer(submission, answer_fields(meta))
    if answer is None:
        return {"checks": [_check("valid_json", [problem])]}
    return {"checks": judge(meta, answer, World(_fetch, meta["keys"]))}


def answer_fields(meta: dict[str, Any]) -> list[str]:
    report = meta.get("report")
    return [meta["target"]] + ([report["field"]] if report else [])


def read_answer(submission: dict[str, Any], fields: list[str]) -> tuple[dict | None, str]:
    text = submission.get("answer_text")
    if not isinstance(text, str) or not text.strip():
        return None, "answer_text is missing or empty"
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"answer_text is not JSON: {exc.msg}"
    except (RecursionError, ValueError):  # nesting past the parser's stack, 10**5000
        return None, "answer_text is not a readable JSON object"
    if not isinstance(answer, dict):
        return None, "answer_text must be a JSON object"
    missing = [f for f in fields if f not in answer]
    if missing:
        return None, f"missing fields: {', '.join(missing)}"
    return answer, ""


def _fetch(entity: str) -> list[dict[str, Any]]:
    if not _NAME.match(entity):
        raise ValueError(f"not an entity name: {entity!r}")
    return [dict(r) for r in sqlite().execute(f'SELECT * FROM "{entity}"')]


class World:
    """Rows by entity, read once per verdict; children grouped by the relation they follow."""

    def __init__(self, fetch: Callable[[str], list[dict[str, Any]]], keys: dict[str, str]) -> None:
        self.fetch = fetch
        self.keys = keys
        self._rows: dict[str, dict[str, dict[str, Any]]] = {}
        self._children: dict[tuple[str, str], dict[Any, list[dict[str, Any]]]] = {}

    def rows(self, entity: str) -> dict[str, dict[str, Any]]:
        if entity not in self._rows:
            key = self.keys[entity]
            self._rows[entity] = {r[key]: r for r in self.fetch(entity)}
        return self._rows[entity]

    def children(self, child: str, relation: str, parent_key: Any) -> list[dict[str, Any]]:
        if (child, relation) not in self._children:
            groups: dict[Any, list[dict[str, Any]]] = {}
            for row in self.rows(child).values():
                groups.setdefault(row[relation], []).append(row)
            self._children[(child, relation)] = groups
        return self._children[(child, relation)].get(parent_key, [])


def _check(name: str, problems: list[str]) -> dict[str, Any]:
    return {"name": name, "passed": not problems, "detail": "; ".join(problems[:3])}


def number(value: Any) -> float | None:
    """A finite JSON number as float; None for anything else (bools, 10**400, inf, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if abs(out) != float("inf") and out == out else None


def holds(op: str, value: Any, bound: Any) -> bool:
    if value is None:
        return False
    if op == "eq":
        return value == bound
    if op == "le":
        return value <= bound
    if op == "ge":
        return value >= bound
    raise ValueError(f"unknown comparison {op!r}")


def aggregate(world: World, spec: dict[str, Any], parent_key: Any) -> float | None:
    return aggregate_rows(spec, world.children(spec["child"], spec["relation"], parent_key))


def aggregate_rows(spec: dict[str, Any], rows: list[dict[str, Any]]) -> float | None:
    """count, sum, min, max or avg of ``spec["attribute"]`` over ``rows`` (None: nothing to
    take a min, max or average of)."""
    if spec["agg"] == "count":
        return len(rows)
    values = [r[spec["attribute"]] for r in rows if r[spec["attribute"]] is not None]
    # fsum is exact, so the order rows come in cannot move a total across a bound; six places
    # are far below the cents data carries and above the noise of SQLite's own summing
    if spec["agg"] == "sum":
        return round(math.fsum(values), 6)
    if not values:
        return None
    if spec["agg"] == "min":
        return min(values)
    if spec["agg"] == "max":
        return max(values)
    return round(math.fsum(values) / len(values), 6)


def violation(world: World, meta: dict[str, Any], c: dict[str, Any], row: dict[str, Any]) -> str:
    """Why ``row`` breaks condition ``c`` ("" when it does not)."""
    kind = c["kind"]
    if kind == "attr":
        value = row[c["attribute"]]
        ok = holds(c["op"], value, c["value"])
        return "" if ok else f"{c['attribute']} is {value!r}, needs {c['op']} {c['value']!r}"
    if kind == "join":
        parent = world.rows(c["to"]).get(row[c["relation"]])
        value = None if parent is None else parent[c["attribute"]]
        ok = holds(c["op"], value, c["value"])
        return "" if ok else f"its {c['relation']}'s {c['attribute']} is {value!r}"
    if kind == "aggregate":
        value = aggregate(world, c, row[meta["key"]])
        ok = holds(c["op"], value, c["value"])
        return "" if ok else f"{c['agg']} of {c['child']} rows is {value!r}"
    if kind == "conditional":
        when, then = c["if"], c["then"]
        if row[when["attribute"]] != when["value"]:
            return ""
        value = row[then["attribute"]]
        ok = holds(then["op"], value, then["value"])
        return (
            ""
            if ok
            else f"{when['attribute']} is {when['value']!r} but {then['attribute']} is {value!r}"
        )
    raise ValueError(f"unknown condition kind {kind!r}")


def report_value(world: World, meta: dict[str, Any], row: dict[str, Any]) -> float | None:
    report = meta["report"]
    if report["kind"] == "attr":
        return row[report["attribute"]]
    return aggregate(world, report, row[meta["key"]])


def qualifies(world: World, meta: dict[str, Any], row: dict[str, Any]) -> bool:
    return all(not violation(world, meta, c, row) for c in meta["constraints"])


def judge(meta: dict[str, Any], answer: dict[str, Any], world: World) -> list[dict[str, Any]]:
    """The checks of a parsed answer, in stages (see the module docstring)."""
    target, key = meta["target"], meta["key"]
    rows = world.rows(target)
    chosen = answer[target]
    row = rows.get(chosen) if isinstance(chosen, str) else None
    checks = [_check("valid_json", [])]
    checks.append(_check(f"{target}_exists", [] if row else [f"no {target} {chosen!r}"]))
    if row is None:
        return checks
    stage = [
        _check(c["rule"], _listed(violation(world, meta, c, row))) for c in meta["constraints"]
    ]
    checks += stage
    if not all(c["passed"] for c in stage):
        return checks
    stage = []
    objective = meta.get("objective")
    if objective:
        attr, lower = objective["attribute"], objective["sense"] == "min"
        rivals = [
            other[key]
            for other in rows.values()
            if other[key] != row[key]
            and other[attr] is not None
            and (other[attr] <= row[attr] if lower else other[attr] >= row[attr])
            and qualifies(world, meta, other)
        ]
        detail = (
            [f"{rivals[0]} also qualifies with {attr} {rows[rivals[0]][attr]!r}"] if rivals else []
        )
        stage.append(_check(objective["rule"], detail))
    report = meta.get("report")
    if report:
        expected, claimed = report_value(world, meta, row), number(answer[report["field"]])
        bad = expected is None or claimed is None or abs(claimed - expected) > TOLERANCE
        stage.append(
            _check(
                report["rule"],
                [f"{report['field']} {answer[report['field']]!r} != {expected!r}"] if bad else [],
            )
        )
    checks += stage
    if not all(c["passed"] for c in stage):
        return checks
    action = meta.get("action")
    if action:
        attr, states = action["attribute"], action["states"]
        moved = sorted(k for k, r in rows.items() if r[attr] != states.get(k))
        problems = []
        if row[attr] != action["to"]:
            problems.append(f"{row[key]} is {row[attr]!r}, not {action['to']!r}")
        elif moved != [row[key]]:
            problems.append(f"other rows changed too: {[k for k in moved if k != row[key]][:3]}")
        checks.append(_check(action["rule"], problems))
    return checks


def _listed(problem: str) -> list[str]:
    return [problem] if problem else []
