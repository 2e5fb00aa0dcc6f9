"""A drafted task judged on rows in memory, with the bundle's own verifier code.

``settle`` finds the gold row (the strict, unique best row meeting every condition; for an
action task one the action may move), the gold answer and one witness per rule, each proved by
``judge`` from ``bundle_files/verifier.py`` — the very code the bundle ships — so a task that
settles here passes the same checks in the sandbox.  The compiler settles every task again
after each new task plants its rows, so one task's near-misses never break another's gold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from envgym.envs.procedural_kit.spec.bundle_files import verifier as shipped
from envgym.envs.procedural_kit.spec.model import Spec
from envgym.envs.procedural_kit.spec.state import Row, World

NO_SUCH_KEY = "NONE-0000"  # matches no key: keys are PREFIX-NNNN with N from 1000


@dataclass
class Settled:
    gold: Row
    answer: dict[str, Any]
    witnesses: list[dict[str, Any]] = field(default_factory=list)


def memory_world(spec: Spec, world: World) -> shipped.World:
    return shipped.World(lambda name: world[name], {e.name: e.key for e in spec.entities})


def failed_conditions(spec: Spec, meta: dict[str, Any], world: World, row: Row) -> list[str]:
    w = memory_world(spec, world)
    return [c["rule"] for c in meta["constraints"] if shipped.violation(w, meta, c, row)]


def _answer(meta: dict[str, Any], w: shipped.World, row: Row) -> dict[str, Any] | None:
    out: dict[str, Any] = {meta["target"]: row[meta["key"]]}
    if meta.get("report"):
        value = shipped.report_value(w, meta, row)
        if value is None:
            return None
        out[meta["report"]["field"]] = value
    return out


def _failed(meta: dict[str, Any], w: shipped.World, answer: dict[str, Any]) -> list[str]:
    return [c["name"] for c in shipped.judge(meta, answer, w) if not c["passed"]]


def _submission(answer: dict[str, Any] | str) -> dict[str, Any]:
    return {"answer_text": answer if isinstance(answer, str) else json.dumps(answer)}


def ranked(spec: Spec, meta: dict[str, Any], world: World) -> list[Row]:
    """The rows meeting every condition, best first by the objective."""
    w = memory_world(spec, world)
    objective = meta["objective"]
    attr, sign = objective["attribute"], 1 if objective["sense"] == "min" else -1
    rows = [r for r in world[meta["target"]] if shipped.qualifies(w, meta, r)]
    return sorted(rows, key=lambda r: sign * r[attr])


def settle(
    spec: Spec, meta: dict[str, Any], world: World, *, witnesses: bool = True
) -> Settled | str:
    """The task's gold and witnesses on ``world`` (its initial state), or why it has none.

    Sets ``meta["action"]["states"]`` (every row's state at the start, which the verifier
    compares the final state with)."""
    w = memory_world(spec, world)
    key, rows = meta["key"], world[meta["target"]]
    objective = meta["objective"]
    attr = objective["attribute"]
    best = ranked(spec, meta, world)
    if not best:
        return "no row meets every condition"
    gold = best[0]
    if len(best) > 1 and best[1][attr] == gold[attr]:
        return f"two rows tie for the best {attr}"
    action = meta.get("action")
    if action:
        if gold[action["attribute"]] != action["from"]:
            return f"the best row is {gold[action['attribute']]!r}, the action needs {action['from']!r}"
        action["states"] = {r[key]: r[action["attribute"]] for r in rows}
    answer = _answer(meta, w, gold)
    if answer is None:
        return "the gold row has no value to report"
    # the gold answer must pass on the final state (the action applied, where there is one)
    if _failed(meta, _applied(meta, w, gold), answer):
        return "the gold answer fails its own verifier"
    if not witnesses:
        return Settled(gold=gold, answer=answer)
    found = _witnesses(meta, w, rows, gold, answer, best)
    if isinstance(found, str):
        return found
    return Settled(gold=gold, answer=answer, witnesses=found)


def _witnesses(
    meta: dict[str, Any],
    w: shipped.World,
    rows: list[Row],
    gold: Row,
    answer: dict[str, Any],
    ranked: list[Row],
) -> list[dict[str, Any]] | str:
    """One submission per rule that fails exactly that rule on the initial state."""
    target = meta["target"]
    candidates: list[tuple[dict[str, Any] | str, str]] = [
        ("{not json", "answer_text is not JSON"),
        ({**answer, target: NO_SUCH_KEY}, f"names no {target}"),
    ]
    by_rule: dict[str, Row] = {}
    for row in rows:
        failed = [c["rule"] for c in meta["constraints"] if shipped.violation(w, meta, c, row)]
        if len(failed) == 1 and failed[0] not in by_rule:
            by_rule[failed[0]] = row
    for rule, row in by_rule.items():
        candidates.append(
            ({**(_answer(meta, w, row) or answer), target: row[meta["key"]]}, f"breaks only {rule}")
        )
    for row in ranked[1:4]:
        other = _answer(meta, w, row)
        if other is not None:
            candidates.append((other, "meets every condition but is not the best"))
    report = meta.get("report")
    if report:
        wrong = dict(answer)
        wrong[report["field"]] = round(answer[report["field"]] + 1, 2)
        candidates.append((wrong, "the right row with its number one off"))
    if meta.get("action"):
        candidates.append((answer, "the right answer without the action done"))
    rules = [c["name"] for c in shipped.judge(meta, answer, _applied(meta, w, gold))]
    found: dict[str, dict[str, Any]] = {}
    for candidate, note in candidates:
        if isinstance(candidate, str):
            failed = ["valid_json"]
        else:
            failed = _failed(meta, w, candidate)
        if len(failed) == 1 and failed[0] in rules and failed[0] not in found:
            found[failed[0]] = {
                "rule": failed[0],
                "submission": _submission(candidate),
                "note": note,
            }
    missing = [r for r in rules if r not in found]
    if missing:
        return f"no witness for {missing} ({meta['target']} task)"
    return [found[r] for r in rules]


def _applied(meta: dict[str, Any], w: shipped.World, gold: Row) -> shipped.World:
    """The world after the gold action (the same world when the task has none)."""
    action = meta.get("action")
    if not action:
        return w
    rows = [dict(r) for r in w.rows(meta["target"]).values()]
    for r in rows:
        if r[meta["key"]] == gold[meta["key"]]:
            r[action["attribute"]] = action["to"]
    base = w.fetch
    return shipped.World(lambda name: rows if name == meta["target"] else base(name), w.keys)
