"""A task's conditions in plain words, built from the spec's nouns, labels and units.

Every value a verifier checks is stated; the answer format closes the prompt (a JSON object with
placeholders, which ``envgym check`` also submits as an exploit and the verifier rejects).
"""

from __future__ import annotations

from typing import Any

from envgym.envs.procedural_kit.spec.model import Attribute, Entity, Spec

_AGG = {"sum": "total", "avg": "average", "min": "smallest", "max": "largest"}


def _value(attr: Attribute, value: Any) -> str:
    if attr.type == "bool":
        return "yes" if value else "no"
    if attr.type == "number":
        text = f"{value:.2f}".rstrip("0").rstrip(".")
    else:
        text = str(value)
    return f"{text} {attr.unit}" if attr.unit else text


def _compare(attr: Attribute, op: str, value: Any) -> str:
    if op == "eq":
        return f"is {_value(attr, value)}"
    if attr.type == "date":
        return ("is on or before " if op == "le" else "is on or after ") + str(value)
    return ("is at most " if op == "le" else "is at least ") + _value(attr, value)


def _attr(entity: Entity, name: str) -> Attribute:
    attr = entity.attribute(name)
    assert attr is not None
    return attr


def _aggregate_phrase(spec: Spec, c: dict[str, Any]) -> str:
    child = spec.entity(c["child"])
    if c["agg"] == "count":
        return f"the number of its {child.plural}"
    return f"the {_AGG[c['agg']]} {_attr(child, c['attribute']).label} of its {child.plural}"


def condition(spec: Spec, meta: dict[str, Any], c: dict[str, Any]) -> str:
    target = spec.entity(meta["target"])
    if c["kind"] == "attr":
        attr = _attr(target, c["attribute"])
        if c.get("role") == "budget":
            return f"its {attr.label} must fit a budget of {_value(attr, c['value'])}"
        return f"its {attr.label} {_compare(attr, c['op'], c['value'])}"
    if c["kind"] == "join":
        rel = spec.relation(target.name, c["relation"])
        assert rel is not None
        attr = _attr(spec.entity(c["to"]), c["attribute"])
        return f"its {rel.label}'s {attr.label} {_compare(attr, c['op'], c['value'])}"
    if c["kind"] == "aggregate":
        child = spec.entity(c["child"])
        number = _attr(child, c["attribute"]) if c["attribute"] else None
        bound = c["value"] if number is None else _value(number, c["value"])
        word = "at most" if c["op"] == "le" else "at least"
        return f"{_aggregate_phrase(spec, c)} is {word} {bound}"
    when, then = c["if"], c["then"]
    a, b = _attr(target, when["attribute"]), _attr(target, then["attribute"])
    return (
        f"if its {a.label} is {_value(a, when['value'])}, its {b.label} "
        f"{_compare(b, then['op'], then['value'])}"
    )


def render(spec: Spec, meta: dict[str, Any]) -> str:
    target = spec.entity(meta["target"])
    objective = _attr(target, meta["objective"]["attribute"])
    low = meta["objective"]["sense"] == "min"
    if objective.type == "date":
        best = "earliest" if low else "latest"
    else:
        best = "lowest" if low else "highest"
    conditions = [condition(spec, meta, c) for c in meta["constraints"]]
    lines = [
        f"Find the {target.noun} with the {best} {objective.label} among the {target.plural} "
        "that meet every condition below:",
        *(f"- {text}" for text in conditions),
    ]
    action = meta.get("action")
    if action:
        lines.append(f"Then {action['verb']} that {target.noun}.")
    fields = {meta["target"]: f"<{target.key}>"}
    report = meta.get("report")
    if report:
        what = (
            f"its {_attr(target, report['attribute']).label}"
            if report["kind"] == "attr"
            else _aggregate_phrase(spec, report)
        )
        lines.append(f"Report {what} as {report['field']}.")
        fields[report["field"]] = "<number>"
    shown = ", ".join(
        f'"{k}": "{v}"' if k == meta["target"] else f'"{k}": {v}' for k, v in fields.items()
    )
    lines.append(
        f"Answer by calling submit_result with answer_text set to the JSON object {{{shown}}}."
    )
    return "\n".join(lines)
