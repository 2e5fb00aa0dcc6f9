"""The spec-writing LLM agent with a scripted model (a capable model cannot run on this machine;
the embedded model is a separate, slower run): valid spec → a kept bundle; an invalid spec
answered with its problem in words; prose, oversize, deep, cyclic and unsolvable replies → named
rejections with nothing left in the output folder."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from envgym.bundle import load_bundle
from envgym.envs.procedural_kit.spec.model import MAX_DEPTH
from envgym.envs.procedural_kit.spec.writer import write_spec
from envgym.policy import PolicyError, SamplingParams, Turn, Usage
from envgym.synth_agents.domain_corpus import find_note
from envgym.synth_agents.pipeline import Job, ValidationSettings, run_synthesis
from envgym.synth_agents.recorder import SynthRecorder
from envgym.synth_agents.spec_agent import (
    MAX_REPLY_CHARS,
    ReplyRejected,
    SpecAgent,
    SpecConfig,
    make_spec_agent,
    parse_reply,
)

pytestmark = pytest.mark.timeout(300)


class ScriptedModel:
    """A real implementation of the policy interface that answers with fixed texts, in order."""

    version = 0

    def __init__(self, replies: list[str | BaseException]) -> None:
        self.name = "scripted"
        self.replies = list(replies)
        self.seen: list[list[dict[str, Any]]] = []
        self.seeds: list[int | None] = []

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        self.seen.append(copy.deepcopy(messages))
        self.seeds.append(params.seed)
        reply = self.replies.pop(0) if self.replies else "I have nothing more to add."
        if isinstance(reply, BaseException):
            raise reply
        return Turn(text=reply, usage=Usage(completion_tokens=len(reply) // 4))

    async def end_session(self, session: str) -> None:
        pass

    async def aclose(self) -> None:
        pass


def good_spec() -> dict[str, Any]:
    """A valid spec, as a capable model might write it (the spec writer's, for a corpus domain)."""
    note = find_note("bike sharing")
    assert note is not None
    return write_spec(note, 0)


def fenced(spec: dict[str, Any]) -> str:
    return f"Here is the spec.\n```json\n{json.dumps(spec, indent=1)}\n```\nIt has two entities."


def agent_for(
    replies: list[str | BaseException],
    *,
    rounds: int = 1,
    category: str = "bike sharing",
    levels: tuple[int, ...] = (1, 3, 5),
) -> tuple[SpecAgent, ScriptedModel]:
    model = ScriptedModel(replies)
    config = SpecConfig(max_rounds=rounds, tasks_per_bundle=len(levels), difficulties=levels)
    return SpecAgent(category, model, model="scripted", config=config), model


def make(
    replies: list[str | BaseException], tmp_path: Path, **kw: Any
) -> tuple[Any, ScriptedModel]:
    agent, model = agent_for(replies, **kw)
    staging = tmp_path / "staging" / "job"
    try:
        outcome = agent.make(Job(0, 0, "spec-bike-sharing-0"), staging)
    finally:
        agent.close()
    if not outcome.made:
        assert not staging.exists(), "a rejected job left files behind"
    return outcome, model


@pytest.fixture()
def _bwrap(require_backend) -> None:  # noqa: ANN001
    require_backend("bwrap")


def synthesize(
    replies: list[str | BaseException], tmp_path: Path, rounds: int, **settings_kw: Any
) -> tuple[dict[str, Any], ScriptedModel]:
    # One task per bundle: the sandboxed validation is what takes minutes on a loaded machine.
    agent, model = agent_for(replies, rounds=rounds, levels=(3,))
    # Mutation testing is off: every compiled bundle ships the same reviewed verifier.py, whose
    # mutants are measured once (docs/ENV_SPEC.md); a model only chose the data.
    settings = ValidationSettings(sandbox="bwrap", mutation=False, **settings_kw)
    try:
        run_synthesis(
            agent, n=1, seed=0, recorder=SynthRecorder(tmp_path / "out", None), settings=settings
        )
    finally:
        agent.close()
    lines = (tmp_path / "out" / "synth.jsonl").read_text().splitlines()
    return json.loads(lines[-1]), model


@pytest.mark.timeout(900)  # minutes only on a loaded machine: seconds otherwise
@pytest.mark.usefixtures("_bwrap")
def test_a_valid_spec_becomes_a_bundle_the_pipeline_validates_and_keeps(tmp_path: Path) -> None:
    record, model = synthesize([fenced(good_spec())], tmp_path, rounds=3)
    assert (record["status"], record["reasons"]) == ("kept", []), record["problems"]
    assert len(model.seen) == 1 and record["agent_info"]["rounds"] == 1
    bundle = load_bundle(tmp_path / "out" / record["bundle"])
    prov = bundle.manifest.provenance
    assert (prov.agent, prov.model, prov.seed) == ("llm-spec:scripted", "scripted", 0)
    manifest = json.loads((bundle.root / "manifest.json").read_text())
    assert manifest["provenance"]["rounds"] == 1
    assert manifest["provenance"]["compiler"] == "procedural:env_spec"
    assert bundle.manifest.category == "bike sharing" and len(bundle.tasks) == 1
    assert record["validation"]["passed"] is True


@pytest.mark.timeout(900)  # minutes only on a loaded machine: seconds otherwise
@pytest.mark.usefixtures("_bwrap")
def test_an_invalid_spec_is_answered_in_words_and_the_second_round_is_kept(
    tmp_path: Path,
) -> None:
    bad = good_spec()
    bad["entities"][0]["attributes"][1]["type"] = "money"
    record, model = synthesize(
        [fenced(bad), fenced(good_spec())], tmp_path, rounds=3, reruns=1, corruptions_per_task=5
    )
    assert record["status"] == "kept", record["problems"]
    info = record["agent_info"]
    assert info["rounds"] == 2 and len(model.seen) == 2
    assert [r["kind"] for r in info["rejections"]] == ["invalid_spec"]
    feedback = model.seen[1][-1]
    assert feedback["role"] == "user"
    assert "entities[0].attributes[1].type" in feedback["content"]
    assert "'money' is not one of" in feedback["content"]
    manifest = json.loads((tmp_path / "out" / record["bundle"] / "manifest.json").read_text())
    assert manifest["provenance"]["rounds"] == 2


def test_prose_in_every_round_is_a_named_rejection_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    agent, model = agent_for(["I would model bikes and stations."] * 3, rounds=3)
    try:
        summary = run_synthesis(agent, n=1, seed=0, recorder=SynthRecorder(tmp_path / "out", None))
    finally:
        agent.close()
    record = json.loads((tmp_path / "out" / "synth.jsonl").read_text().splitlines()[-1])
    assert (record["status"], record["reasons"], record["bundle"]) == (
        "rejected",
        ["no_spec"],
        None,
    )
    assert [r["kind"] for r in record["agent_info"]["rejections"]] == ["prose"] * 3
    assert len(model.seen) == 3 and "no JSON object" in model.seen[2][-1]["content"]
    assert summary.made == 0
    for folder in ("bundles", "rejected"):
        assert not any((tmp_path / "out" / folder).glob("*")), folder
    assert not any((tmp_path / "out").rglob("tasks.jsonl"))


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ("{" + " " * MAX_REPLY_CHARS + "}", "too_large"),
        ('{"a":' * (MAX_DEPTH + 5) + "1" + "}" * (MAX_DEPTH + 5), "too_deep"),
        ("```json\n" + "[" * 100_000 + "\n```", "prose"),  # no object at all
        ('{"spec_version": NaN}', "not_json"),
        ('{"spec_version": 1, "name": ', "not_json"),
        ('```json\n{"spec_version": 1, "name": "bad\\u0000name"}\n```', "invalid_spec"),
    ],
    ids=["oversize", "deep", "brackets", "nan", "truncated", "control-character"],
)
def test_hostile_replies_are_named_rejections(tmp_path: Path, reply: str, kind: str) -> None:
    with pytest.raises(ReplyRejected) as raised:
        parse_reply(reply)
    assert raised.value.kind == kind
    outcome, _ = make([reply], tmp_path)
    assert (outcome.made, outcome.reason) == (False, "no_spec")
    assert outcome.info["rejections"][0]["kind"] == kind and kind in outcome.detail


def test_a_cyclic_relation_is_refused_by_name(tmp_path: Path) -> None:
    spec = good_spec()
    child, parent = spec["relations"][0]["from"], spec["relations"][0]["to"]
    spec["relations"].append({"name": "back", "from": parent, "to": child})
    outcome, _ = make([fenced(spec)], tmp_path)
    assert (outcome.made, outcome.reason) == (False, "no_spec")
    assert "cyclic relation" in outcome.detail


def test_an_action_that_changes_nothing_is_refused_by_name(tmp_path: Path) -> None:
    spec = good_spec()
    action = next(t for t in spec["tools"] if t["kind"] == "action")
    action["to"] = action["from"]
    outcome, _ = make([fenced(spec)], tmp_path)
    assert outcome.reason == "no_spec" and "an action must change the state" in outcome.detail


def unsolvable_spec() -> dict[str, Any]:
    """Valid, but its only objective has five values over 300 rows: the best always ties."""
    spec = good_spec()
    spec["entities"][0]["rows"] = 300
    spec["entities"][0]["attributes"].append({"name": "gears", "type": "int", "min": 1, "max": 5})
    spec["tasks"][0]["objectives"] = ["gears"]
    return spec


def test_an_unsolvable_spec_is_redrawn_then_sent_back_then_named(tmp_path: Path) -> None:
    model = ScriptedModel([fenced(unsolvable_spec())] * 2)
    agent = SpecAgent(
        "bike sharing",
        model,
        model="scripted",
        config=SpecConfig(max_rounds=2, tasks_per_bundle=1, difficulties=(1,)),
    )
    staging = tmp_path / "staging"
    try:
        outcome = agent.make(Job(0, 0, "spec-bike-sharing-0"), staging)
    finally:
        agent.close()
    assert (outcome.made, outcome.reason) == (False, "spec_unsolvable")
    assert "tie for the best gears" in outcome.detail and not staging.exists()
    assert "could not draw a task" in model.seen[1][-1]["content"]
    assert [r["kind"] for r in outcome.info["rejections"]] == ["unsolvable", "unsolvable"]


def test_rounds_sample_with_their_own_seeds_and_model_errors_are_named(tmp_path: Path) -> None:
    outcome, model = make(["prose", "more prose", PolicyError("server down")], tmp_path, rounds=3)
    assert (outcome.made, outcome.reason) == (False, "policy_error")
    assert "server down" in outcome.detail and outcome.info["rounds"] == 3
    assert len(set(model.seeds)) == 3


def test_a_category_with_no_words_is_refused_without_asking(tmp_path: Path) -> None:
    outcome, model = make([fenced(good_spec())], tmp_path, category="  42 ")
    assert (outcome.made, outcome.reason) == (False, "category_rejected") and not model.seen


def test_the_prompt_holds_the_category_schema_example_and_rules(tmp_path: Path) -> None:
    outcome, model = make(["prose"], tmp_path, category='ferry "crossings" {x}')
    ask = model.seen[0][-1]["content"]
    assert '"ferry \\"crossings\\" {x}"' in ask  # the category travels as JSON text
    assert '"additionalProperties":false' in ask and '"name": "library_loans"' in ask
    assert "Levels 3-5 need" in ask and outcome.reason == "no_spec"


def test_the_cli_builder_refuses_an_agent_baseline_as_the_model() -> None:
    with pytest.raises(ValueError, match="agent baseline"):
        make_spec_agent("bike sharing", "gold", max_rounds=2)
    with pytest.raises(ValueError, match="max-rounds"):
        SpecConfig(max_rounds=0)
