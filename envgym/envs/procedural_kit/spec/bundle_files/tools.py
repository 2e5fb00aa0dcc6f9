"""The tools of a spec-compiled environment, built at import from ``tools.json`` beside this file.

This file is the same in every compiled bundle (copied verbatim; docs/ENV_SPEC.md).  The domain's
tools (``get_book``, ``find_books``, ``borrow_book`` …) are small closures over six typed templates
(lookup, list, search, aggregate, follow, action), each given its name, signature and docstring
from the table, so the agent sees ordinary typed tools.  Names from the table are checked to be
plain identifiers before any use; SQL takes them quoted and every value as a parameter.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from envgym.runtime import sqlite

PAGE = 50  # rows per page of a list or search
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_TYPES: dict[str, Any] = {
    "text": str,
    "category": str,
    "int": int,
    "number": float,
    "date": str,
    "bool": bool,
}


def submit_result(answer_text: str) -> str:
    """Submit the final answer; this ends the task.

    Args:
        answer_text: The answer as JSON text, in the format the task asks for.
    """
    return "submitted"


def _table() -> dict[str, Any]:
    path = Path(__file__).with_name("tools.json")
    with open(path, "rb") as fh:
        data = fh.read(4 * 1024 * 1024 + 1)
    if len(data) > 4 * 1024 * 1024:
        raise ValueError("tools.json is too big")
    return json.loads(data)


def _ident(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"tools.json: {name!r} is not a plain identifier")
    return name


def _q(name: str) -> str:
    return '"' + _ident(name) + '"'


class _Entity:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.name = _ident(raw["name"])
        self.noun = str(raw["noun"])
        self.plural = str(raw["plural"])
        self.key = _ident(raw["key"])
        self.attrs = {_ident(a["name"]): a for a in raw["attributes"]}
        self.relations = {_ident(r["name"]): r for r in raw["relations"]}
        self.columns = [*self.attrs, *self.relations]

    def row(self, raw: Any) -> dict[str, Any]:
        out = dict(raw)
        for name, attr in self.attrs.items():
            if attr["type"] == "bool" and out.get(name) is not None:
                out[name] = bool(out[name])
        return out

    def get(self, key: str) -> dict[str, Any]:
        cols = ", ".join(_q(c) for c in self.columns)
        row = (
            sqlite()
            .execute(f"SELECT {cols} FROM {_q(self.name)} WHERE {_q(self.key)} = ?", (key,))
            .fetchone()
        )
        if row is None:
            raise KeyError(f"no {self.noun} with {self.key} {key!r}")
        return self.row(row)


def _check(name: str, value: Any, kind: Any) -> None:
    """Arguments arrive as JSON: refuse the wrong type with a message a model can act on."""
    if value is None:
        return
    ok = (
        isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind is float
        else isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    )
    if not ok:
        raise TypeError(f"{name} must be {kind.__name__}, not {type(value).__name__}")


def _where(entity: _Entity, filters: list[str], args: dict[str, Any]) -> tuple[str, list[Any]]:
    clauses, params = [], []
    for f in filters:
        if f in entity.relations or entity.attrs[f]["type"] in ("category", "bool", "text"):
            if args.get(f) is not None:
                clauses.append(f"{_q(f)} = ?")
                params.append(args[f])
        else:
            for prefix, op in (("min_", ">="), ("max_", "<=")):
                if args.get(prefix + f) is not None:
                    clauses.append(f"{_q(f)} {op} ?")
                    params.append(args[prefix + f])
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _filter_params(entity: _Entity, filters: list[str]) -> list[tuple[str, Any, str]]:
    """(parameter, annotation, description) of each filter: equality or a min_/max_ range."""
    out: list[tuple[str, Any, str]] = []
    for f in filters:
        if f in entity.relations:
            rel = entity.relations[f]
            noun = _ENTITIES[rel["to"]].noun
            out.append((f, str | None, f"only rows whose {rel['label']} is this {noun} (its id)"))
            continue
        attr = entity.attrs[f]
        if attr["type"] == "category":
            # values known only at import: a checker cannot see a Literal built from data
            kind: Any = Literal[tuple(attr["values"])]  # type: ignore[misc]
            out.append((f, kind | None, f"only this {attr['label']}"))
        elif attr["type"] == "bool":
            out.append((f, bool | None, f"only rows whose {attr['label']} is this"))
        else:
            tp = _TYPES[attr["type"]]
            words = ("at least this", "at most this")
            if attr["type"] == "date":
                words = (
                    "on or after this date (YYYY-MM-DD)",
                    "on or before this date (YYYY-MM-DD)",
                )
            unit = f" ({attr['unit']})" if attr.get("unit") else ""
            for prefix, word in zip(("min_", "max_"), words, strict=True):
                out.append((prefix + f, tp | None, f"{attr['label']}{unit} {word}"))
    return out


def _define(
    name: str,
    summary: str,
    params: list[tuple[str, Any, str]],
    run: Callable[[dict[str, Any]], Any],
    required: int = 0,
) -> None:
    """Bind a tool ``name`` in this module: a typed signature over ``run(arguments)``."""
    _ident(name)
    if name in globals():
        raise ValueError(f"tools.json: tool {name!r} clashes with a name of tools.py")
    parameters = [
        inspect.Parameter(
            p,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=tp,
            **({} if i < required else {"default": None if p != "page" else 1}),
        )
        for i, (p, tp, _) in enumerate(params)
    ]
    signature = inspect.Signature(parameters)
    kinds = {p: (tp if tp in (str, int, float, bool) else None) for p, tp, _ in params}
    for p, tp, _ in params:
        base = [a for a in getattr(tp, "__args__", ()) if a is not type(None)]
        if kinds[p] is None and len(base) == 1 and base[0] in (str, int, float, bool):
            kinds[p] = base[0]

    def tool(**arguments: Any) -> Any:
        bound = signature.bind(**arguments)
        bound.apply_defaults()
        args = dict(bound.arguments)
        for p, kind in kinds.items():
            if kind is not None:
                _check(p, args[p], kind)
        return run(args)

    lines = [summary, "", "Args:"] + [f"    {p}: {d}" for p, _, d in params]
    tool.__name__ = tool.__qualname__ = name
    tool.__signature__ = signature  # type: ignore[attr-defined]  # inspect reads it; not declared
    tool.__annotations__ = {p: tp for p, tp, _ in params} | {"return": Any}
    tool.__doc__ = "\n".join(lines) if params else summary
    globals()[name] = tool


def _lookup(tool: dict[str, Any], e: _Entity) -> None:
    summary = tool["description"] or f"Everything about one {e.noun}, by its {e.key}."
    params = [(e.key, str, f"the {e.noun}'s {e.key}, e.g. as a list returns it")]
    _define(tool["name"], summary, params, lambda a: e.get(a[e.key]), required=1)


def _list(tool: dict[str, Any], e: _Entity) -> None:
    filters = [_ident(f) for f in tool["filters"]]
    summary = tool["description"] or (
        f"{e.plural.capitalize()} matching the filters, {PAGE} per page, ordered by {e.key}."
    )
    params = _filter_params(e, filters) + [("page", int, "page number, from 1")]

    def run(a: dict[str, Any]) -> list[dict[str, Any]]:
        where, values = _where(e, filters, a)
        page = max(1, int(a["page"] or 1))
        cols = ", ".join(_q(c) for c in e.columns)
        rows = sqlite().execute(
            f"SELECT {cols} FROM {_q(e.name)}{where} ORDER BY {_q(e.key)} LIMIT ? OFFSET ?",
            (*values, PAGE, (page - 1) * PAGE),
        )
        return [e.row(r) for r in rows]

    _define(tool["name"], summary, params, run)


def _search(tool: dict[str, Any], e: _Entity) -> None:
    attr = _ident(tool["attribute"])
    label = e.attrs[attr]["label"]
    summary = tool["description"] or f"{e.plural.capitalize()} whose {label} contains the words."
    params = [("query", str, f"words to find in the {label} (case-insensitive)")]
    params.append(("page", int, "page number, from 1"))

    def run(a: dict[str, Any]) -> list[dict[str, Any]]:
        needle = str(a["query"]).strip().lower()[:200]
        page = max(1, int(a["page"] or 1))
        rows = sqlite().execute(
            f"SELECT {_q(e.key)}, {_q(attr)} FROM {_q(e.name)} WHERE instr(lower({_q(attr)}), ?) > 0 "
            f"ORDER BY {_q(e.key)} LIMIT ? OFFSET ?",
            (needle, PAGE, (page - 1) * PAGE),
        )
        return [dict(r) for r in rows]

    _define(tool["name"], summary, params, run, required=1)


def _aggregate(tool: dict[str, Any], e: _Entity) -> None:
    filters = [_ident(f) for f in tool["filters"]]
    numeric = [n for n, a in e.attrs.items() if a["type"] in ("int", "number")]
    summary = tool["description"] or (
        f"Count {e.plural}, or the sum, min, max or average of one of their numbers, "
        "over the rows matching the filters (null when no row matches)."
    )
    params: list[tuple[str, Any, str]] = [
        ("op", Literal["count", "sum", "min", "max", "avg"], "count, sum, min, max or avg")
    ]
    if numeric:
        params.append(
            # a Literal built from data at import (a checker cannot see its values)
            ("attribute", Literal[tuple(numeric)] | None, "the number to aggregate (not for count)")  # type: ignore[misc]
        )
    params += _filter_params(e, filters)

    def run(a: dict[str, Any]) -> float | int | None:
        op = a["op"]
        if op not in ("count", "sum", "min", "max", "avg"):
            raise ValueError("op must be count, sum, min, max or avg")
        where, values = _where(e, filters, a)
        if op == "count":
            return (
                sqlite().execute(f"SELECT COUNT(*) FROM {_q(e.name)}{where}", values).fetchone()[0]
            )
        column = a.get("attribute")
        if column not in numeric:
            raise ValueError(f"{op} needs attribute, one of {', '.join(numeric)}")
        expr = f"{op.upper()}({_q(column)})"
        if op == "sum":
            expr = f"TOTAL({_q(column)})"  # 0.0 over no rows, like count's 0
        return sqlite().execute(f"SELECT {expr} FROM {_q(e.name)}{where}", values).fetchone()[0]

    _define(tool["name"], summary, params, run, required=1)


def _follow(tool: dict[str, Any], e: _Entity) -> None:
    rel = e.relations[_ident(tool["relation"])]
    parent = _ENTITIES[_ident(rel["to"])]
    summary = (
        tool["description"] or f"The {rel['label']} of a {e.noun}: the full {parent.noun} record."
    )
    params = [(e.key, str, f"the {e.noun}'s {e.key}")]

    def run(a: dict[str, Any]) -> dict[str, Any]:
        return parent.get(e.get(a[e.key])[rel["name"]])

    _define(tool["name"], summary, params, run, required=1)


def _action(tool: dict[str, Any], e: _Entity) -> None:
    attr, start, end = _ident(tool["attribute"]), tool["from"], tool["to"]
    summary = tool["description"] or (
        f"Change a {e.noun}'s {e.attrs[attr]['label']} from {start} to {end}."
    )
    params = [(e.key, str, f"the {e.noun}'s {e.key}")]

    def run(a: dict[str, Any]) -> dict[str, Any]:
        row = e.get(a[e.key])
        if row[attr] != start:
            raise ValueError(f"{e.noun} {a[e.key]} is {row[attr]}, not {start}")
        db = sqlite()
        db.execute(f"UPDATE {_q(e.name)} SET {_q(attr)} = ? WHERE {_q(e.key)} = ?", (end, a[e.key]))
        db.commit()
        return e.get(a[e.key])

    _define(tool["name"], summary, params, run, required=1)


_TABLE = _table()
_ENTITIES = {e.name: e for e in (_Entity(raw) for raw in _TABLE["entities"])}
_BUILDERS = {
    "lookup": _lookup,
    "list": _list,
    "search": _search,
    "aggregate": _aggregate,
    "follow": _follow,
    "action": _action,
}
for _raw in _TABLE["tools"]:
    _BUILDERS[_raw["kind"]](_raw, _ENTITIES[_ident(_raw["entity"])])
