"""Cold start for the search-QA roles (envgym/synth_agents/search_qa/cold_start*.py), on the fixture corpus.

The teacher traces must teach only what the pipeline keeps (grounded pairs, hops named by a
description unique among the dependencies, true and false verdicts), and each example must be
token for token what the local engine builds and the model writes.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from search_corpus import dumpavail_text
from typer.testing import CliRunner

from envgym.apps.cold_start_run import (
    ColdStartConfig,
    example_from,
    play,
    run_cold_start,
    training_entities,
)
from envgym.envs.search_qa.facts import Facts, maintainer_name
from envgym.messages import ToolCall
from envgym.models.chat import ChatFormat, end_tokens
from envgym.synth_agents.search_qa.agent_loop import TOOL_SPECS
from envgym.synth_agents.search_qa.cold_start import (
    Played,
    construction_script,
    scripts_for,
    verification_script,
)
from envgym.synth_agents.search_qa.model_pipeline import ground, sample_entities
from envgym.tools.search import SearchTools
from envgym.tools.search.build import build_at
from envgym.tools.search.debian import parse_packages
from envgym.tools.search.index import Index

pytestmark = pytest.mark.timeout(300)

PACKAGES = list(parse_packages(dumpavail_text().splitlines()))
FACTS = Facts.of(PACKAGES)
NAMES = sorted(p.name for p in PACKAGES if p.section and p.depends)


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> SearchTools:
    root = tmp_path_factory.mktemp("sqa-cold")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENVGYM_CACHE", str(root / "cache"))
        return SearchTools(Index(build_at(root / "cache" / "search" / "fixture", PACKAGES)))


@pytest.fixture(scope="module")
def fmt() -> ChatFormat:
    from envgym import embedded

    return ChatFormat(embedded.load_tokenizer(), "hermes")


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_constructions_are_grounded_and_each_hop_is_named_uniquely(hops: int) -> None:
    rng, made = random.Random(0), 0
    for name in NAMES:
        for kind in ("person", "version"):
            script = construction_script(name, FACTS, rng, hops=hops, breadth=2, kind=kind)
            if script is None:
                continue
            made += 1
            raw = json.loads(script.steps[-1])
            pair, why = ground(raw, name, FACTS.packages, hops)
            assert pair is not None, why
            path = raw["evidence"]
            assert path[0] == name and len(path) == hops == len(set(path))
            assert [s.arguments["id"] for s in script.steps[:-1]] == path[
                1:
            ]  # opens every hop, in order
            for parent, child in zip(path, path[1:]):
                assert child in FACTS.packages[parent].depends
                summary = FACTS.packages[child].summary
                assert f'"{summary}"' in raw["question"]
                same = [
                    d
                    for d in FACTS.known_depends(parent)
                    if d.summary.casefold() == summary.casefold()
                ]
                assert [d.name for d in same] == [child]
            target = FACTS.packages[path[-1]]
            truth = (
                maintainer_name(target.maintainer) if kind == "person" else target.fields["Version"]
            )
            assert raw["answer"] == truth and pair.kind == (
                "person" if kind == "person" else "version"
            )
    assert made >= 20


def test_a_description_shared_by_two_dependencies_names_no_hop() -> None:
    text = dumpavail_text() + "\n" + "\n".join(
        f"Package: {n}\nVersion: 1\nMaintainer: M <m@x>\nSection: utils\nDepends: {d}\nDescription: {s}\n"
        for n, d, s in [("twin-a", "", "same words"), ("twin-b", "", "same words"),
                        ("root", "twin-a, twin-b", "the root package")])  # fmt: skip
    facts = Facts.of(list(parse_packages(text.splitlines())))
    assert (
        construction_script("root", facts, random.Random(0), hops=2, breadth=1, kind="person")
        is None
    )


def test_verification_traces_say_correct_only_for_the_true_answer() -> None:
    rng = random.Random(1)
    scripts = scripts_for(NAMES, FACTS, hops=2, breadth=2, seed=3)
    checks = [s for s in scripts if s.role == "verify"]
    verdicts = [json.loads(s.steps[-1])["verdict"] for s in checks]
    made = [s for s in scripts if s.role == "construct"]
    # both verdicts for every pair (no rubber stamp to learn); the fixture's versions are all
    # 1.0-1, so only its maintainer questions have a wrong value to propose
    assert verdicts.count("correct") == len(made)
    assert verdicts.count("incorrect") == sum(1 for s in made if s.pair.kind == "person") > 0
    for s in checks:
        proposed = re.search(r"Proposed answer: (.*)\n", s.messages[1]["content"]).group(1)  # type: ignore[union-attr]
        verdict = json.loads(s.steps[-1])["verdict"]
        assert (verdict == "correct") == (proposed == s.pair.answer), (
            proposed,
            s.pair.answer,
            verdict,
        )
        assert s.steps[0] == ToolCall("v0", "open", {"id": s.pair.evidence[-1]})
    wrong = verification_script(checks[0].pair, checks[0].entity, FACTS, rng, correct=False)
    assert wrong is not None and json.loads(wrong.steps[-1])["verdict"] == "incorrect"


def test_training_entities_never_include_the_synthesis_sample() -> None:
    cfg = ColdStartConfig(entities=15, exclude_n=10, exclude_seed=4)
    chosen = training_entities(PACKAGES, cfg)
    assert len(chosen) == 15 and not set(chosen) & set(sample_entities(PACKAGES, 10, 4))


def _spans(ids: tuple[int, ...], mask: tuple[int, ...]) -> list[list[int]]:
    spans: list[list[int]] = []
    for i, (token, m) in enumerate(zip(ids, mask)):
        if m and (i == 0 or not mask[i - 1]):
            spans.append([])
        if m:
            spans[-1].append(token)
    return spans


def test_examples_are_what_the_engine_prompts_and_the_model_writes(
    tools: SearchTools, fmt: ChatFormat
) -> None:
    scripts = scripts_for(NAMES[:6], FACTS, hops=2, breadth=2, seed=0)
    examples = play(
        scripts, tools, fmt, end_tokens(fmt.tokenizer), ColdStartConfig(hops=2, breadth=2)
    )
    assert len(examples) == len(scripts) >= 4
    im_end = fmt.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for script, example in zip(scripts, examples):
        written = [fmt.tokenizer.decode(s) for s in _spans(example.token_ids, example.loss_mask)]
        calls = [fmt.parser.format_calls([s]) for s in script.steps[:-1]]
        assert written == [*calls, script.steps[-1] + "<|im_end|>"]
        assert example.token_ids[-1] == im_end
        # the first turn's prompt is the engine's own rendering of the messages and tool specs
        first = example.loss_mask.index(1)
        assert list(example.token_ids[:first]) == fmt.prompt_ids(list(script.messages), TOOL_SPECS)
        text = fmt.tokenizer.decode(list(example.token_ids))
        opened = json.loads(text.split("<|im_start|>tool\n", 1)[1].split("<|im_end|>", 1)[0])
        assert opened["id"] == script.steps[0].arguments["id"]  # a real tool result, from the index
        assert opened["text"] == tools.open(opened["id"])["text"]


def test_a_played_run_that_stopped_early_is_refused(fmt: ChatFormat) -> None:
    played = Played([ToolCall("c0", "open", {"id": "x"}), "{}"])
    played.turns.append(([1, 2, 3], [4]))
    with pytest.raises(ValueError, match="stopped after 1 of 2 steps"):
        example_from(played, task_id="t")
    played.turns.append(([9, 9, 9, 9, 5], [6]))
    with pytest.raises(ValueError, match="does not extend"):
        example_from(played, task_id="t")


@pytest.mark.parametrize(("args", "message"), [
    (["cold-start", "tau2", "--out", "X"], "unknown category 'tau2'"),
    (["cold-start", "search-qa", "--out", "X", "--entities", "0"], "entities, hops, breadth and epochs"),
    (["cold-start", "search-qa", "--out", "X", "--lr", "-1"], "lr > 0"),
])  # fmt: skip
def test_cli_bad_options(args: list[str], message: str, tmp_path: Path) -> None:
    from envgym.cli import app

    result = CliRunner().invoke(app, [a.replace("X", str(tmp_path / "o")) for a in args])
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.heavy
# Real SFT of the embedded model: ~190 s on two quiet cores, past 300 s beside the demo test.
@pytest.mark.timeout(900)
def test_cold_start_trains_and_writes_a_loadable_folder(tools: SearchTools, tmp_path: Path) -> None:
    out = tmp_path / "model"
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "f").write_text("x")
    cfg = ColdStartConfig(entities=6, hops=2, breadth=2, exclude_n=5, epochs=1, batch_tokens=16_384)
    with pytest.raises(FileExistsError, match="not an earlier SFT output"):
        run_cold_start(tmp_path / "busy", PACKAGES, tools, cfg)
    summary = run_cold_start(out, PACKAGES, tools, cfg)
    assert summary["examples"] == sum(summary["scripts"].values()) >= 4
    assert summary["skipped_steps"] == 0 and summary["steps"] >= 1
    meta: dict[str, Any] = json.loads((out / "sft_run.json").read_text())
    assert meta["cold_start"] == "search-qa" and meta["config"]["exclude_n"] == 5
    from envgym.models import load_policy

    policy = load_policy(str(out))
    assert policy.name


def test_a_wrong_answer_comes_from_elsewhere_when_the_neighbours_agree() -> None:
    text = "\n".join(
        f"Package: {n}\nVersion: {v}\nMaintainer: {m}\nSection: utils\nDepends: {d}\nDescription: {s}\n"
        for n, v, m, d, s in [("top", "1", "Same One <s@x>", "leaf", "the top"),
                              ("leaf", "2", "Same One <s@x>", "", "the leaf"),
                              ("far", "3", "Other Person <o@x>", "", "far away")])  # fmt: skip
    facts = Facts.of(list(parse_packages(text.splitlines())))
    made = construction_script("top", facts, random.Random(0), hops=2, breadth=1, kind="person")
    assert made is not None and made.pair.answer == "Same One"
    wrong = verification_script(made.pair, "top", facts, random.Random(0), correct=False)
    assert wrong is not None and "Proposed answer: Other Person\n" in wrong.messages[1]["content"]
