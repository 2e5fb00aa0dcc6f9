"""Gold and greedy solutions of a spec-compiled environment: they see the data only through tools.

This file is the same in every compiled bundle (copied verbatim; docs/ENV_SPEC.md).  The task's
``metadata.plan`` names which of the bundle's tools serve each need (list, lookup, follow a
relation, aggregate, act); the conditions come from ``metadata`` as the prompt states them.

* ``solve_spec``: every candidate the list tool returns (all pages; a list row carries every
  attribute) is checked against every condition (joins through the follow tools, aggregates through the aggregate
  tools); the best one by the objective is acted on and submitted.
* ``greedy_spec``: the baseline: the first row the list tool returns under the task's direct
  filters, with no joins, aggregates, conditional rules or objective considered.
* ``shallow_spec``: a stronger baseline: the objective over the rows meeting the task's own
  attribute conditions, still without joins, aggregates or conditional rules.
"""

from __future__ import annotations

import json

PAGE = 50


def solve_spec(tools, task: dict) -> None:
    meta = task["metadata"]
    plan = meta["plan"]
    best = None
    for row in _all_pages(tools, plan):  # a list row carries every attribute a lookup does
        if not all(_holds(tools, meta, c, row) for c in meta["constraints"]):
            continue
        if best is None or _better(meta["objective"], row, best):
            best = row
    if best is None:
        raise RuntimeError(f"no {meta['target']} meets every condition of {task.get('id')!r}")
    _finish(tools, meta, best)


def greedy_spec(tools, task: dict) -> None:
    meta = task["metadata"]
    plan = meta["plan"]
    first = getattr(tools, plan["list"])(**plan["list_args"], page=1)
    if not first:
        raise RuntimeError("the list is empty under the task's filters")
    row = getattr(tools, plan["lookup"])(**{meta["key"]: first[0][meta["key"]]})
    _finish(tools, meta, row)


def shallow_spec(tools, task: dict) -> None:
    """A stronger baseline: the best row by the objective among those meeting the row's own
    attribute conditions; joins, aggregates and conditional rules are not considered."""
    meta = task["metadata"]
    plan = meta["plan"]
    own = [c for c in meta["constraints"] if c["kind"] == "attr"]
    best = None
    for row in _all_pages(tools, plan):
        if all(_holds(tools, meta, c, row) for c in own):
            if best is None or _better(meta["objective"], row, best):
                best = row
    if best is None:
        raise RuntimeError("no row meets the attribute conditions")
    _finish(tools, meta, best)


def _finish(tools, meta: dict, row: dict) -> None:
    key = row[meta["key"]]
    answer = {meta["target"]: key}
    report = meta.get("report")
    if report:
        if report["kind"] == "attr":
            answer[report["field"]] = row[report["attribute"]]
        else:
            answer[report["field"]] = _aggregate(tools, meta, report, key)
    action = meta.get("action")
    if action:
        getattr(tools, meta["plan"]["action"])(**{meta["key"]: key})
    tools.submit_result(answer_text=json.dumps(answer))


def _all_pages(tools, plan: dict) -> list:
    rows, page = [], 1
    while True:
        batch = getattr(tools, plan["list"])(**plan["list_args"], page=page)
        rows += batch
        if len(batch) < PAGE:
            return rows
        page += 1


def _better(objective: dict, row: dict, best: dict) -> bool:
    attr = objective["attribute"]
    return row[attr] < best[attr] if objective["sense"] == "min" else row[attr] > best[attr]


def _compare(op: str, value, bound) -> bool:
    if value is None:
        return False
    return {"eq": value == bound, "le": value <= bound, "ge": value >= bound}[op]


def _aggregate(tools, meta: dict, spec: dict, key: str):
    tool = getattr(tools, meta["plan"]["aggregate"][spec["child"]])
    args = {"op": spec["agg"], spec["relation"]: key}
    if spec["agg"] != "count":
        args["attribute"] = spec["attribute"]
    value = tool(**args)
    # compare at six places, as the verifier does: the tool's float total may differ in its last bit
    return round(value, 6) if isinstance(value, float) else value


def _holds(tools, meta: dict, c: dict, row: dict) -> bool:
    if c["kind"] == "attr":
        return _compare(c["op"], row[c["attribute"]], c["value"])
    if c["kind"] == "join":
        parent = getattr(tools, meta["plan"]["follow"][c["relation"]])(
            **{meta["key"]: row[meta["key"]]}
        )
        return _compare(c["op"], parent[c["attribute"]], c["value"])
    if c["kind"] == "aggregate":
        return _compare(c["op"], _aggregate(tools, meta, c, row[meta["key"]]), c["value"])
    when, then = c["if"], c["then"]
    if row[when["attribute"]] != when["value"]:
        return True
    return _compare(then["op"], row[then["attribute"]], then["value"])
