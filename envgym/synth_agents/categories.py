"""Procedural categories: the offline, seeded generators ``envgym synth --agent procedural`` runs.

Names are matched leniently — case, spaces, hyphens, underscores and camelCase do not matter
("Trip Planning", "trip-planning", "tripPlanning" all name ``trip planning``) and each category
has a few aliases ("retail", "meetings", "logistics").  Any domain of the corpus
(``envgym/synth_agents/corpus/domains``, ``envgym.synth_agents.domain_corpus``) is a category too:
its note is written into a declarative spec with the job's seed
(``envgym.envs.procedural_kit.spec.writer``), so two seeds give two toolsets, and compiled offline.
The hand-registered categories above win a name both know (library loans, clinic appointments and
insurance claims keep their reviewed, hand-written specs).  An empty or unknown name raises
:class:`UnknownCategory` listing the registered ones and the closest corpus domains.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from envgym.synth_agents.domain_corpus import close_matches, domain_names, find_note, normalize

Builder = Callable[
    [Path, int, int, Sequence[int], "int | None"], Path
]  # (out, seed, n_tasks, difficulties, max_rows) -> out


class UnknownCategory(ValueError):
    """The name matches no procedural category."""


@dataclass(frozen=True)
class ProceduralCategory:
    name: str
    slug: str  # file-name safe, used in bundle names
    aliases: tuple[str, ...]
    description: str
    build: Builder
    spec_written: bool = False  # compiled from a declarative spec: its world size can be capped


def _trip(
    out: Path, seed: int, n_tasks: int, difficulties: Sequence[int], max_rows: int | None
) -> Path:
    from envgym.envs.trip_planning.build import build_bundle

    _fixed_size("trip planning", max_rows)
    return build_bundle(
        out,
        seed=seed,
        n_tasks=n_tasks,
        difficulties=tuple(difficulties),
        include_worked_example=False,
    )


def _fixed_size(family: str, max_rows: int | None) -> None:
    if max_rows is not None:
        raise ValueError(
            f"{family} is a hand-written family with fixed tables: max_rows applies only to "
            "categories compiled from a spec"
        )


def _kit(package: str) -> Builder:
    """The builder of a procedural-kit category (``<package>.build.build_bundle``), imported
    only when called: building one category should not import the others."""

    def build(
        out: Path, seed: int, n_tasks: int, difficulties: Sequence[int], max_rows: int | None
    ) -> Path:
        _fixed_size(package, max_rows)
        module = importlib.import_module(f"{package}.build")
        return module.build_bundle(out, seed=seed, n_tasks=n_tasks, difficulties=difficulties)

    return build


def _spec(example: str) -> Builder:
    """A category written as a declarative spec
    (envgym/envs/procedural_kit/spec/examples/<example>.json, docs/ENV_SPEC.md), compiled offline;
    imported only when called."""

    def build(
        out: Path, seed: int, n_tasks: int, difficulties: Sequence[int], max_rows: int | None
    ) -> Path:
        from envgym.envs.procedural_kit.spec.compile import compile_example

        return compile_example(
            example, out, seed=seed, n_tasks=n_tasks, difficulties=difficulties, max_rows=max_rows
        )

    return build


def _written(domain: str) -> Builder:
    """A corpus domain: its note → a spec written with the job's seed → a compiled bundle."""

    def build(
        out: Path, seed: int, n_tasks: int, difficulties: Sequence[int], max_rows: int | None
    ) -> Path:
        from envgym.envs.procedural_kit.spec.compile import compile_spec
        from envgym.envs.procedural_kit.spec.writer import write_spec

        note = find_note(domain)
        if note is None:  # the corpus changed under a running job
            raise UnknownCategory(f"the corpus no longer has the domain {domain!r}")
        spec = write_spec(note, seed)
        return compile_spec(
            spec, out, seed=seed, n_tasks=n_tasks, difficulties=difficulties, max_rows=max_rows
        )

    return build


CATEGORIES: tuple[ProceduralCategory, ...] = (
    ProceduralCategory(
        "trip planning",
        "trip-planning",
        ("trip", "travel", "travel itinerary", "itinerary"),
        "multi-day itineraries over cities, hotels, restaurants, attractions, weather, transport",
        _trip,
    ),
    ProceduralCategory(
        "retail orders",
        "retail-orders",
        ("retail", "orders", "returns", "retail orders and returns", "shopping", "store"),
        "baskets under stock/brand/weight/budget rules; returns whose refund lands in a range",
        _kit("envgym.envs.retail_orders"),
    ),
    ProceduralCategory(
        "meeting scheduling",
        "meeting-scheduling",
        ("meetings", "scheduling", "calendar", "calendars", "meeting scheduling across calendars"),
        "meetings in order across time zones, events, lunch, buffers, rooms, representatives",
        _kit("envgym.envs.meeting_scheduling"),
    ),
    ProceduralCategory(
        "shipment logistics",
        "shipment-logistics",
        ("logistics", "shipping", "shipments", "routing", "freight"),
        "routes through a hub network under deadlines, hazmat, modes, capacities, budget",
        _kit("envgym.envs.shipment_logistics"),
    ),
    ProceduralCategory(
        "library loans",
        "library-loans",
        ("library", "libraries", "book loans", "library lending"),
        "books, authors, members and loans (compiled from a declarative spec)",
        _spec("library_loans"),
        spec_written=True,
    ),
    ProceduralCategory(
        "clinic appointments",
        "clinic-appointments",
        ("clinic", "appointments", "doctor appointments", "medical appointments"),
        "appointment slots, doctors, departments and visits (compiled from a declarative spec)",
        _spec("clinic_appointments"),
        spec_written=True,
    ),
    ProceduralCategory(
        "insurance claims",
        "insurance-claims",
        ("insurance", "claims", "claims handling"),
        "claims, policies, policyholders and adjusters (compiled from a declarative spec)",
        _spec("insurance_claims"),
        spec_written=True,
    ),
)


def known_names() -> list[str]:
    return [c.name for c in CATEGORIES]


def corpus_names() -> list[str]:
    """The corpus domains no registered category already answers to."""
    return [d for d in domain_names() if _registered(normalize(d)) is None]


def all_names() -> list[str]:
    """Every procedural category: the registered ones, then the corpus domains."""
    return known_names() + corpus_names()


def _registered(key: str) -> ProceduralCategory | None:
    for c in CATEGORIES:
        for candidate in (c.name, *c.aliases):
            if key == candidate or key.replace(" ", "") == candidate.replace(" ", ""):
                return c
    return None


def find_category(name: str) -> ProceduralCategory:
    """The procedural category ``name`` means; :class:`UnknownCategory` otherwise."""
    key = normalize(name or "")
    listing = "; ".join(f"{c.name!r} ({c.description})" for c in CATEGORIES)
    corpus = f"{len(domain_names())} corpus domains (envgym/synth_agents/corpus/domains)"
    if not key:
        raise UnknownCategory(
            f"the category is empty; known procedural categories: {listing}; and {corpus}"
        )
    registered = _registered(key)
    if registered is not None:
        return registered
    note = find_note(name)
    if note is not None:
        return ProceduralCategory(
            note.domain,
            note.slug.replace("_", "-"),
            note.aliases,
            f"{note.about[:160]} (written from a domain note into a spec per seed)",
            _written(note.domain),
            spec_written=True,
        )
    close = close_matches(name)
    near = f"; closest corpus domains: {', '.join(map(repr, close))}" if close else ""
    raise UnknownCategory(
        f"no procedural category matches {name!r}{near}; known procedural categories: "
        f"{listing}; and {corpus} (use --agent llm for any other category)"
    )
