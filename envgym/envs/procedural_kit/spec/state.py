"""Rows drawn from a spec (seeded) and written to ``state/db.sqlite``.

Values follow each attribute's declaration: categories by their weights, numbers uniform or
right-skewed (``skew``: most rows cheap, a few expensive, as prices and durations are), dates
uniform in their range, text joined from the vocabulary.  Children pick their parent with a
long-tailed preference (a few authors write many books), so aggregates over related rows vary.
Keys are ``PREFIX-NNNN`` with numbers drawn at random, so key order (the order list tools use)
says nothing about any attribute.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from envgym.envs.procedural_kit.spec.model import Attribute, Entity, Spec

Row = dict[str, Any]
World = dict[str, list[Row]]  # entity -> rows, each a dict of column -> value
_SQL_TYPES = {
    "text": "TEXT",
    "category": "TEXT",
    "int": "INTEGER",
    "number": "REAL",
    "date": "TEXT",
    "bool": "INTEGER",
}


class Keys:
    """Fresh unique keys per entity (the drawn rows' and the ones tasks plant later)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: dict[str, set[str]] = {}

    def new(self, entity: Entity) -> str:
        prefix = next(a.prefix for a in entity.attributes if a.name == entity.key)
        used = self.used.setdefault(entity.name, set())
        while True:
            key = f"{prefix}-{self.rng.randrange(1000, 10000)}"
            if key not in used:
                used.add(key)
                return key


def draw_value(attr: Attribute, rng: random.Random) -> Any:
    if attr.type == "text":
        words = rng.sample(attr.vocabulary, min(attr.words, len(attr.vocabulary)))
        return " ".join(words)
    if attr.type == "category":
        return rng.choices(attr.values, weights=attr.weights or None)[0]
    if attr.type == "bool":
        return rng.random() < attr.p_true
    if attr.type == "date":
        low, high = date.fromisoformat(attr.min), date.fromisoformat(attr.max)
        return (low + timedelta(days=rng.randrange((high - low).days + 1))).isoformat()
    share = rng.betavariate(1.3, 3.5) if attr.skew else rng.random()
    value = attr.min + share * (attr.max - attr.min)
    if attr.type == "int":
        return int(round(value))
    return round(value, attr.decimals) if attr.decimals else float(round(value))


def draw_row(spec: Spec, entity: Entity, world: World, keys: Keys, rng: random.Random) -> Row:
    row: Row = {}
    for attr in entity.attributes:
        row[attr.name] = keys.new(entity) if attr.name == entity.key else draw_value(attr, rng)
    for rel in spec.relations:
        if rel.source == entity.name:
            parents = world[rel.target]
            # long tail: the parent at position i is picked with weight 1/(i+1)
            weights = [1.0 / (i + 1) for i in range(len(parents))]
            row[rel.name] = rng.choices(parents, weights=weights)[0][spec.entity(rel.target).key]
    return row


def draw_world(spec: Spec, rng: random.Random, keys: Keys) -> World:
    world: World = {}
    for entity in spec.entity_order():
        world[entity.name] = []
        for _ in range(entity.rows):
            world[entity.name].append(draw_row(spec, entity, world, keys, rng))
    return world


def columns(spec: Spec, entity: Entity) -> list[tuple[str, str]]:
    cols = [(a.name, _SQL_TYPES[a.type]) for a in entity.attributes]
    cols += [(r.name, "TEXT") for r in spec.relations if r.source == entity.name]
    return cols


def write_db(path: Path, spec: Spec, world: World) -> Path:
    """Create ``path`` with one table per entity (rows in key order) and VACUUM it, so the same
    rows always give the same bytes.  Names are safe identifiers (``load_spec`` checked them)."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} already exists; the compiler never overwrites a database")
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN")
        for entity in spec.entity_order():
            cols = columns(spec, entity)
            decl = ", ".join(
                f'"{n}" {t}' + (" PRIMARY KEY" if n == entity.key else "") for n, t in cols
            )
            db.execute(f'CREATE TABLE "{entity.name}" ({decl})')
            for rel in spec.relations:
                if rel.source == entity.name:
                    db.execute(
                        f'CREATE INDEX "{entity.name}_{rel.name}" ON "{entity.name}" ("{rel.name}")'
                    )
            marks = ", ".join("?" for _ in cols)
            rows = sorted(world[entity.name], key=lambda r: r[entity.key])
            db.executemany(
                f'INSERT INTO "{entity.name}" VALUES ({marks})',
                [tuple(_sql(r[n]) for n, _ in cols) for r in rows],
            )
        db.execute("COMMIT")
        db.execute("VACUUM")
    finally:
        db.close()
    return path


def _sql(value: Any) -> Any:
    return int(value) if isinstance(value, bool) else value
