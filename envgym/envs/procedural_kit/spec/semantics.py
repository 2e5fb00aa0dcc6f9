"""What the schema cannot say about a spec: references resolve, names are unique, relations are
acyclic, every attribute has what its type needs, every task's building block has the tools a
gold solution (and an agent) needs.  Each failure is a :class:`SpecError` naming the path.
"""

from __future__ import annotations

from typing import Any

from envgym.envs.procedural_kit.spec.model import (
    FILTERABLE,
    NUMERIC,
    ORDERED,
    Aggregate,
    Attribute,
    Conditional,
    Entity,
    Join,
    Relation,
    Spec,
    SpecError,
    TaskTemplate,
    Tool,
    check_name,
    check_type_fields,
    parse_date,
)


def build(obj: dict[str, Any]) -> Spec:
    """A schema-valid spec object → :class:`Spec`, or the first semantic problem."""
    entities = tuple(_entity(f"entities[{i}]", raw) for i, raw in enumerate(obj["entities"]))
    _unique("entities", [e.name for e in entities])
    by_name = {e.name: e for e in entities}
    relations = tuple(
        _relation(f"relations[{i}]", raw, by_name) for i, raw in enumerate(obj.get("relations", []))
    )
    for i, r in enumerate(relations):
        if any(r.name == s.name and r.source == s.source for s in relations[:i]):
            raise SpecError(f"relations[{i}].name", f"duplicate relation {r.name!r} of {r.source}")
    _acyclic(relations)
    spec = Spec(
        name=obj["name"],
        category=obj["category"],
        description=obj.get("description", ""),
        entities=entities,
        relations=relations,
        tools=(),
        tasks=(),
    )
    tools = tuple(_tool(f"tools[{i}]", raw, spec) for i, raw in enumerate(obj["tools"]))
    _unique("tools", [t.name for t in tools])
    spec = Spec(**{**spec.__dict__, "tools": tools})
    tasks = tuple(_task(f"tasks[{i}]", raw, spec) for i, raw in enumerate(obj["tasks"]))
    return Spec(**{**spec.__dict__, "tasks": tasks})


def _unique(path: str, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise SpecError(f"{path}[{i}].name", f"duplicate name {name!r}")
        seen.add(name)


def _entity(path: str, raw: dict[str, Any]) -> Entity:
    name = raw["name"]
    check_name(f"{path}.name", name)
    attrs = tuple(_attribute(f"{path}.attributes[{i}]", a) for i, a in enumerate(raw["attributes"]))
    _unique(f"{path}.attributes", [a.name for a in attrs])
    key = next((a for a in attrs if a.name == raw["key"]), None)
    if key is None:
        raise SpecError(f"{path}.key", f"unknown attribute {raw['key']!r} of {name}")
    if key.type != "text" or not key.prefix:
        raise SpecError(f"{path}.key", "the key must be a text attribute with a prefix")
    if sum(a.type != "text" for a in attrs) < 1:
        raise SpecError(f"{path}.attributes", "an entity needs an attribute besides text")
    noun = raw.get("noun", name.replace("_", " "))
    return Entity(
        name=name,
        noun=noun,
        plural=raw.get("plural", noun + "s"),
        key=key.name,
        rows=raw.get("rows", 40),
        attributes=attrs,
    )


def _attribute(path: str, raw: dict[str, Any]) -> Attribute:
    check_name(f"{path}.name", raw["name"])
    check_type_fields(path, raw)
    kind = raw["type"]
    label = raw.get("label", raw["name"].replace("_", " "))
    fields: dict[str, Any] = {"name": raw["name"], "type": kind, "label": label}
    if kind == "text":
        if "prefix" in raw:
            fields["prefix"] = raw["prefix"]
        elif "vocabulary" not in raw:
            raise SpecError(path, "a text attribute needs a vocabulary (or a key prefix)")
        fields["vocabulary"] = tuple(raw.get("vocabulary", ()))
        fields["words"] = raw.get("words", 1)
    elif kind == "category":
        values = tuple(raw.get("values", ()))
        if len(values) < 2:
            raise SpecError(f"{path}.values", "a category needs at least two values")
        if len(set(values)) < len(values):
            raise SpecError(f"{path}.values", "duplicate category value")
        weights = tuple(raw.get("weights", ()))
        if weights and len(weights) != len(values):
            raise SpecError(f"{path}.weights", "needs one weight per value")
        fields.update(values=values, weights=weights)
    elif kind in NUMERIC:
        low, high = raw.get("min"), raw.get("max")
        for k, v in (("min", low), ("max", high)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SpecError(f"{path}.{k}", f"a {kind} attribute needs a numeric {k}")
            if kind == "int" and not isinstance(v, int):
                raise SpecError(f"{path}.{k}", "an int attribute needs whole-number bounds")
            if not 0 <= v <= 1e9:
                raise SpecError(f"{path}.{k}", "bounds must lie in 0 … 1e9")
        if high - low < 4:
            raise SpecError(f"{path}.max", "max must exceed min by at least 4")
        fields.update(
            min=low,
            max=high,
            unit=raw.get("unit", ""),
            decimals=raw.get("decimals", 2),
            skew=raw.get("skew", False),
        )
    elif kind == "date":
        low = parse_date(f"{path}.min", raw.get("min"))
        high = parse_date(f"{path}.max", raw.get("max"))
        if (high - low).days < 30:
            raise SpecError(f"{path}.max", "a date range must span at least 30 days")
        fields.update(min=low.isoformat(), max=high.isoformat())
    else:
        fields["p_true"] = raw.get("p_true", 0.5)
    return Attribute(**fields)


def _relation(path: str, raw: dict[str, Any], entities: dict[str, Entity]) -> Relation:
    for end in ("from", "to"):
        if raw[end] not in entities:
            raise SpecError(f"{path}.{end}", f"unknown entity {raw[end]!r}")
    check_name(f"{path}.name", raw["name"])
    if entities[raw["from"]].attribute(raw["name"]) is not None:
        raise SpecError(f"{path}.name", f"{raw['name']!r} is already an attribute of {raw['from']}")
    return Relation(raw["name"], raw["from"], raw["to"], raw.get("label", raw["name"]))


def _acyclic(relations: tuple[Relation, ...]) -> None:
    """Relations point from child to parent; a cycle (self-loops too) has no row to start from."""
    edges: dict[str, list[str]] = {}
    for r in relations:
        edges.setdefault(r.source, []).append(r.target)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(edges):
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = []
        while stack:
            node, i = stack.pop()
            if i == 0:
                if state.get(node) == 2:
                    continue
                if state.get(node) == 1:
                    loop = path[path.index(node) :] + [node]
                    raise SpecError("relations", "cyclic relation: " + " -> ".join(loop))
                state[node] = 1
                path.append(node)
            nexts = edges.get(node, [])
            if i < len(nexts):
                stack.append((node, i + 1))
                nxt = nexts[i]
                if state.get(nxt) == 1:
                    loop = path[path.index(nxt) :] + [nxt]
                    raise SpecError("relations", "cyclic relation: " + " -> ".join(loop))
                if state.get(nxt) != 2:
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                path.pop()


def _known_entity(path: str, spec: Spec, name: str) -> Entity:
    if all(e.name != name for e in spec.entities):
        raise SpecError(path, f"unknown entity {name!r}")
    return spec.entity(name)


def _known_attribute(path: str, entity: Entity, name: str, types: tuple[str, ...]) -> Attribute:
    attr = entity.attribute(name)
    if attr is None:
        raise SpecError(path, f"unknown attribute {name!r} of {entity.name}")
    if attr.type not in types:
        raise SpecError(path, f"{entity.name}.{name} is {attr.type}; needs one of {list(types)}")
    return attr


def _tool(path: str, raw: dict[str, Any], spec: Spec) -> Tool:
    kind = raw["kind"]
    check_name(f"{path}.name", raw["name"])
    fields: dict[str, Any] = {
        "name": raw["name"],
        "kind": kind,
        "description": raw.get("description", ""),
    }
    allowed = {"name", "kind", "description"} | {
        "lookup": {"entity"},
        "list": {"entity", "filters"},
        "search": {"entity", "attribute"},
        "aggregate": {"entity", "filters"},
        "follow": {"entity", "relation"},
        "action": {"entity", "attribute", "from", "to", "verb"},
    }[kind]
    extra = set(raw) - allowed
    if extra:
        raise SpecError(f"{path}.{sorted(extra)[0]}", f"not a field of a {kind} tool")
    if "entity" not in raw:
        raise SpecError(f"{path}.entity", f"a {kind} tool needs an entity")
    entity = _known_entity(f"{path}.entity", spec, raw["entity"])
    fields["entity"] = entity.name
    if kind in ("list", "aggregate"):
        filters = tuple(raw.get("filters", ()))
        for i, f in enumerate(filters):
            if spec.relation(entity.name, f) is None:
                _known_attribute(f"{path}.filters[{i}]", entity, f, FILTERABLE)
        if len(set(filters)) < len(filters):
            raise SpecError(f"{path}.filters", "duplicate filter")
        fields["filters"] = filters
    elif kind == "search":
        if "attribute" not in raw:
            raise SpecError(f"{path}.attribute", "a search tool needs a text attribute")
        _known_attribute(f"{path}.attribute", entity, raw["attribute"], ("text",))
        fields["attribute"] = raw["attribute"]
    elif kind == "follow":
        if "relation" not in raw or spec.relation(entity.name, raw["relation"]) is None:
            raise SpecError(f"{path}.relation", f"unknown relation of {entity.name}")
        fields["relation"] = raw["relation"]
    elif kind == "action":
        for k in ("attribute", "from", "to", "verb"):
            if k not in raw:
                raise SpecError(f"{path}.{k}", f"an action tool needs {k!r}")
        attr = _known_attribute(f"{path}.attribute", entity, raw["attribute"], ("category",))
        for k in ("from", "to"):
            if raw[k] not in attr.values:
                raise SpecError(f"{path}.{k}", f"{raw[k]!r} is not a value of {attr.name}")
        if raw["from"] == raw["to"]:
            raise SpecError(f"{path}.to", "an action must change the state")
        fields.update(attribute=attr.name, start=raw["from"], end=raw["to"], verb=raw["verb"])
    return Tool(**fields)


def _task(path: str, raw: dict[str, Any], spec: Spec) -> TaskTemplate:
    target = _known_entity(f"{path}.target", spec, raw["target"])
    moved = spec.state_attributes(target.name)

    def attr(where: str, entity: Entity, name: str, types: tuple[str, ...]) -> str:
        _known_attribute(where, entity, name, types)
        if entity is target and name in moved:
            raise SpecError(where, f"{name!r} is changed by an action; it cannot be a condition")
        return name

    if spec.tool("list", entity=target.name) is None:
        raise SpecError(f"{path}.target", f"no list tool for {target.name}")
    if spec.tool("lookup", entity=target.name) is None:
        raise SpecError(f"{path}.target", f"no lookup tool for {target.name}")
    filters = tuple(
        attr(f"{path}.filters[{i}]", target, f, FILTERABLE) for i, f in enumerate(raw["filters"])
    )
    objectives = tuple(
        attr(f"{path}.objectives[{i}]", target, f, ORDERED) for i, f in enumerate(raw["objectives"])
    )
    joins = []
    for i, j in enumerate(raw.get("joins", ())):
        where = f"{path}.joins[{i}]"
        rel = spec.relation(target.name, j["relation"])
        if rel is None:
            raise SpecError(
                f"{where}.relation", f"unknown relation {j['relation']!r} of {target.name}"
            )
        attr(f"{where}.attribute", spec.entity(rel.target), j["attribute"], FILTERABLE)
        if spec.tool("follow", entity=target.name, relation=rel.name) is None:
            raise SpecError(f"{where}.relation", f"no follow tool for relation {rel.name!r}")
        joins.append(Join(rel.name, j["attribute"]))
    aggregates = []
    for i, a in enumerate(raw.get("aggregates", ())):
        where = f"{path}.aggregates[{i}]"
        child = _known_entity(f"{where}.child", spec, a["child"])
        rel = spec.relation(child.name, a["relation"])
        if rel is None or rel.target != target.name:
            raise SpecError(
                f"{where}.relation",
                f"no relation {a['relation']!r} from {child.name} to {target.name}",
            )
        if a["op"] != "count" or "attribute" in a:
            if "attribute" not in a:
                raise SpecError(f"{where}.attribute", f"{a['op']} needs a numeric attribute")
            _known_attribute(f"{where}.attribute", child, a["attribute"], NUMERIC)
            if a["attribute"] in spec.state_attributes(child.name):
                raise SpecError(f"{where}.attribute", "an action changes it")
        tool = spec.tool("aggregate", entity=child.name)
        if tool is None or rel.name not in tool.filters:
            raise SpecError(where, f"no aggregate tool over {child.name} filtered by {rel.name!r}")
        aggregates.append(Aggregate(child.name, rel.name, a["op"], a.get("attribute", "")))
    conditionals = [
        Conditional(
            attr(f"{path}.conditionals[{i}].if", target, c["if"], ("category", "bool")),
            attr(f"{path}.conditionals[{i}].then", target, c["then"], ORDERED),
        )
        for i, c in enumerate(raw.get("conditionals", ()))
    ]
    budgets = tuple(
        attr(f"{path}.budgets[{i}]", target, b, NUMERIC)
        for i, b in enumerate(raw.get("budgets", ()))
    )
    reports = tuple(
        attr(f"{path}.reports[{i}]", target, r, NUMERIC)
        for i, r in enumerate(raw.get("reports", ()))
    )
    actions = []
    for i, name in enumerate(raw.get("actions", ())):
        tool = spec.tool("action", name=name)
        if tool is None or tool.entity != target.name:
            raise SpecError(f"{path}.actions[{i}]", f"no action tool {name!r} on {target.name}")
        actions.append(name)
    levels = tuple(sorted(set(raw.get("levels", (1, 2, 3, 4, 5)))))
    if max(levels) >= 3 and not joins and not aggregates:
        raise SpecError(f"{path}.levels", "levels 3-5 need a join or an aggregate to compose")
    return TaskTemplate(
        target=target.name,
        filters=filters,
        objectives=objectives,
        joins=tuple(joins),
        aggregates=tuple(aggregates),
        conditionals=tuple(conditionals),
        budgets=budgets,
        reports=reports,
        actions=tuple(actions),
        levels=levels,
    )
