"""envgym/synth_agents/search_qa: procedural questions whose answers are unique and re-derivable.

Each pair is re-verified by brute force over the raw stanzas (independent of ``Facts``): the
asked constraints must select exactly the answer.
"""

from __future__ import annotations

import re

import pytest
from search_corpus import dumpavail_text

from envgym.envs.search_qa.facts import maintainer_name
from envgym.envs.search_qa.procedural import TEMPLATES, QAPair, build_questions
from envgym.tools.search.debian import Package, parse_packages, parse_stanzas


def _raw() -> dict[str, dict[str, str]]:
    return {s["Package"]: s for s in parse_stanzas(dumpavail_text().splitlines())}


def _deps(stanza: dict[str, str]) -> set[str]:
    text = stanza.get("Depends", "") + "," + stanza.get("Pre-Depends", "")
    return {m.group(1) for m in re.finditer(r"(?:^|[,|])\s*([a-z0-9][a-z0-9+.\-]*)", text)}


def brute_force_answer(pair: QAPair, raw: dict[str, dict[str, str]]) -> str | None:
    """The unique answer the pair's constraints select over the raw corpus, or None."""
    params = [v for _, v in pair.params]
    keyed = dict(pair.params)
    if pair.template in ("filter", "shared_dependency"):
        wanted = [v for k, v in pair.params if k == "depends"]
        hits = [n for n, s in raw.items() if s.get("Section") == keyed["section"]
                and all(d in _deps(s) for d in wanted)
                and ("maintainer" not in keyed or s.get("Maintainer") == keyed["maintainer"])]  # fmt: skip
        return hits[0] if len(hits) == 1 else None
    current = params[0]
    for section in params[1:]:
        nxt = [d for d in _deps(raw[current]) if d in raw and raw[d].get("Section") == section]
        if len(nxt) != 1:
            return None
        current = nxt[0]
    if pair.template == "dependency_maintainer":
        return maintainer_name(raw[current]["Maintainer"])
    return raw[current]["Version"]


@pytest.fixture(scope="module")
def packages() -> list[Package]:
    return list(parse_packages(dumpavail_text().splitlines()))


@pytest.mark.timeout(30)
def test_every_answer_is_the_unique_one_its_constraints_select(packages: list[Package]) -> None:
    raw = _raw()
    pairs = build_questions(packages, 40, seed=3, max_hops=4)
    assert {p.template for p in pairs} == set(TEMPLATES)
    for pair in pairs:
        assert brute_force_answer(pair, raw) == pair.answer, pair
        assert set(pair.evidence) <= set(raw) and len(pair.evidence) == pair.hops


@pytest.mark.timeout(30)
def test_same_seed_same_questions_and_seeds_differ(packages: list[Package]) -> None:
    first = build_questions(packages, 8, seed=5)
    assert first == build_questions(packages, 8, seed=5)
    assert first != build_questions(packages, 8, seed=6)
    assert len({p.question for p in first}) == len(first)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("max_hops", [2, 3, 5])
def test_chain_depth_is_bounded_by_max_hops(packages: list[Package], max_hops: int) -> None:
    chains = build_questions(packages, 6, seed=1, max_hops=max_hops, templates=["chain"])
    assert chains and all(2 <= p.hops <= max_hops for p in chains)
    assert all(p.question.count("its only dependency") == p.hops - 1 for p in chains)


@pytest.mark.timeout(30)
def test_person_answers_accept_the_email(packages: list[Package]) -> None:
    pairs = build_questions(packages, 3, seed=2, templates=["dependency_maintainer"])
    assert pairs and all("@" in p.aliases[0] and "<" not in p.answer for p in pairs)


@pytest.mark.timeout(30)
def test_bad_arguments_are_refused(packages: list[Package]) -> None:
    with pytest.raises(ValueError, match="unknown templates"):
        build_questions(packages, 1, templates=["nope"])
    with pytest.raises(ValueError, match="max_hops"):
        build_questions(packages, 1, max_hops=0)
    assert build_questions([], 3) == []
