"""Model-driven search-QA synthesis (DeepSeek-V3.2 §3.2.3 "Search Agent").

Per sampled entity:

1. **sample** — long-tail entities: weight ``1 / (1 + reverse dependencies)`` over packages with
   a section and dependencies (the seed's "informative long-tail entities"), prefix-stable in
   the seed so a larger ``n`` extends a run rather than reshuffling it;
2. **construct** — a question-construction agent explores from the entity with search/open/find
   (``hops`` documents deep, ``breadth`` searches per hop) and writes ``{question, answer,
   evidence}``; the pair is then *grounded* programmatically: evidence ids exist, the entity is
   among them, at least ``hops`` documents, the answer occurs in an evidence document and not
   in the question;
3. **verify** — a verification agent with search checks the ground truth, ``verify_passes``
   times; every pass must say ``correct``.  (Verified before answering, not after as in the
   seed's order: the kept set is the same and a rejected pair costs no candidate runs.)
4. **answer** — answer agents of different models/prompts/temperatures (roles.ANSWER_STYLES)
   attempt the question; one that is right (equivalent by the bundle's verifier, or the answer
   anywhere in its reply — the lenient side, so doubtful pairs are dropped) drops the pair, and
   the remaining agents are not run.
5. **keep** — verified and every candidate wrong: into the bundle, with a failed candidate's
   answer as the declared wrong-answer witness.

Every stage result is a journal record (envgym/synth_agents/journal.py: fsync'd, keyed, a key never
written twice), so a killed run resumes where it stopped and redoes at most the stages that
were in flight.  Yields come from the journal (yields.py).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envgym.envs.search_qa.bundle_files.verifier import equivalent, normalize
from envgym.envs.search_qa.facts import Facts, maintainer_email, maintainer_name
from envgym.envs.search_qa.procedural import QAPair
from envgym.policy import Policy, SamplingParams
from envgym.synth_agents.journal import Journal
from envgym.synth_agents.search_qa import roles
from envgym.synth_agents.search_qa.agent_loop import run_agent
from envgym.synth_agents.search_qa.yields import stage_yield
from envgym.tools.search import SearchTools
from envgym.tools.search.build import package_document
from envgym.tools.search.debian import Package

JOURNAL = "journal.jsonl"


@dataclass(frozen=True)
class SynthConfig:
    n: int = 10  # entities explored (kept pairs are at most this)
    seed: int = 0
    hops: int = 2  # depth: documents the question must need
    breadth: int = 3  # searches per hop the constructor may make
    constructor: str = "smollm2"
    verifier: str = ""  # default: the constructor's model
    answer_models: tuple[str, ...] = ()  # default: the constructor's model
    verify_passes: int = 1
    max_tokens: int = 512  # per model reply
    temperature: float = 0.7  # constructor's
    answer_tool_turns: int = 4
    verify_tool_turns: int = 4
    concurrency: int = 1  # entities in flight

    def __post_init__(self) -> None:
        if (
            self.n < 1
            or self.hops < 1
            or self.breadth < 1
            or self.verify_passes < 1
            or self.concurrency < 1
        ):
            raise ValueError("n, hops, breadth, verify_passes and concurrency must all be >= 1")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, not {self.max_tokens}")

    @property
    def verifier_model(self) -> str:
        return self.verifier or self.constructor

    def agents(self) -> list[roles.AnswerAgent]:
        return roles.answer_agents(list(self.answer_models) or [self.constructor])

    def identity(self) -> dict[str, Any]:
        """What must match for a journal to be resumed (``n`` may grow; concurrency is free)."""
        same = asdict(self)
        for free in ("n", "concurrency"):
            same.pop(free)
        same["answer_models"] = list(self.answer_models)
        return same


def sample_entities(packages: Sequence[Package], n: int, seed: int) -> list[str]:
    """``n`` distinct long-tail entities; the first ``m`` are the same for any ``n >= m``."""
    facts = Facts.of(packages)
    names = sorted(p.name for p in packages if p.section and p.depends)
    if len(names) < n:
        raise ValueError(
            f"the corpus has {len(names)} informative packages; asked for {n} entities"
        )
    cumulative = list(itertools.accumulate(1.0 / (1 + facts.popularity(name)) for name in names))
    rng = random.Random(seed)
    chosen: dict[str, None] = {}
    while len(chosen) < n:
        chosen.setdefault(names[bisect.bisect(cumulative, rng.random() * cumulative[-1])], None)
    return list(chosen)


def _mentions(text: str, answer: str) -> bool:
    """``answer`` as a whole token in ``text`` (both normalized): package names hold - . +."""
    needle = normalize(answer)
    return (
        bool(needle)
        and re.search(rf"(?<![a-z0-9]){re.escape(needle)}(?![a-z0-9])", normalize(text)) is not None
    )


def ground(
    raw: dict[str, Any], entity: str, packages: dict[str, Package], hops: int
) -> tuple[QAPair | None, str]:
    """A constructed pair checked against the corpus, with its answer kind and aliases."""
    evidence = raw["evidence"]
    unknown = [e for e in evidence if e not in packages]
    if unknown:
        return None, f"evidence names unknown documents {unknown[:3]}"
    if entity not in evidence:
        return None, f"the evidence does not include the start entity {entity}"
    if len(evidence) < hops:
        return None, f"{len(evidence)} evidence document(s); the depth asks for {hops}"
    question, answer = raw["question"], raw["answer"]
    if len(question) > 1000 or len(answer) > 200:
        return None, "question or answer too long"
    if _mentions(question, answer):
        return None, "the answer is in the question"
    docs = [packages[e] for e in evidence]
    if not any(_mentions(package_document(p).body, answer) for p in docs):
        return None, "the answer occurs in no evidence document"
    kind, aliases = "text", ()
    if answer in packages:
        kind = "name"
    elif any(
        answer in (p.fields.get("Version", ""), p.fields.get("Version", "").split(":", 1)[-1])
        for p in docs
    ):
        kind = "version"
    else:
        for p in docs:
            if p.maintainer and normalize(maintainer_name(p.maintainer)) == normalize(answer):
                kind, aliases = (
                    "person",
                    tuple(x for x in (maintainer_email(p.maintainer), p.maintainer) if x),
                )
                break
    return QAPair(question, answer, aliases, kind, tuple(evidence), len(evidence), "model",
                  (("entity", entity),)), ""  # fmt: skip


def candidate_correct(text: str, pair: QAPair) -> bool:
    """Right by the bundle's equivalence, or the answer anywhere in the reply (lenient: a pair a
    candidate may have answered is not kept)."""
    given = roles.read_answer(text)
    return equivalent(given, pair.answer, list(pair.aliases), pair.kind) or _mentions(
        text, pair.answer
    )


def _pair_of(record: dict[str, Any]) -> QAPair:
    p = record["pair"]
    return QAPair(
        p["question"],
        p["answer"],
        tuple(p["aliases"]),
        p["kind"],
        tuple(p["evidence"]),
        p["hops"],
        p["template"],
        tuple(tuple(x) for x in p["params"]),
    )  # type: ignore[arg-type]


@dataclass
class Synthesis:
    """One run over ``out/``; ``policies`` maps model specs to loaded policies (shared by roles)."""

    out: Path
    packages: Sequence[Package]
    tools: SearchTools
    config: SynthConfig
    policies: dict[str, Policy]
    by_name: dict[str, Package] = field(init=False)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.by_name = {p.name: p for p in self.packages}
        self.journal = Journal(self.out / JOURNAL)
        settings = self.journal.get("run", "config")
        if settings is None:
            self.journal.append("run", "config", {"config": self.config.identity()})
        elif settings["config"] != self.config.identity():
            raise ValueError(f"{self.out} holds a run with other settings ({settings['config']}); "
                             "resume with the same settings or use a fresh --out")  # fmt: skip

    def _params(self, temperature: float, key: str) -> SamplingParams:
        seed = (self.config.seed * 1_000_003 + sum(map(ord, key)) * 7_919) % 2**31
        return SamplingParams(temperature=temperature, max_tokens=self.config.max_tokens, seed=seed)

    async def run(self) -> dict[str, Any]:
        entities = sample_entities(self.packages, self.config.n, self.config.seed)
        gate = asyncio.Semaphore(self.config.concurrency)

        async def one(number: int, entity: str) -> None:
            async with gate:
                await self._entity(f"{number:05d}", entity)

        await asyncio.gather(*(one(i, e) for i, e in enumerate(entities)))
        return stage_yield(self.journal)

    def kept(self) -> list[tuple[QAPair, str | None]]:
        """Kept pairs in entity order, each with a failed candidate's answer (the witness)."""
        out = []
        for decision in sorted(self.journal.records("decision"), key=lambda r: r["key"]):
            if decision["kept"]:
                pair = _pair_of(self.journal.get("construct", decision["key"]))  # type: ignore[arg-type]
                wrong = [r["answer"] for r in self.journal.records("answer")
                         if r["key"].split("/")[0] == decision["key"] and r["answer"].strip()]  # fmt: skip
                out.append((pair, next((w for w in wrong if not equivalent(w, pair.answer, list(pair.aliases),
                                                                          pair.kind)), None)))  # fmt: skip
        return out

    async def _entity(self, key: str, entity: str) -> None:
        if self.journal.get("decision", key):
            return
        made = self.journal.get("construct", key) or await self._construct(key, entity)
        if not made["ok"]:
            return self._decide(key, "construct", made["reason"])
        pair = _pair_of(made)
        checked = self.journal.get("verify", key) or await self._verify(key, pair)
        if not checked["ok"]:
            return self._decide(key, "verify", "; ".join(checked["reasons"]))
        for agent in self.config.agents():
            tried = self.journal.get("answer", f"{key}/{agent.name}") or await self._answer(
                key, agent, pair
            )
            if tried["correct"]:
                return self._decide(key, "answer", f"answered by {agent.name}")
        self._decide(key, "kept", "verified; every candidate answer is wrong", kept=True)

    def _decide(self, key: str, stage: str, reason: str, *, kept: bool = False) -> None:
        self.journal.append("decision", key, {"kept": kept, "stage": stage, "reason": reason})

    async def _construct(self, key: str, entity: str) -> dict[str, Any]:
        c = self.config
        document = package_document(self.by_name[entity])
        messages = [{"role": "system", "content": roles.CONSTRUCT_SYSTEM},
                    {"role": "user", "content": roles.CONSTRUCT_USER.format(
                        entity=entity, document=document.body[:2000], hops=c.hops, breadth=c.breadth)}]  # fmt: skip
        run = await run_agent(self.policies[c.constructor], self.tools, messages, session=f"construct-{key}",
                              params=self._params(c.temperature, f"construct-{key}"),
                              max_tool_turns=c.hops * (c.breadth + 1))  # fmt: skip
        raw, reason = roles.read_pair(run.text)
        pair = None
        if raw is not None:
            pair, reason = ground(raw, entity, self.by_name, c.hops)
        record = {
            "entity": entity,
            "ok": pair is not None,
            "reason": reason,
            "reply": run.text[-500:],
            "opened": run.opened,
            "cost": run.cost(),
            "pair": None
            if pair is None
            else {**asdict(pair), "params": [list(x) for x in pair.params]},
        }
        self.journal.append("construct", key, record)
        return self.journal.get("construct", key)  # type: ignore[return-value]

    async def _verify(self, key: str, pair: QAPair) -> dict[str, Any]:
        c = self.config
        reasons, costs, ok = [], [], True
        for number in range(c.verify_passes):
            ask = roles.VERIFY_USER.format(
                question=pair.question, answer=pair.answer, evidence=", ".join(pair.evidence)
            )
            messages = [
                {"role": "system", "content": roles.VERIFY_SYSTEM},
                {"role": "user", "content": ask},
            ]
            run = await run_agent(self.policies[c.verifier_model], self.tools, messages,
                                  session=f"verify-{key}-{number}", params=self._params(0.0 if number == 0 else 0.7,
                                  f"verify-{key}-{number}"), max_tool_turns=c.verify_tool_turns)  # fmt: skip
            passed, reason = roles.read_verdict(run.text)
            reasons.append(f"pass {number + 1}: {reason}")
            costs.append(run.cost())
            if not passed:
                ok = False
                break  # one failed pass rejects; the rest would cost model time for nothing
        cost = {k: round(sum(x[k] for x in costs), 4) for k in costs[0]}
        self.journal.append("verify", key, {"ok": ok, "reasons": reasons, "cost": cost})
        return self.journal.get("verify", key)  # type: ignore[return-value]

    async def _answer(self, key: str, agent: roles.AnswerAgent, pair: QAPair) -> dict[str, Any]:
        messages = [
            {"role": "system", "content": agent.system},
            {"role": "user", "content": roles.ANSWER_USER.format(question=pair.question)},
        ]
        run = await run_agent(self.policies[agent.model], self.tools, messages, session=f"answer-{key}-{agent.name}",
                              params=self._params(agent.temperature, f"answer-{key}-{agent.name}"),
                              max_tool_turns=self.config.answer_tool_turns if agent.tools else 0,
                              use_tools=agent.tools)  # fmt: skip
        record = {"agent": agent.name, "model": agent.model, "answer": roles.read_answer(run.text)[:300],
                  "correct": candidate_correct(run.text, pair), "cost": run.cost()}  # fmt: skip
        self.journal.append("answer", f"{key}/{agent.name}", record)
        return self.journal.get("answer", f"{key}/{agent.name}")  # type: ignore[return-value]
