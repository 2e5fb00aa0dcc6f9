"""Search QA with the real embedded model (SmolLM2-135M on the local engine), loaded once here:
``search-qa-v0`` episodes run end to end, and the model-driven synthesis pipeline runs every
role on it.  SmolLM2 cannot call tools unaided (docs/MODELS.md); both must still finish cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from search_corpus import dumpavail_text

from envgym import registry
from envgym.envs.search_qa.bundle_files.verifier import verify_answer
from envgym.envs.search_qa.env import SearchQAEnv
from envgym.policy import SamplingParams
from envgym.rollout import EpisodeResult, RolloutBudget, RolloutEngine, specs_for
from envgym.synth_agents.journal import Journal
from envgym.synth_agents.search_qa.model_pipeline import JOURNAL, SynthConfig
from envgym.synth_agents.search_qa.run import synthesize_with_models
from envgym.tools.search import SearchTools
from envgym.tools.search.build import build_at, default_index
from envgym.tools.search.debian import parse_packages
from envgym.tools.search.index import Index

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def smollm2() -> Iterator[Any]:
    from envgym.models.local import LocalPolicy

    policy = LocalPolicy.from_pretrained("smollm2")
    yield policy
    asyncio.run(policy.aclose())


def test_search_qa_v0_episodes_run_with_the_embedded_model(smollm2: Any) -> None:
    bundle = registry.resolve_bundle("search-qa-v0")  # the registered bundle, over the real corpus
    tools = SearchTools(default_index())
    tasks = {t["id"]: t for t in map(json.loads, (bundle / "tasks.jsonl").read_text().splitlines())}
    chosen = sorted(tasks)[:2]

    async def main() -> list[EpisodeResult]:
        engine = RolloutEngine.local(smollm2, functools.partial(SearchQAEnv, bundle, search=tools, sandbox="bwrap"),
                                     concurrency=2, params=SamplingParams(temperature=0.8, max_tokens=32, seed=0),
                                     budget=RolloutBudget(max_turns=3))  # fmt: skip
        async with engine, contextlib.aclosing(engine.run(specs_for(chosen, 1, seed=1))) as stream:
            return [r async for r in stream]

    results = asyncio.run(main())
    assert sorted(r.task_id for r in results) == chosen
    for r in results:
        assert r.error is None, r.error_message
        assert 1 <= r.turns <= 3 and r.sampled_tokens <= 3 * 32
        assert r.messages[0]["role"] in ("system", "user") and any(
            m["role"] == "assistant" for m in r.messages
        )
        # The reward is the verdict on what was submitted, recomputed here from the transcript.
        submitted = [json.loads(c["function"]["arguments"]) for m in r.messages if m["role"] == "assistant"
                     for c in m.get("tool_calls") or [] if c["function"]["name"] == "submit_answer"]  # fmt: skip
        checks = verify_answer(submitted[-1] if submitted else {}, tasks[r.task_id])["checks"]
        expected = 1.0 if submitted and all(c["passed"] for c in checks) else 0.0
        assert r.reward == expected == 0.0  # a 135M model does not find these answers


def test_synthesis_with_the_embedded_model(smollm2: Any, tmp_path: Path) -> None:
    """Every role on SmolLM2 (it writes no usable pair: dropped at construction, with reasons);
    then SmolLM2 as the answer agents behind a scripted constructor and verifier, so its
    answers decide what is kept — and a kept pair's bundle passes envgym check."""
    from test_search_qa_synth import ScriptedServer, _policy

    packages = list(parse_packages(dumpavail_text().splitlines()))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))
        tools = SearchTools(Index(build_at(tmp_path / "cache" / "search" / "fixture", packages)))
    config = SynthConfig(n=2, hops=1, breadth=1, constructor="smollm2", max_tokens=48)
    payload = synthesize_with_models(
        tmp_path / "all", packages, tools, config, policies={"smollm2": smollm2}
    )
    y = payload["yield"]
    assert (
        y["explored"] == 2 and y["decided"] == 2 and y["model_s"] > 0 and y["completion_tokens"] > 0
    )
    assert y["kept"] <= y["verified"] <= y["constructed"] <= y["explored"]
    for record in Journal(tmp_path / "all" / JOURNAL).records("construct"):  # a failure says why
        assert record["ok"] or record["reason"]
    assert (payload["bundle"] is None) == (y["kept"] == 0) and (
        not y["kept"] or payload["check"]["passed"]
    )
    print("all roles on smollm2:", json.dumps(y))

    server = ScriptedServer()
    try:
        config = SynthConfig(n=4, hops=1, breadth=1, constructor="scripted", answer_models=("smollm2",),
                             max_tokens=48, answer_tool_turns=1)  # fmt: skip
        payload = synthesize_with_models(tmp_path / "answers", packages, tools, config, check="bwrap",
                                         policies={"smollm2": smollm2, "scripted": _policy(server.url)})  # fmt: skip
    finally:
        server.stop()
    y = payload["yield"]
    assert (y["explored"], y["constructed"], y["verified"]) == (
        4,
        3,
        2,
    )  # the script's garbage and reject
    answers = Journal(tmp_path / "answers" / JOURNAL).records("answer")
    assert answers and all(r["model"] == "smollm2" for r in answers)
    assert y["kept"] == 2 - sum(
        y["answered_by"].values()
    )  # a pair a SmolLM2 agent answered is dropped
    if y["kept"]:
        assert payload["check"]["passed"] is True
    print("smollm2 answer agents:", json.dumps(y))
