"""The synthesis agent's search tool: a pluggable backend, offline by default.

DeepSeek-V3.2 §3.2.3 lets the agent "retrieve relevant data from the Internet".  Here the
network reaches only package registries, so the default backend, :class:`LocalCorpusSearch`,
ranks (BM25) a corpus built from (1) the small hand-written corpus shipped in
``envgym/synth_agents/corpus/*.jsonl`` — short reference notes on common general-agent domains — and
(2) the procedural categories' own reference data (trip-planning city notes, the retail
catalog and return policies, meeting-scheduling teams and rooms, logistics hubs).  Any object
with ``search(query, k) -> list[SearchHit]`` can replace it (a web API client, the local search
engine in envgym/tools/search).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Protocol

_WORD = re.compile(r"[a-z0-9]+")
CORPUS_DIR = Path(__file__).resolve().parent / "corpus"


@dataclass(frozen=True)
class SearchHit:
    title: str
    text: str
    source: str


class SearchBackend(Protocol):
    def search(self, query: str, k: int = 5) -> list[SearchHit]: ...


class LocalCorpusSearch:
    """BM25 (k1 = 1.2, b = 0.75) over a list of documents, in memory."""

    def __init__(self, docs: list[SearchHit]) -> None:
        self.docs = docs
        self._terms = [Counter(_WORD.findall(f"{d.title} {d.text}".lower())) for d in docs]
        self._lengths = [sum(t.values()) for t in self._terms]
        self._avg = sum(self._lengths) / len(docs) if docs else 0.0
        df: Counter[str] = Counter()
        for terms in self._terms:
            df.update(terms.keys())
        n = len(docs)
        self._idf = {w: math.log(1 + (n - c + 0.5) / (c + 0.5)) for w, c in df.items()}

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        words = _WORD.findall(query.lower())
        scored = []
        for i, terms in enumerate(self._terms):
            score = 0.0
            for w in words:
                f = terms.get(w, 0)
                if f:
                    score += (
                        self._idf[w]
                        * f
                        * 2.2
                        / (f + 1.2 * (0.25 + 0.75 * self._lengths[i] / self._avg))
                    )
            if score > 0:
                scored.append((score, i))
        return [self.docs[i] for _, i in sorted(scored, key=lambda s: (-s[0], s[1]))[: max(1, k)]]


@cache
def default_search() -> LocalCorpusSearch:
    """The shipped corpus plus the procedural categories' reference data."""
    docs: list[SearchHit] = []
    for path in sorted(CORPUS_DIR.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                d = json.loads(line)
                docs.append(SearchHit(d["title"], d["text"], f"corpus/{path.name}"))
    docs += _reference_docs()
    return LocalCorpusSearch(docs)


def _reference_docs() -> list[SearchHit]:
    from envgym.envs.meeting_scheduling import data as meetings
    from envgym.envs.retail_orders import reference as retail
    from envgym.envs.shipment_logistics import data as logistics
    from envgym.envs.trip_planning import reference as trip

    out = [
        SearchHit(
            f"{c.name}, {c.province}",
            f"{c.description} Local cuisine: {c.local_cuisine}. "
            f"Region: {c.region}. Population {c.population_millions} million.",
            "envgym/envs/trip_planning",
        )
        for c in trip.CITIES
    ]
    for category, (window, fee, brands, items) in retail.CATEGORIES.items():
        goods = ", ".join(f"{noun} (${lo}-${hi}, about {grams} g)" for noun, lo, hi, grams in items)
        out.append(
            SearchHit(
                f"Retail category: {category}",
                f"Return window {window} days, restocking fee "
                f"{fee}%. Brands: {', '.join(brands)}. Typical products: {goods}.",
                "envgym/envs/retail_orders",
            )
        )
    out.append(
        SearchHit(
            "Office teams and meeting rooms",
            f"Teams: {', '.join(meetings.TEAMS)}. Rooms: "
            f"{', '.join(meetings.ROOM_NAMES)}. Typical events: {', '.join(meetings.TITLES)}.",
            "envgym/envs/meeting_scheduling",
        )
    )
    out.append(
        SearchHit(
            "Freight modes",
            "; ".join(
                f"{mode}: about {speed} km/h, {rate} USD per kg per 100 km, capacity {lo}-{hi} kg"
                for mode, (speed, rate, (lo, hi), _) in logistics.MODES.items()
            ),
            "envgym/envs/shipment_logistics",
        )
    )
    return out
