"""Procedural categories: the offline, seeded generators ``envgym synth --agent procedural`` runs.

Names are matched leniently — case, spaces, hyphens, underscores and camelCase do not matter
("Trip Planning", "trip-planning", "tripPlanning" all name ``trip planning``) and each category
has a few aliases ("retail", "meetings", "logistics").  An empty or unknown name raises
:class:`UnknownCategory` listing the known ones.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

Builder = Callable[
    [Path, int, int, Sequence[int]], Path
]  # (out, seed, n_tasks, difficulties) -> out


class UnknownCategory(ValueError):
    """The name matches no procedural category."""


@dataclass(frozen=True)
class ProceduralCategory:
    name: str
    slug: str  # file-name safe, used in bundle names
    aliases: tuple[str, ...]
    description: str
    build: Builder


def _trip(out: Path, seed: int, n_tasks: int, difficulties: Sequence[int]) -> Path:
    from envs.trip_planning.build import build_bundle

    return build_bundle(
        out,
        seed=seed,
        n_tasks=n_tasks,
        difficulties=tuple(difficulties),
        include_worked_example=False,
    )


def _kit(package: str) -> Builder:
    """The builder of a procedural-kit category (``<package>.build.build_bundle``), imported
    only when called: building one category should not import the others."""

    def build(out: Path, seed: int, n_tasks: int, difficulties: Sequence[int]) -> Path:
        module = importlib.import_module(f"{package}.build")
        return module.build_bundle(out, seed=seed, n_tasks=n_tasks, difficulties=difficulties)

    return build


def _spec(example: str) -> Builder:
    """A category written as a declarative spec (envs/procedural_kit/spec/examples/<example>.json,
    docs/ENV_SPEC.md), compiled offline; imported only when called."""

    def build(out: Path, seed: int, n_tasks: int, difficulties: Sequence[int]) -> Path:
        from envs.procedural_kit.spec.compile import compile_example

        return compile_example(example, out, seed=seed, n_tasks=n_tasks, difficulties=difficulties)

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
        _kit("envs.retail_orders"),
    ),
    ProceduralCategory(
        "meeting scheduling",
        "meeting-scheduling",
        ("meetings", "scheduling", "calendar", "calendars", "meeting scheduling across calendars"),
        "meetings in order across time zones, events, lunch, buffers, rooms, representatives",
        _kit("envs.meeting_scheduling"),
    ),
    ProceduralCategory(
        "shipment logistics",
        "shipment-logistics",
        ("logistics", "shipping", "shipments", "routing", "freight"),
        "routes through a hub network under deadlines, hazmat, modes, capacities, budget",
        _kit("envs.shipment_logistics"),
    ),
    ProceduralCategory(
        "library loans",
        "library-loans",
        ("library", "libraries", "book loans", "library lending"),
        "books, authors, members and loans (compiled from a declarative spec)",
        _spec("library_loans"),
    ),
    ProceduralCategory(
        "clinic appointments",
        "clinic-appointments",
        ("clinic", "appointments", "doctor appointments", "medical appointments"),
        "appointment slots, doctors, departments and visits (compiled from a declarative spec)",
        _spec("clinic_appointments"),
    ),
    ProceduralCategory(
        "insurance claims",
        "insurance-claims",
        ("insurance", "claims", "claims handling"),
        "claims, policies, policyholders and adjusters (compiled from a declarative spec)",
        _spec("insurance_claims"),
    ),
)


def normalize(name: str) -> str:
    """'Trip-Planning', 'trip_planning', 'tripPlanning ' -> 'trip planning'."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name.strip())
    return " ".join(re.split(r"[\s\-_./]+", spaced.lower())).strip()


def known_names() -> list[str]:
    return [c.name for c in CATEGORIES]


def find_category(name: str) -> ProceduralCategory:
    """The procedural category ``name`` means; :class:`UnknownCategory` otherwise."""
    key = normalize(name or "")
    listing = "; ".join(f"{c.name!r} ({c.description})" for c in CATEGORIES)
    if not key:
        raise UnknownCategory(f"the category is empty; known procedural categories: {listing}")
    for c in CATEGORIES:
        for candidate in (c.name, *c.aliases):
            if key == candidate or key.replace(" ", "") == candidate.replace(" ", ""):
                return c
    raise UnknownCategory(
        f"no procedural category matches {name!r}; known procedural categories: {listing} "
        "(use --agent llm for any other category)"
    )
