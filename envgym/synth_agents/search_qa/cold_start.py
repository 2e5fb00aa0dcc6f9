"""Cold start for the search-QA model roles: teacher traces a small model is fine-tuned on.

SmolLM2-135M, the embedded model, writes no question–answer pair when asked to play the
question-construction agent (docs/SEARCH_QA.md, "Measured"): it cannot follow the role unaided,
as it cannot call tools unaided in any env.  DeepSeek-V3.2 §3.2.2 starts RL from a *cold start*
for the same reason; here the roles of §3.2.3's pipeline get one:

* :func:`construction_script` — for a training entity, what a competent constructor does: it
  opens ``hops - 1`` documents down a dependency chain and asks for a field (maintainer or
  version) of the last one, naming each hop only by its one-line description, so answering needs
  every hop.  The description must be unique among the previous package's dependencies (checked
  over the corpus), the answer must not be in the question, and the pair must pass the
  pipeline's own grounding (``model_pipeline.ground``) — no trace teaches a pair the pipeline
  would drop.
* :func:`verification_script` — the verifier opens the last evidence document, writes the
  document's value beside the proposed one, and says ``correct`` for the true answer,
  ``incorrect`` for a neighbour's value of the same kind (both for every pair, so a rubber
  stamp is not what is learned).
* :class:`TeacherPolicy` — plays a script through the real :func:`agent_loop.run_agent` and the
  real search tools, writing each call as the model's own tool-call text and building every
  prompt with the local engine's own rule (``next_prompt``), so an example is token for token
  what the model will see and write; ``envgym/apps/cold_start_run.py``'s ``example_from`` turns a
  run into one SFT example (loss only on the written tokens: the trainer room is imported there).

Training entities are disjoint from the synthesis run's sample (``exclude``): the model never
sees a trace about an entity it will later be asked to build a question from.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envgym.envs.search_qa.facts import Facts, maintainer_name
from envgym.envs.search_qa.procedural import QAPair
from envgym.messages import ToolCall
from envgym.models.chat import ChatFormat
from envgym.models.session import TokenSession, forced_turn
from envgym.policy import PolicyError, SamplingParams, Turn
from envgym.synth_agents.search_qa import roles
from envgym.synth_agents.search_qa.model_pipeline import ground
from envgym.tools.search.build import package_document
from envgym.tools.search.debian import Package

Step = ToolCall | str  # a call the agent makes, or its final reply


@dataclass(frozen=True)
class Script:
    """One role episode to teach: the opening messages and what the agent writes."""

    role: str  # "construct" | "verify"
    entity: str
    messages: tuple[dict[str, Any], ...]
    steps: tuple[Step, ...]
    pair: QAPair


def _ask(kind: str, target: Package) -> tuple[str, str] | None:
    if kind == "person" and target.maintainer:
        return "Who maintains that package?", maintainer_name(target.maintainer)
    version = target.fields.get("Version", "")
    if kind == "version" and version:
        return "What is the version of that package?", version
    return None


def _unique_summary(facts: Facts, parent: str, child: Package) -> bool:
    """``child``'s description names it among ``parent``'s dependencies (case-insensitive)."""
    key = child.summary.casefold()
    return (
        bool(key)
        and sum(1 for d in facts.known_depends(parent) if d.summary.casefold() == key) == 1
    )


def construction_script(
    entity: str, facts: Facts, rng: random.Random, *, hops: int, breadth: int, kind: str
) -> Script | None:
    """A constructor's trace from ``entity`` (``None`` when no chain of ``hops`` fits)."""
    path = [entity]
    for _ in range(hops - 1):
        options = [d for d in facts.known_depends(path[-1])
                   if d.name not in path and _unique_summary(facts, path[-1], d)]  # fmt: skip
        if not options:
            return None
        path.append(rng.choice(options).name)
    target = facts.packages[path[-1]]
    asked = _ask(kind, target)
    if asked is None:
        return None
    ask, answer = asked
    if hops == 1:
        question = f"The Debian package {entity} is in section '{target.section}'. {ask.replace('that', 'this')}"
    else:
        hops_text = ", which depends on a package described as ".join(
            f'"{facts.packages[name].summary}"' for name in path[1:]
        )
        question = (
            f"The Debian package {entity} depends on a package described as {hops_text}. {ask}"
        )
    raw = {"question": question, "answer": answer, "evidence": path}
    pair, _why = ground(raw, entity, facts.packages, hops)
    if pair is None:
        return None
    document = package_document(facts.packages[entity])
    messages = ({"role": "system", "content": roles.CONSTRUCT_SYSTEM},
                {"role": "user", "content": roles.CONSTRUCT_USER.format(
                    entity=entity, document=document.body[:2000], hops=hops, breadth=breadth)})  # fmt: skip
    calls: list[Step] = [ToolCall(f"c{i}", "open", {"id": name}) for i, name in enumerate(path[1:])]
    return Script(
        "construct", entity, messages, (*calls, json.dumps(raw, ensure_ascii=False)), pair
    )


def _wrong_value(pair: QAPair, facts: Facts, rng: random.Random) -> str | None:
    """A wrong answer of the same kind: preferably the field of a package next to the target
    (another dependency of the previous hop, or an earlier hop), else of any package."""

    def value(p: Package) -> str:
        return (
            maintainer_name(p.maintainer) if pair.kind == "person" else p.fields.get("Version", "")
        )

    near = (
        [d.name for d in facts.known_depends(pair.evidence[-2])] if len(pair.evidence) > 1 else []
    )
    for names in (
        near + list(pair.evidence[:-1]),
        rng.sample(sorted(facts.packages), min(50, len(facts.packages))),
    ):
        values = sorted(
            {
                v
                for n in names
                if (v := value(facts.packages[n])) and v.casefold() != pair.answer.casefold()
            }
        )
        if values:
            return rng.choice(values)
    return None


def verification_script(
    pair: QAPair, entity: str, facts: Facts, rng: random.Random, *, correct: bool
) -> Script | None:
    """A verifier's trace: open the last evidence document, then the verdict with its reason."""
    proposed = pair.answer if correct else _wrong_value(pair, facts, rng)
    if proposed is None:
        return None
    field_name = "Maintainer" if pair.kind == "person" else "Version"
    target = pair.evidence[-1]
    ask = roles.VERIFY_USER.format(
        question=pair.question, answer=proposed, evidence=", ".join(pair.evidence)
    )
    messages = (
        {"role": "system", "content": roles.VERIFY_SYSTEM},
        {"role": "user", "content": ask},
    )
    # The reason comes first and puts the document's value beside the proposed one, so the
    # verdict is written after the comparison, not before it.
    reason = f"the {field_name} of {target} is {pair.answer}; the proposed answer is {proposed}"
    verdict = json.dumps(
        {"reason": reason, "verdict": "correct" if correct else "incorrect"}, ensure_ascii=False
    )
    return Script(
        "verify", entity, messages, (ToolCall("v0", "open", {"id": target}), verdict), pair
    )


def scripts_for(
    entities: Sequence[str], facts: Facts, *, hops: int, breadth: int, seed: int
) -> list[Script]:
    """Per entity that has a fitting chain: its construction trace and two verification traces
    of that pair, one with the true answer (``correct``) and one with a wrong value of the same
    kind (``incorrect``) — contrastive, so what is learned is the comparison, not a rubber
    stamp.  The asked field alternates between maintainer and version."""
    rng = random.Random(seed)
    out: list[Script] = []
    for number, entity in enumerate(entities):
        kinds = ("person", "version") if number % 2 == 0 else ("version", "person")
        made = next((s for k in kinds if (s := construction_script(entity, facts, rng, hops=hops,
                                                                     breadth=breadth, kind=k))), None)  # fmt: skip
        if made is None:
            continue
        checks = [
            verification_script(made.pair, entity, facts, rng, correct=c) for c in (True, False)
        ]
        out += [made, *(c for c in checks if c is not None)]
    return out


@dataclass
class Played:
    """A script being played: its steps, the engine's token session, and each turn's ids."""

    steps: list[Step]
    session: TokenSession = field(default_factory=TokenSession)
    turns: list[tuple[list[int], list[int]]] = field(
        default_factory=list
    )  # (prompt ids, written ids)


class TeacherPolicy:
    """A teacher-forcing :class:`~envgym.policy.Policy` that writes scripted steps as model text."""

    name = "teacher"
    version = 0

    def __init__(self, fmt: ChatFormat, end_ids: frozenset[int]) -> None:
        if not end_ids:
            raise ValueError("end_ids must name the model's end-of-turn token(s)")
        self.fmt = fmt
        self._end_ids = end_ids
        eos = fmt.tokenizer.eos_token_id
        self._eos = min(end_ids) if eos is None else eos
        self._sessions: dict[str, Played] = {}
        self.finished: dict[str, Played] = {}

    def begin(self, session: str, steps: Sequence[Step]) -> None:
        self._sessions[session] = Played(list(steps))

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        played = self._sessions.get(session)
        if played is None or len(played.turns) >= len(played.steps):
            raise PolicyError(f"{session}: the script has no step left")
        step = played.steps[len(played.turns)]
        is_call = isinstance(step, ToolCall)
        text = self.fmt.parser.format_calls([step]) if is_call else step
        turn = forced_turn(self.fmt, played.session, messages, tools, self._end_ids, text,
                           end_id=None if is_call else self._eos,  # the engine stops at a call's end marker
                           finish_reason="tool_calls" if is_call else "stop", where=session)  # fmt: skip
        played.turns.append((turn.prompt_ids, turn.token_ids))
        return turn

    async def end_session(self, session: str) -> None:
        played = self._sessions.pop(session, None)
        if played is not None:
            self.finished[session] = played

    async def aclose(self) -> None:
        self._sessions.clear()
