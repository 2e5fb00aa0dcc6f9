"""Teacher traces for the spec-writing agent, and the held-out probe of a taught model.

The embedded SmolLM2 writes no valid spec unaided.  Its cold start (DeepSeek-V3.2 §3.2.2)
teaches it the spec agent's one turn: the prompt is what
:func:`envgym.synth_agents.spec_prompts.first_prompt` asks for a category (the ``brief`` ask by
default: the taught model learns the schema, rules and layout instead of re-reading them, which
also keeps each example ~1.2k tokens instead of ~5k), the reply is the offline spec writer's spec
of that category's domain note (:func:`envgym.envs.procedural_kit.spec.writer.write_spec`, one
spec per seed) in a ```json block, in the prompt's example layout.  Token for token: the prompt
is built by the local engine's rule (``forced_turn``), the loss falls on the reply and its end
token only.  The folder records the prompt it was taught on, and the spec agent asks it that way
(``spec_agent.taught_prompt``).

Domains are split by a seeded shuffle of the corpus: ``held_out`` of them are never trained on
and the probe asks the taught model (greedy, one round) for their specs.  The hand-written
example the full prompt shows (library loans) is always a training domain: holding it out would
ask for a spec that prompt already holds.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.envs.procedural_kit.spec.compile import CompileError
from envgym.envs.procedural_kit.spec.note import DomainNote
from envgym.envs.procedural_kit.spec.writer import write_spec
from envgym.policy import Policy, PolicyError, SamplingParams
from envgym.synth_agents import spec_prompts as prompts
from envgym.synth_agents.domain_corpus import normalize, notes
from envgym.synth_agents.spec_agent import ReplyRejected, compile_redrawn, parse_reply

ALWAYS_TRAINED = ("library loans",)  # the prompt's worked example


@dataclass(frozen=True)
class DomainSplit:
    train: tuple[DomainNote, ...]
    held_out: tuple[DomainNote, ...]


def split_domains(held_out: int, seed: int) -> DomainSplit:
    """The corpus split by ``random.Random(seed)``: ``held_out`` domains are never trained on."""
    corpus = list(notes())
    pool = [n for n in corpus if normalize(n.domain) not in ALWAYS_TRAINED]
    if not 0 <= held_out < len(pool):
        raise ValueError(f"--held-out must be in 0..{len(pool) - 1}, not {held_out}")
    random.Random(f"spec-cold-start:{seed}").shuffle(pool)
    chosen = {n.domain for n in pool[:held_out]}
    return DomainSplit(
        train=tuple(n for n in corpus if n.domain not in chosen),
        held_out=tuple(n for n in corpus if n.domain in chosen),
    )


def teacher_reply(note: DomainNote, seed: int) -> str:
    """What the taught model should answer for ``note``'s domain: the writer's spec, fenced."""
    return "```json\n" + prompts.spec_text(write_spec(note, seed)) + "\n```"


def teacher_turn(
    note: DomainNote, seed: int, fmt: Any, end_ids: frozenset[int], prompt: str = "brief"
) -> tuple[list[int], list[int]]:
    """``(prompt ids, written ids)`` of one teacher turn: the spec agent's first prompt
    (``prompt``: spec_prompts.PROMPTS) for the domain and the teacher's reply with its end token.
    The trainer's example is made of it by the cold-start command (the synthesis room does not
    import the trainer)."""
    from envgym.models.session import TokenSession, forced_turn

    text = teacher_reply(note, seed)
    parse_reply(text)  # a teacher reply the agent would refuse is a writer bug: fail loudly
    eos = fmt.tokenizer.eos_token_id
    turn = forced_turn(fmt, TokenSession(), prompts.first_prompt(note.domain, prompt), [], end_ids,
                       text, end_id=min(end_ids) if eos is None else eos, finish_reason="stop",
                       where=note.domain)  # fmt: skip
    return list(turn.prompt_ids or []), list(turn.token_ids)


def probe_specs(
    policy: Policy,
    domains: Sequence[DomainNote],
    *,
    max_tokens: int = 2048,
    concurrency: int = 4,
    compile_tasks: int = 5,
    prompt: str = "brief",
) -> dict[str, Any]:
    """Ask ``policy`` once (greedy) for each domain's spec, as the spec agent's first round does:
    how many replies hold JSON, how many are valid specs, how many compile into a bundle whose
    every task is proved (the compiler's redraws as the agent makes them)."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=0)
    gate = asyncio.Semaphore(concurrency)

    async def ask(note: DomainNote) -> str:
        async with gate:
            turn = await policy.act(
                f"probe-{note.domain}", prompts.first_prompt(note.domain, prompt), [], params
            )
            await policy.end_session(f"probe-{note.domain}")
        content = turn.message.get("content") if turn.message is not None else None
        return content if isinstance(content, str) else (turn.text or "")

    async def main() -> list[str | BaseException]:
        return await asyncio.gather(*(ask(n) for n in domains), return_exceptions=True)

    replies = asyncio.run(main())
    kinds: Counter[str] = Counter()
    rows = []
    for note, reply in zip(domains, replies):
        if isinstance(reply, BaseException):
            if not isinstance(reply, PolicyError):
                raise reply
            kind = "policy_error"
        else:
            kind = _judge(reply, compile_tasks)
        kinds[kind] += 1
        rows.append({"domain": note.domain, "kind": kind,
                     "chars": 0 if isinstance(reply, BaseException) else len(reply)})  # fmt: skip
    n = len(domains)
    valid = kinds["compiled"] + kinds["unsolvable"]
    return {
        "domains": n,
        "kinds": dict(kinds),
        "valid_specs": valid,
        "valid_spec_rate": round(valid / n, 3) if n else None,
        "compiled": kinds["compiled"],
        "compiled_rate": round(kinds["compiled"] / n, 3) if n else None,
        "per_domain": rows,
    }


def _judge(reply: str, tasks: int) -> str:
    """``compiled`` | ``unsolvable`` (valid, no strict task on any redraw) | a refusal kind."""
    try:
        spec = parse_reply(reply)
    except ReplyRejected as rejected:
        return rejected.kind
    scratch = Path(tempfile.mkdtemp(prefix="envgym-spec-probe-"))
    try:
        drawn = compile_redrawn(spec, scratch / "bundle", seed=0, n_tasks=tasks)
    except CompileError:
        return "compile_error"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return "compiled" if drawn.root is not None else "unsolvable"
