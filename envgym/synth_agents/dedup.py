"""Near-duplicate tasks: equal parameters and (nearly) the same words.

Two tasks of a category are near-duplicates when their ``metadata`` (the parameters solution
and verifier read) are equal *and* either their normalized prompts (lower-cased, punctuation
folded to spaces) are word-for-word the same, or they pose the question over the same
environment (same ``state/`` contents) with prompts sharing at least ``threshold`` of their
word 3-shingles (Jaccard).  Equal parameters matter: templated prompts that differ in one
shipment id share >90% of their shingles and are still different tasks; a task whose
parameters and wording both repeat another's is not.

The index is exact (every pair is compared within a category) with a length prefilter: two
sets can only reach Jaccard ``t`` when the smaller is at least ``t`` times the larger.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_WORD = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*")
THRESHOLD = 0.9


def shingles(text: str, n: int = 3) -> frozenset[str]:
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return frozenset([" ".join(words)])
    return frozenset(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def metadata_key(metadata: object) -> str:
    return json.dumps(metadata, sort_keys=True, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class Entry:
    key: str  # "<bundle name>/<task id>"
    state_hash: str
    meta: str
    normalized: str
    grams: frozenset[str]


@dataclass
class NearDuplicateIndex:
    threshold: float = THRESHOLD
    entries: dict[str, list[Entry]] = field(default_factory=dict)  # by category

    def find(
        self, category: str, prompt: str, state_hash: str, metadata: object
    ) -> tuple[str, float] | None:
        """The first indexed task this one near-duplicates, with its similarity."""
        grams = shingles(prompt)
        normalized = " ".join(_WORD.findall(prompt.lower()))
        meta = metadata_key(metadata)
        for e in self.entries.get(category, []):
            if e.meta != meta:
                continue
            if e.normalized == normalized:
                return e.key, 1.0
            if e.state_hash != state_hash:
                continue
            small, large = sorted((len(grams), len(e.grams)))
            if large and small < self.threshold * large:
                continue
            score = jaccard(grams, e.grams)
            if score >= self.threshold:
                return e.key, score
        return None

    def add(self, category: str, key: str, prompt: str, state_hash: str, metadata: object) -> None:
        normalized = " ".join(_WORD.findall(prompt.lower()))
        entry = Entry(key, state_hash, metadata_key(metadata), normalized, shingles(prompt))
        self.entries.setdefault(category, []).append(entry)
