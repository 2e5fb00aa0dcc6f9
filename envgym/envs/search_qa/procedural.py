"""Procedural multi-hop questions over the Debian corpus, with programmatically known answers.

The offline fallback of the QA synthesis pipeline: no model, deterministic
in the seed, and every answer checked unique over the whole corpus before the question is kept.
Entities are sampled biased to the long tail (weight 1 / (1 + reverse dependencies)), as the
seed's pipeline does, so answers are rarely famous packages a model would recall unaided.

Templates (``hops`` = documents an agent must read to be sure):

* ``filter`` (1): the one package in section S, maintained by M, that depends on D.
* ``shared_dependency`` (1): the one package in section S depending on both D1 and D2.
* ``dependency_maintainer`` (2): who maintains A's only dependency in section S.
* ``chain`` (depth, 2..max_hops): start at A, follow the only dependency in section S1, then the
  only one in S2 …; the version of the package reached.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envgym.envs.search_qa.facts import Facts, maintainer_email, maintainer_name
from envgym.tools.search.debian import Package


@dataclass(frozen=True)
class QAPair:
    question: str
    answer: str
    aliases: tuple[str, ...]  # other accepted spellings (e.g. a maintainer's e-mail)
    kind: str  # "name" | "person" | "version" — how answers are compared
    evidence: tuple[str, ...]  # document ids, in the order an agent would read them
    hops: int
    template: str
    params: tuple[tuple[str, str], ...] = ()  # the constraints asked about, for re-verification


def _long_tail_pick(rng: random.Random, facts: Facts, names: Sequence[str]) -> str:
    weights = [1.0 / (1 + facts.popularity(n)) for n in names]
    return rng.choices(names, weights=weights, k=1)[0]


def _filter(rng: random.Random, facts: Facts, a: Package, max_hops: int) -> QAPair | None:
    deps = a.depends
    if not deps or not a.section or not a.maintainer:
        return None
    dep = rng.choice(deps)
    same = [
        n
        for n in facts.by_section_maintainer[(a.section, a.maintainer)]
        if dep in facts.packages[n].depends
    ]
    if same != [a.name]:
        return None
    who = maintainer_name(a.maintainer)
    question = (f"Which Debian package in section '{a.section}' is maintained by {who} and "
                f"depends on {dep}? Answer with the package name.")  # fmt: skip
    return QAPair(
        question,
        a.name,
        (),
        "name",
        (a.name,),
        1,
        "filter",
        (("section", a.section), ("maintainer", a.maintainer), ("depends", dep)),
    )


def _shared_dependency(
    rng: random.Random, facts: Facts, a: Package, max_hops: int
) -> QAPair | None:
    rare = [
        d for d in a.depends if 0 < facts.popularity(d) < 200
    ]  # common deps (libc6) say nothing
    if len(rare) < 2:
        return None
    d1, d2 = rng.sample(rare, 2)
    both = set(facts.reverse[d1]) & set(facts.reverse[d2])
    matching = [n for n in both if facts.packages[n].section == a.section]
    if matching != [a.name]:
        return None
    question = (f"Which Debian package in section '{a.section}' depends on both {d1} and {d2}? "
                "Answer with the package name.")  # fmt: skip
    return QAPair(
        question,
        a.name,
        (),
        "name",
        (a.name,),
        1,
        "shared_dependency",
        (("section", a.section), ("depends", d1), ("depends", d2)),
    )


def _only_dependency_in(facts: Facts, name: str, section: str) -> Package | None:
    found = [p for p in facts.known_depends(name) if p.section == section]
    return found[0] if len(found) == 1 else None


def _dependency_maintainer(
    rng: random.Random, facts: Facts, a: Package, max_hops: int
) -> QAPair | None:
    known = facts.known_depends(a.name)
    if not known:
        return None
    b = rng.choice(known)
    if _only_dependency_in(facts, a.name, b.section) is None or not b.maintainer:
        return None
    question = (f"The Debian package {a.name} depends on exactly one package in section "
                f"'{b.section}'. Who maintains that package? Answer with the maintainer's name.")  # fmt: skip
    aliases = tuple(x for x in (maintainer_email(b.maintainer), b.maintainer) if x)
    return QAPair(question, maintainer_name(b.maintainer), aliases, "person", (a.name, b.name), 2,
                  "dependency_maintainer", (("start", a.name), ("section", b.section)))  # fmt: skip


def _chain(rng: random.Random, facts: Facts, a: Package, max_hops: int) -> QAPair | None:
    depth = rng.randint(2, max(2, max_hops))
    path, sections = [a], []
    for _ in range(depth - 1):
        known = [
            p for p in facts.known_depends(path[-1].name) if p.name not in {q.name for q in path}
        ]
        if not known:
            return None
        nxt = rng.choice(known)
        if _only_dependency_in(facts, path[-1].name, nxt.section) is not nxt:
            return None
        path.append(nxt)
        sections.append(nxt.section)
    version = path[-1].fields.get("Version", "")
    if not version:
        return None
    steps = ", then ".join(f"its only dependency in section '{s}'" for s in sections)
    question = (f"Start at the Debian package {a.name}. Follow {steps}. What is the version of "
                "the package you reach? Answer with the version string.")  # fmt: skip
    params = (("start", a.name), *(("section", s) for s in sections))
    return QAPair(
        question, version, (), "version", tuple(p.name for p in path), len(path), "chain", params
    )


Template = Callable[[random.Random, Facts, Package, int], QAPair | None]
TEMPLATES: dict[str, Template] = {
    "filter": _filter,
    "shared_dependency": _shared_dependency,
    "dependency_maintainer": _dependency_maintainer,
    "chain": _chain,
}


def build_questions(
    packages: Sequence[Package],
    n: int,
    *,
    seed: int = 0,
    max_hops: int = 3,
    templates: Sequence[str] = tuple(TEMPLATES),
    max_tries: int = 200,
) -> list[QAPair]:
    """``n`` distinct questions (fewer if the corpus cannot supply them within the tries).

    ``max_hops`` bounds the ``chain`` depth (the pipeline's depth knob); ``templates`` its
    breadth.  Deterministic in ``seed`` for the same corpus.
    """
    unknown = [t for t in templates if t not in TEMPLATES]
    if unknown or not templates:
        raise ValueError(f"unknown templates {unknown}; choose from {sorted(TEMPLATES)}")
    if max_hops < 1:
        raise ValueError(f"max_hops must be >= 1, got {max_hops}")
    rng = random.Random(seed)
    facts = Facts.of(packages)
    names = sorted(facts.packages)
    if not names:
        return []
    usable = [t for t in templates if t != "chain" or max_hops >= 2]
    out: list[QAPair] = []
    seen: set[str] = set()
    for _ in range(n * max_tries):
        if len(out) == n:
            break
        template = usable[len(out) % len(usable)]  # round-robin: every template gets its share
        pair = TEMPLATES[template](
            rng, facts, facts.packages[_long_tail_pick(rng, facts, names)], max_hops
        )
        if pair is not None and pair.question not in seen:
            seen.add(pair.question)
            out.append(pair)
    return out
