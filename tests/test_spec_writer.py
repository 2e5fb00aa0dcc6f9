"""The domain corpus and the procedural spec writer: every note writes a spec ``load_spec``
accepts, seeds vary the toolset, broken notes are named errors, every domain is a category."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from envgym.envs.procedural_kit.local import LocalBundle
from envgym.envs.procedural_kit.spec.compile import compile_spec
from envgym.envs.procedural_kit.spec.note import NoteError, load_note_text, parse_note
from envgym.envs.procedural_kit.spec.validate import load_spec
from envgym.envs.procedural_kit.spec.writer import write_spec
from envgym.synth_agents.categories import UnknownCategory, find_category, known_names
from envgym.synth_agents.domain_corpus import DOMAINS, notes


def _toolset(spec: dict[str, Any]) -> set[tuple[Any, ...]]:
    """What an agent sees of a spec's tools: names, kinds and the arguments they take."""
    return {
        (t["name"], t["kind"], t["entity"], tuple(t.get("filters", ())), t.get("attribute"))
        for t in spec["tools"]
    }


def test_the_corpus_has_a_hundred_domains_and_every_note_writes_a_valid_spec() -> None:
    assert len(notes()) >= 100
    assert len({n.domain for n in notes()}) == len(notes())
    for note in notes():
        spec = write_spec(note, 0)
        load_spec(spec)  # raises SpecError naming the path
        assert spec["category"] == note.domain


def test_two_seeds_give_two_toolsets_and_one_seed_one() -> None:
    same = [n.domain for n in notes() if _toolset(write_spec(n, 0)) == _toolset(write_spec(n, 1))]
    assert same == []
    note = notes()[0]
    assert json.dumps(write_spec(note, 7)) == json.dumps(write_spec(note, 7))


def test_seeds_spread_tool_names_over_the_corpus() -> None:
    names = {t["name"] for n in notes() for s in (0, 1, 2) for t in write_spec(n, s)["tools"]}
    assert len(names) >= 1500


def _library() -> dict[str, Any]:
    return json.loads((DOMAINS / "library_loans.json").read_text())


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda n: n.pop("main"), "main"),
        (lambda n: n.update(main="ghost"), "main"),
        (lambda n: n["entities"][0]["attributes"].update(pages="int 60-1100"), "pages"),
        (lambda n: n["entities"][0]["attributes"].update(pages="float 1..9"), "pages"),
        (lambda n: n["entities"][0]["attributes"].update(min_pages="int 1..90"), "min_pages"),
        (lambda n: n["entities"][0]["attributes"].update(op="int 1..90"), ".op"),
        (lambda n: n["entities"][0].update(name="class"), "entities[0].name"),
        (lambda n: n["entities"][0].update(rows=[2, 900]), "rows"),
        (lambda n: n["relations"].append("book>book"), "relations[3]"),
        (lambda n: n["relations"].append("loan>ghost"), "relations[3]"),
        (lambda n: n["actions"][0].update(to="lost"), "actions[0].to"),
        (lambda n: n["rules"][0].update({"if": "pages"}), "rules[0].if"),
        (lambda n: n.update(extra=1), "extra"),
        (lambda n: n.update(about="line\nbreak"), "about"),
    ],
)
def test_a_malformed_note_is_a_named_error(edit: Any, where: str) -> None:
    note = copy.deepcopy(_library())
    edit(note)
    with pytest.raises(NoteError) as info:
        parse_note(note)
    assert where in info.value.where


def test_hostile_note_text_is_bounded() -> None:
    with pytest.raises(NoteError, match="bytes"):
        load_note_text(b" " * 40_000)
    with pytest.raises(NoteError, match="not JSON"):
        load_note_text(b"[" * 5000)
    with pytest.raises(NoteError, match="JSON object"):
        parse_note([])


def test_the_router_finds_every_domain_and_alias() -> None:
    registered = set(known_names())
    for note in notes():
        for name in (note.domain, note.domain.upper().replace(" ", "-"), *note.aliases):
            found = find_category(name)
            assert found.name == note.domain or found.name in registered, name


def test_an_unknown_domain_names_close_corpus_matches() -> None:
    with pytest.raises(UnknownCategory) as info:
        find_category("hotel bookin")
    assert "'hotel bookings'" in str(info.value)
    with pytest.raises(UnknownCategory, match="empty"):
        find_category("  ")


@pytest.mark.heavy  # three compiles with their in-process proofs: tens of seconds under load
def test_three_random_domains_compile_and_prove(tmp_path: Path) -> None:
    for note in random.Random(20261126).sample(list(notes()), 3):
        seed = 1
        root = compile_spec(write_spec(note, seed), tmp_path / note.slug, seed=seed, n_tasks=5)
        lines = (root / "tasks.jsonl").read_text().splitlines()
        assert len(lines) == 5
        tools = set(LocalBundle(root).tool_functions) - {"submit_result"}
        assert tools == {t["name"] for t in write_spec(note, seed)["tools"]}


def test_a_corpus_category_builds_through_the_router(tmp_path: Path) -> None:
    category = find_category("parking")
    assert category.slug == "parking"
    root = category.build(tmp_path / "b", 0, 1, (1,), None)
    assert (root / "tools.json").exists()
    assert json.loads((root / "manifest.json").read_text())["category"] == "parking"


def test_every_corpus_domain_is_a_procedural_category() -> None:
    from envgym.synth_agents.categories import all_names

    names = all_names()
    assert len(names) >= 100 and len(set(names)) == len(names)
    assert {find_category(n).name for n in names} == set(names)
