"""Model-driven search-QA synthesis (envgym/synth_agents/search_qa/model_pipeline.py) stage by
stage, against a scripted OpenAI-compatible server on 127.0.0.1 over the hermetic fixture corpus.

The server plays every role from what it is sent (system prompt → role, entity named in the
prompt → that entity's scenario), never from request order, so a resumed run sees the same
replies: ``garbage`` (no pair), ``reject`` (verifier says incorrect), ``answered`` (the
``searcher`` answer agent is right), ``keep`` (verified; every candidate wrong).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from local_http import LocalServer
from search_corpus import dumpavail_text

from envgym.bundle import load_bundle
from envgym.envs.search_qa.facts import maintainer_name
from envgym.models.http_client import RetryPolicy
from envgym.models.openai_http import OpenAIPolicy
from envgym.synth_agents.journal import Journal
from envgym.synth_agents.search_qa import roles
from envgym.synth_agents.search_qa.model_pipeline import (
    JOURNAL,
    SynthConfig,
    ground,
    sample_entities,
)
from envgym.synth_agents.search_qa.run import synthesize_with_models
from envgym.tools.search import SearchTools
from envgym.tools.search.build import build_at
from envgym.tools.search.debian import parse_packages
from envgym.tools.search.index import Index

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[1]
PACKAGES = list(parse_packages(dumpavail_text().splitlines()))
BY_NAME = {p.name: p for p in PACKAGES}
N = 6
ENTITIES = sample_entities(PACKAGES, N, 0)
SCENARIOS = dict(zip(ENTITIES, ["garbage", "reject", "answered", "keep", "keep", "answered"]))
STYLE_OF = {system: name for name, system, _, _ in roles.ANSWER_STYLES}


def _entity_in(text: str) -> str:
    found = [e for e in ENTITIES if re.search(rf"(?<![\w-]){re.escape(e)}(?![\w-])", text)]
    assert len(found) == 1, text
    return found[0]


class ScriptedServer:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.log: list[tuple[str, str]] = []  # (role, entity) per request
        self.delay_s = delay_s
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(server.delay_s)
                message = server.reply(body["messages"])
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                raw = json.dumps(
                    {
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.local = LocalServer(Handler)
        self.url = f"{self.local.base}/v1"

    def stop(self) -> None:
        self.local.stop()

    def reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        system, user = messages[0]["content"], messages[1]["content"]
        role = {roles.CONSTRUCT_SYSTEM: "construct", roles.VERIFY_SYSTEM: "verify"}.get(
            system
        ) or STYLE_OF[system]
        entity = _entity_in(user.split("Its document:")[0])
        self.log.append((role, entity))
        scenario, used_tools = SCENARIOS[entity], any(m["role"] == "tool" for m in messages)
        who = maintainer_name(BY_NAME[entity].maintainer)
        if role == "construct":
            if scenario == "garbage":
                return {"role": "assistant", "content": "I would rather not write a question."}
            if not used_tools:  # look the entity up first: exercises the tools through the loop
                return _call("open", {"id": entity})
            pair = {
                "question": f"Who maintains the Debian package {entity}?",
                "answer": who,
                "evidence": [entity],
            }
            return {
                "role": "assistant",
                "content": "Here it is:\n```json\n" + json.dumps(pair) + "\n```",
            }
        if role == "verify":
            if not used_tools:
                return _call("find", {"id": entity, "pattern": "^Maintainer"})
            verdict = "incorrect" if scenario == "reject" else "correct"
            return {
                "role": "assistant",
                "content": json.dumps({"verdict": verdict, "reason": "checked"}),
            }
        right = scenario == "answered" and role == "searcher"
        return {"role": "assistant", "content": f"Answer: {who if right else 'Nobody Knows'}"}


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{name}_{time.monotonic_ns()}", "type": "function",
         "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sqa-synth")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENVGYM_CACHE", str(root / "cache"))
        return build_at(root / "cache" / "search" / "fixture", PACKAGES)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer()
    yield s
    s.stop()


def _policy(url: str) -> OpenAIPolicy:
    return OpenAIPolicy(url, "scripted", retry=RetryPolicy(attempts=1, timeout=20))


CONFIG = SynthConfig(n=N, hops=1, breadth=2, constructor="scripted", max_tokens=64)


def _expected_decisions() -> dict[str, str]:
    stage = {"garbage": "construct", "reject": "verify", "answered": "answer", "keep": "kept"}
    return {e: stage[s] for e, s in SCENARIOS.items()}


def test_stages_keep_only_verified_pairs_every_candidate_fails(
    server: ScriptedServer, index_dir: Path, tmp_path: Path
) -> None:
    payload = synthesize_with_models(tmp_path / "out", PACKAGES, SearchTools(Index(index_dir)), CONFIG,
                                     policies={"scripted": _policy(server.url)}, check="bwrap")  # fmt: skip
    journal = Journal(tmp_path / "out" / JOURNAL)
    decided = {
        journal.get("construct", r["key"])["entity"]: r["stage"]
        for r in journal.records("decision")
    }
    assert decided == _expected_decisions()
    y = payload["yield"]
    assert (y["explored"], y["constructed"], y["verified"], y["kept"]) == (6, 5, 4, 2)
    assert y["fraction"] == {
        "constructed": round(5 / 6, 4),
        "verified": 0.8,
        "kept": 0.5,
        "overall": round(2 / 6, 4),
    }
    assert y["dropped_at"] == {"construct": 1, "verify": 1, "answer": 2} and y["answered_by"] == {
        "searcher": 2
    }
    assert y["model_s"] > 0 and y["kept_per_model_hour"] > 0 and y["completion_tokens"] > 0
    # A candidate that answered ends the stage: the later 'quick' agent never runs on that pair.
    answered = [e for e, s in SCENARIOS.items() if s == "answered"]
    assert not [r for r in server.log if r[0] == "quick" and r[1] in answered]
    assert (
        sum(1 for r in server.log if r[0] == "closed-book") == 4
    )  # every verified pair, first agent
    # The bundle: the two kept pairs, a failed candidate as the wrong-answer witness, check passed.
    assert payload["check"] == {"passed": True, "tasks": 2, "sandbox": "bwrap"}
    bundle = load_bundle(payload["bundle"])
    tasks = [
        json.loads(line)
        for line in (Path(payload["bundle"]) / "tasks.jsonl").read_text().splitlines()
    ]
    kept = [e for e, s in SCENARIOS.items() if s == "keep"]
    assert [t["metadata"]["evidence"] for t in tasks] == [[e] for e in kept]
    assert all(t["metadata"]["kind"] == "person" and t["witnesses"][0]["submission"] == {"answer": "Nobody Knows"}
               for t in tasks)  # fmt: skip
    assert bundle.manifest.content_hash  # loads with its hash verified
    manifest = json.loads((Path(payload["bundle"]) / "manifest.json").read_text())
    assert manifest["provenance"]["yield"]["kept"] == 2
    assert json.loads((tmp_path / "out" / "synth_search_qa.json").read_text())["yield"] == y


def test_grounding_rejects_pairs_the_corpus_does_not_support() -> None:
    entity = ENTITIES[3]
    who = maintainer_name(BY_NAME[entity].maintainer)

    def why(**change: Any) -> str:
        raw = {
            "question": f"Who maintains {entity}?",
            "answer": who,
            "evidence": [entity],
            **change,
        }
        return ground(raw, entity, BY_NAME, hops=1)[1]

    assert why() == ""
    assert "unknown documents" in why(evidence=[entity, "no-such-package"])
    assert "start entity" in why(evidence=[ENTITIES[4]])
    assert "occurs in no evidence document" in why(answer="Grace Hopper")
    assert "answer is in the question" in why(question=f"Is {who} the maintainer of {entity}?")
    assert "the depth asks for 2" in ground({"question": "q?", "answer": who, "evidence": [entity]}, entity,
                                            BY_NAME, hops=2)[1]  # fmt: skip
    for text, reason in [
        ("no json", "no JSON object"),
        ('{"question": "", "answer": "x", "evidence": ["a"]}', "no question"),
        ('{"question": "q", "answer": "x", "evidence": []}', "evidence is not"),
    ]:
        assert reason in roles.read_pair(text)[1]
    assert roles.read_verdict("looks right to me") == (False, "no readable verdict")
    assert roles.read_verdict('{"verdict": "Correct"}')[0] is True


def test_a_killed_run_resumes_without_redoing_journaled_stages(
    index_dir: Path, tmp_path: Path
) -> None:
    slow = ScriptedServer(delay_s=0.3)
    out = tmp_path / "out"
    script = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "from test_search_qa_synth import PACKAGES, CONFIG, _policy\n"
        "from pathlib import Path\n"
        "from envgym.tools.search import SearchTools\nfrom envgym.tools.search.index import Index\n"
        "from envgym.synth_agents.search_qa.run import synthesize_with_models\n"
        f"synthesize_with_models(Path({str(out)!r}), PACKAGES, SearchTools(Index(Path({str(index_dir)!r}))), CONFIG,\n"
        f"    policies={{'scripted': _policy({slow.url!r})}}, check=None)\n")  # fmt: skip
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            records = [json.loads(x) for x in (out / JOURNAL).read_text().splitlines()
                       if x.endswith("}")] if (out / JOURNAL).exists() else []  # fmt: skip
            decided = {r["key"] for r in records if r["type"] == "decision"}
            # Kill mid-entity: past two decisions, with a later entity's construction journaled
            # but its verification or answers not yet — the resume must pick up after it.
            if len(decided) >= 2 and any(r["type"] == "construct" and r["ok"] and r["key"] not in decided
                                         for r in records):  # fmt: skip
                break
            time.sleep(0.05)
        assert child.poll() is None, "the run ended before it could be killed"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        before = Journal(out / JOURNAL)
        done = {
            (r["type"], r["key"])
            for t in ("construct", "verify", "answer")
            for r in before.records(t)
        }
        assert 2 <= len(before.records("decision")) < N
        assert len(before.records("construct")) > len(
            before.records("decision")
        )  # killed mid-entity
        slow.log.clear()
        slow.delay_s = 0.0
        payload = synthesize_with_models(out, PACKAGES, SearchTools(Index(index_dir)), CONFIG,
                                         policies={"scripted": _policy(slow.url)}, check=None)  # fmt: skip
    finally:
        slow.stop()
    entity_of = {r["key"]: r["entity"] for r in before.records("construct")}
    for type_, key in done:  # nothing journaled before the kill was asked of a model again
        role = {"construct": "construct", "verify": "verify"}.get(type_) or key.split("/")[1]
        assert (role, entity_of[key.split("/")[0]]) not in slow.log, (type_, key)
    after = Journal(out / JOURNAL)
    decided = {
        after.get("construct", r["key"])["entity"]: r["stage"] for r in after.records("decision")
    }
    assert decided == _expected_decisions() and payload["yield"]["kept"] == 2
    lines = (out / JOURNAL).read_text().splitlines()
    keys = [(json.loads(x)["type"], json.loads(x)["key"]) for x in lines]
    assert len(keys) == len(set(keys))


def test_resuming_with_other_settings_is_refused(
    server: ScriptedServer, index_dir: Path, tmp_path: Path
) -> None:
    tools, policies = SearchTools(Index(index_dir)), {"scripted": _policy(server.url)}
    synthesize_with_models(tmp_path, PACKAGES, tools, SynthConfig(n=1, hops=1, constructor="scripted"),
                           policies=policies, check=None)  # fmt: skip
    with pytest.raises(ValueError, match="holds a run with other settings"):
        synthesize_with_models(tmp_path, PACKAGES, tools, SynthConfig(n=1, hops=2, constructor="scripted"),
                               policies=policies, check=None)  # fmt: skip


def test_a_model_server_that_is_down_stops_the_run_with_its_reason(
    index_dir: Path, tmp_path: Path
) -> None:
    dead = ScriptedServer()
    dead.stop()
    with pytest.raises(RuntimeError, match="127.0.0.1"):
        synthesize_with_models(tmp_path, PACKAGES, SearchTools(Index(index_dir)), CONFIG,
                               policies={"scripted": _policy(dead.url)}, check=None)  # fmt: skip
    assert Journal(tmp_path / JOURNAL).records("decision") == []


@pytest.mark.parametrize(("args", "message"), [
    (["--filter-k", "3"], "--filter-k does not apply to search-qa"),
    (["--agent", "wizard"], "--agent must be 'procedural' or 'llm'"),
])  # fmt: skip
def test_cli_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from envgym.cli import app

    result = CliRunner().invoke(app, ["synth", "search-qa", "--out", str(tmp_path), *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split())
