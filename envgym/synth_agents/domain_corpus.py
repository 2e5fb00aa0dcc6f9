"""The domain corpus (``envgym/synth_agents/corpus/domains/*.json``): one hand-written note per
domain, each turned into a declarative spec by ``envgym.envs.procedural_kit.spec.writer``
(docs/ENV_SPEC.md, "Domain notes").  Notes are read lazily and once; a note that does not parse is
an error naming its file, never a domain silently missing from the list.
"""

from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path

from envgym.envs.procedural_kit.spec.note import DomainNote, NoteError, load_note_text

DOMAINS = Path(__file__).resolve().parent / "corpus" / "domains"
MAX_NOTES = 2000  # a bound on the directory, not a target


def normalize(name: str) -> str:
    """'Trip-Planning', 'trip_planning', 'tripPlanning ' -> 'trip planning' (the one rule every
    category name is matched by; ``envgym.synth_agents.categories`` uses it too)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name.strip())
    return " ".join(re.split(r"[\s\-_./]+", spaced.lower())).strip()


@functools.lru_cache(maxsize=1)
def notes() -> tuple[DomainNote, ...]:
    """Every note of the corpus, sorted by domain; :class:`NoteError` names a broken file."""
    paths = sorted(DOMAINS.glob("*.json"))[: MAX_NOTES + 1]
    if len(paths) > MAX_NOTES:
        raise NoteError(str(DOMAINS), f"more than {MAX_NOTES} notes")
    out = []
    for path in paths:
        try:
            out.append(load_note_text(path.read_bytes()))
        except NoteError as exc:
            raise NoteError(f"{path.name}: {exc.where}", exc.reason) from None
    return tuple(sorted(out, key=lambda n: n.domain))


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, DomainNote]:
    """Normalized domain names and aliases (spaces removed too) → note; first note wins."""
    index: dict[str, DomainNote] = {}
    for note in notes():
        for name in (note.domain, *note.aliases):
            key = normalize(name)
            for k in (key, key.replace(" ", "")):
                index.setdefault(k, note)
    return index


def find_note(name: str) -> DomainNote | None:
    """The note ``name`` (a domain or an alias, leniently spelled) means, or None."""
    key = normalize(name or "")
    return _index().get(key) or _index().get(key.replace(" ", "")) if key else None


def close_matches(name: str, n: int = 5) -> list[str]:
    """Up to ``n`` corpus domains spelled like ``name`` (for an error message)."""
    key = normalize(name or "")
    names = {normalize(x): note.domain for note in notes() for x in (note.domain, *note.aliases)}
    hits = difflib.get_close_matches(key, list(names), n=n * 3, cutoff=0.5)
    words = set(key.split())
    hits += [k for k in names if words & set(k.split())]
    return list(dict.fromkeys(names[h] for h in hits))[:n]


def domain_names() -> list[str]:
    return [n.domain for n in notes()]
