"""``write_spec(note, seed)``: a domain note (``note.py``) → a spec ``load_spec`` accepts.

Everything that varies is drawn from ``random.Random`` seeded by the domain and the seed, so a
seed is a reproducible toolset and two seeds usually differ in what an agent sees: which
entities and attributes exist, the names of attributes (a note's synonyms) and keys, the tool
names (the domain's verbs and generic synonyms), which filters each list and aggregate tool
takes, which actions exist, which task blocks (joins, aggregates, rules, budgets, objectives,
reports) a template offers, and how many rows each table holds.

The writer only builds what ``semantics.py`` demands (a list and a lookup tool per task target, a
follow tool per join, an aggregate tool over each child by its relation); ``load_spec`` remains
the judge, and the corpus test runs it on every note.
"""

from __future__ import annotations

import random
from typing import Any

from envgym.envs.procedural_kit.spec.note import (
    KEY_SUFFIXES,
    DomainNote,
    NoteAttribute,
    NoteEntity,
    parse_note,
)

# Shared vocabularies for text attributes a note marks "person" or "place".
PERSON = (
    "Ada Amir Bea Chen Dara Diaz Elif Emeka Farah Goran Hana Ines Jonas Kofi Lena Lin Mira "
    "Novak Omar Oduya Petra Priya Quinn Rafael Rossi Sato Selin Tamar Tomas Uma Vidal Wen "
    "Yara Zoran Okafor Larsen Haddad Moreau Weber Silva Park Reyes Jensen Kaur"
).split()
PLACE = (
    "North South East West Harbor Hill River Lake Park Central Old New Market Bridge Mill "
    "Station Forest Meadow Bay Castle Garden Valley Ridge Port Stone Oak Cedar Maple Elm"
).split()
GENERIC = {
    "lookup": ("get", "show", "fetch", "view", "describe", "lookup", "read", "open"),
    "list": ("find", "list", "browse", "filter", "query", "scan", "select", "match"),
    "search": ("search", "lookup", "match", "grep", "seek"),
    "aggregate": ("stats", "statistics", "summary", "totals", "metrics", "tally", "report"),
    "follow": ("get", "show", "fetch", "resolve", "trace", "open"),
}
FILTERABLE = ("category", "state", "bool", "int", "number", "date")
ORDERED = ("int", "number", "date")


def write_spec(note: DomainNote | dict[str, Any], seed: int) -> dict[str, Any]:
    """A spec object for ``note``; the same (note, seed) always gives the same spec."""
    if not isinstance(note, DomainNote):
        note = parse_note(note)
    rng = random.Random(f"spec-writer:{note.slug}:{seed}")
    return _Writer(note, rng).spec()


class _Writer:
    """One draw of a spec; methods fill the parts in dependency order."""

    def __init__(self, note: DomainNote, rng: random.Random) -> None:
        self.note, self.rng = note, rng
        self.names: dict[tuple[str, str], str] = {}  # (entity, canonical) -> chosen name
        self.tool_names: set[str] = set()
        self.action_names: dict[tuple[str, str, str], str] = {}  # one name per transition

    def spec(self) -> dict[str, Any]:
        note, rng = self.note, self.rng
        kept = self._entities()
        self.relations = [r for r in note.relations if r.source in kept and r.target in kept]
        self.actions = [
            a
            for a in note.actions
            if a.entity in kept and (rng.random() < 0.7 or a.entity == note.main)
        ]
        main_actions = [a for a in self.actions if a.entity == note.main]
        if len(main_actions) > 1:  # some seeds offer fewer of the main entity's actions
            drop = set(rng.sample(range(len(main_actions)), rng.randint(0, len(main_actions) - 1)))
            self.actions = [a for a in self.actions if a not in [main_actions[i] for i in drop]]
        self.moved = {(a.entity, a.attribute) for a in self.actions}
        self.attrs = {e: self._attributes(note.entity(e)) for e in kept}
        entities = [self._entity_spec(note.entity(e)) for e in kept]
        relations = [
            {"name": r.name, "from": r.source, "to": r.target, "label": r.name.replace("_", " ")}
            for r in self.relations
        ]
        tasks = self._tasks(kept)
        tools = self._tools(kept, tasks)
        return {
            "spec_version": 1,
            "name": note.slug,
            "category": note.domain,
            "description": note.about[:500],
            "entities": entities,
            "relations": relations,
            "tools": tools,
            "tasks": tasks,
        }

    # -- entities and attributes -------------------------------------------------------------

    def _entities(self) -> list[str]:
        """The main entity, each other with a chance, pruned to what stays connected to main."""
        note, rng = self.note, self.rng
        chosen = {note.main} | {e.name for e in note.entities if rng.random() < 0.75}
        neighbours = {
            r.source if r.target == note.main else r.target
            for r in note.relations
            if note.main in (r.source, r.target)
        }
        if not chosen & neighbours:
            chosen.add(rng.choice(sorted(neighbours)))
        connected = {note.main}
        grew = True
        while grew:
            grew = False
            for r in note.relations:
                ends = {r.source, r.target}
                if ends <= chosen and ends & connected and not ends <= connected:
                    connected |= ends
                    grew = True
        return [e.name for e in note.entities if e.name in connected]

    def _attributes(self, entity: NoteEntity) -> list[NoteAttribute]:
        """Drop a few optional attributes; the main entity keeps enough for level 5."""
        rng, note = self.rng, self.note
        is_main = entity.name == note.main
        must = {a.attribute for a in self.actions if a.entity == entity.name}
        if is_main:
            must |= {r.when for r in note.rules} | {r.then for r in note.rules}
        kept = list(entity.attributes)
        for a in rng.sample(list(entity.attributes), len(entity.attributes)):
            if a.name in must or rng.random() > (0.2 if is_main else 0.3):
                continue
            rest = [b for b in kept if b is not a]
            if self._enough(entity.name, rest, is_main):
                kept = rest
        for a in kept:
            self.names[(entity.name, a.name)] = rng.choice(a.names)
        return kept

    def _enough(self, entity: str, attrs: list[NoteAttribute], is_main: bool) -> bool:
        conds = [a for a in attrs if a.type != "text" and (entity, a.name) not in self.moved]
        if not is_main:
            return len(conds) >= 2
        # Level 5 draws three filters, a rule (two attributes) and a budget: six is what it
        # uses, so the main entity never drops below six conditions (or what the note has).
        return len(conds) >= 6 and any(a.type in ("int", "number") for a in conds)

    def _entity_spec(self, e: NoteEntity) -> dict[str, Any]:
        rng = self.rng
        key = f"{e.name}_{rng.choice(KEY_SUFFIXES)}"
        attrs: list[dict[str, Any]] = [{"name": key, "type": "text", "prefix": e.prefix}]
        attrs += [self._attribute_spec(e.name, a) for a in self.attrs[e.name]]
        return {
            "name": e.name,
            "noun": e.name.replace("_", " "),
            "plural": e.plural.replace("_", " "),
            "key": key,
            "rows": rng.randint(*e.rows),
            "attributes": attrs,
        }

    def _attribute_spec(self, entity: str, a: NoteAttribute) -> dict[str, Any]:
        name = self.names[(entity, a.name)]
        out: dict[str, Any] = {"name": name, "type": a.type, "label": name.replace("_", " ")}
        if a.type == "text":
            vocab = PERSON if a.pool == "person" else PLACE if a.pool == "place" else a.values
            out.update(vocabulary=list(vocab), words=a.words)
        elif a.type in ("category", "state"):
            out.update(type="category", values=list(a.values))
            if a.type == "state":  # most rows start where the actions start
                out["weights"] = [4] + [1] * (len(a.values) - 1)
        elif a.type == "bool":
            out["p_true"] = a.p_true
        else:
            out.update(min=a.low, max=a.high)
            if a.type != "date":
                if a.unit:
                    out["unit"] = a.unit
                if a.skew:
                    out["skew"] = True
        return out

    # -- task templates ---------------------------------------------------------------------

    def _conds(self, entity: str, types: tuple[str, ...]) -> list[str]:
        return [
            self.names[(entity, a.name)]
            for a in self.attrs[entity]
            if a.type in types and (entity, a.name) not in self.moved
        ]

    def _wide(self, entity: str) -> list[str]:
        """Ordered attributes with room for a strict best row: an int over a handful of values
        (a 1-5 priority) ties at the top in most draws, so it is no objective."""
        return [
            self.names[(entity, a.name)]
            for a in self.attrs[entity]
            if a.type in ("number", "date") or (a.type == "int" and a.high - a.low >= 20)
            if (entity, a.name) not in self.moved
        ]

    def _tasks(self, kept: list[str]) -> list[dict[str, Any]]:
        rng, note, main = self.rng, self.note, self.note.main
        filters = rng.sample(self._conds(main, FILTERABLE), len(self._conds(main, FILTERABLE)))
        task: dict[str, Any] = {"target": main, "filters": filters}
        joins = []
        for r in self.relations:
            if r.source == main:
                options = self._conds(r.target, FILTERABLE)
                for attr in rng.sample(options, min(len(options), rng.randint(1, 2))):
                    joins.append({"relation": r.name, "attribute": attr})
        aggregates = []
        for r in self.relations:
            if r.target == main:
                aggregates.append({"child": r.source, "relation": r.name, "op": "count"})
                numbers = self._conds(r.source, ("int", "number"))
                if numbers and rng.random() < 0.7:
                    op = rng.choice(("sum", "min", "max", "avg"))
                    aggregates.append(
                        {
                            "child": r.source,
                            "relation": r.name,
                            "op": op,
                            "attribute": rng.choice(numbers),
                        }
                    )
        rules = [
            {"if": self.names[(main, r.when)], "then": self.names[(main, r.then)]}
            for r in note.rules
            if (main, r.when) not in self.moved
        ]
        if not rules:  # a note without a usable rule: pair a category with an ordered attribute
            whens, thens = (
                self._conds(main, ("category", "state", "bool")),
                self._conds(main, ORDERED),
            )
            if whens and thens:
                rules = [{"if": rng.choice(whens), "then": rng.choice(thens)}]
        numbers = self._conds(main, ("int", "number"))
        ordered = self._wide(main) or self._conds(main, ORDERED)
        task.update(joins=joins, aggregates=aggregates, conditionals=rules)
        task["budgets"] = rng.sample(numbers, 1)
        task["objectives"] = rng.sample(ordered, rng.randint(1, min(3, len(ordered))))
        task["reports"] = rng.sample(numbers, rng.randint(1, min(2, len(numbers))))
        task["actions"] = [self._action_name(a) for a in self.actions if a.entity == main]
        if not joins and not aggregates:
            task["levels"] = [1, 2]
        tasks = [task]
        second = [
            e
            for e in kept
            if e != main and len(self._conds(e, FILTERABLE)) >= 2 and self._conds(e, ORDERED)
        ]
        if second and rng.random() < 0.5:
            e = rng.choice(second)
            tasks.append(
                {
                    "target": e,
                    "filters": self._conds(e, FILTERABLE),
                    "objectives": [rng.choice(self._wide(e) or self._conds(e, ORDERED))],
                    "reports": self._conds(e, ("int", "number"))[:1],
                    "levels": [1, 2],
                }
            )
        return tasks

    # -- tools --------------------------------------------------------------------------------

    def _verb(self, kind: str) -> str:
        domain = self.note.verbs.get(kind, ())
        pool = list(domain) * 2 + list(GENERIC[kind])  # the domain's own words come first
        return self.rng.choice(pool)

    def _name(self, candidates: list[str]) -> str:
        for c in candidates:
            c = c[:40].rstrip("_")
            if c not in self.tool_names and c not in ("submit_result", "page"):
                self.tool_names.add(c)
                return c
        raise AssertionError("unreachable: the last candidate is numbered")

    def _unique(self, base: str) -> str:
        return self._name([base] + [f"{base}_{i}" for i in range(2, 50)])

    def _action_name(self, a: Any) -> str:
        key = (a.entity, a.attribute, a.end)
        if key not in self.action_names:
            verb = self.rng.choice((a.verb,) * 2 + a.synonyms)
            self.action_names[key] = self._unique(f"{verb}_{a.entity}")
        return self.action_names[key]

    def _tools(self, kept: list[str], tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rng, note = self.rng, self.note
        targets = {t["target"] for t in tasks}
        tools: list[dict[str, Any]] = []
        for e in kept:
            ent = note.entity(e)
            if e in targets or rng.random() < 0.6:
                name = rng.choice(
                    (
                        f"{self._verb('lookup')}_{e}",
                        f"{e}_{rng.choice(('details', 'info', 'record'))}",
                    )
                )
                tools.append({"name": self._unique(name), "kind": "lookup", "entity": e})
            if e in targets or rng.random() < 0.5:
                options = self._conds(e, FILTERABLE) + [
                    r.name for r in self.relations if r.source == e
                ]
                filters = rng.sample(options, rng.randint(min(2, len(options)), len(options)))
                name = rng.choice(
                    (
                        f"{self._verb('list')}_{ent.plural}",
                        f"{ent.plural}_by_{rng.choice(('filter', 'criteria'))}",
                    )
                )
                tools.append(
                    {"name": self._unique(name), "kind": "list", "entity": e, "filters": filters}
                )
            texts = [self.names[(e, a.name)] for a in self.attrs[e] if a.type == "text"]
            if texts and rng.random() < 0.6:
                attr = rng.choice(texts)
                name = rng.choice(
                    (f"{self._verb('search')}_{ent.plural}", f"{self._verb('search')}_{e}_{attr}")
                )
                tools.append(
                    {"name": self._unique(name), "kind": "search", "entity": e, "attribute": attr}
                )
        for r in self.relations:
            joined = any(
                j["relation"] == r.name
                for t in tasks
                for j in t.get("joins", ())
                if t["target"] == r.source
            )
            if joined or rng.random() < 0.4:
                name = rng.choice(
                    (f"{self._verb('follow')}_{r.source}_{r.name}", f"{r.name}_of_{r.source}")
                )
                tools.append(
                    {
                        "name": self._unique(name),
                        "kind": "follow",
                        "entity": r.source,
                        "relation": r.name,
                    }
                )
        for e in kept:
            needed = [
                a["relation"] for t in tasks for a in t.get("aggregates", ()) if a["child"] == e
            ]
            rels = [r.name for r in self.relations if r.source == e]
            if needed or (rels and rng.random() < 0.4):
                extra = [
                    f
                    for f in self._conds(e, ("category", "state", "bool")) + rels
                    if f not in needed
                ]
                filters = list(dict.fromkeys(needed)) + rng.sample(
                    extra, rng.randint(0, len(extra))
                )
                name = rng.choice(
                    (
                        f"{e}_{self._verb('aggregate')}",
                        f"{self._verb('aggregate')}_{note.entity(e).plural}",
                    )
                )
                tools.append(
                    {
                        "name": self._unique(name),
                        "kind": "aggregate",
                        "entity": e,
                        "filters": filters[:12],
                    }
                )
        for a in self.actions:
            tools.append(
                {
                    "name": self._action_name(a),
                    "kind": "action",
                    "entity": a.entity,
                    "attribute": self.names[(a.entity, a.attribute)],
                    "from": a.start,
                    "to": a.end,
                    "verb": a.verb.replace("_", " "),
                }
            )
        return tools[:40]
