"""The spec writer's cold-start data and held-out probe (envgym.synth_agents.spec_cold_start):
the domain split, teacher examples token for token with the loss on the reply only, the shared
prompt prefix, and the probe's counts with scripted policies."""

from __future__ import annotations

from typing import Any

import pytest

from envgym.models.chat import ChatFormat, end_tokens
from envgym.policy import PolicyError, SamplingParams, Turn, Usage
from envgym.synth_agents import spec_prompts
from envgym.synth_agents.domain_corpus import notes
from envgym.synth_agents.spec_agent import parse_reply
from envgym.synth_agents.spec_cold_start import (
    probe_specs,
    split_domains,
    teacher_example,
    teacher_reply,
)
from envgym.trainer.sft import shared_prefix

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def fmt() -> ChatFormat:
    from envgym.embedded import load_tokenizer

    return ChatFormat(load_tokenizer(), "hermes")


def test_split_is_seeded_disjoint_and_keeps_the_prompts_example() -> None:
    a, b = split_domains(20, 0), split_domains(20, 0)
    assert a == b and len(a.held_out) == 20
    assert len(a.train) + len(a.held_out) == len(notes())
    assert not {n.domain for n in a.train} & {n.domain for n in a.held_out}
    assert split_domains(20, 1).held_out != a.held_out
    for seed in range(10):
        assert "library loans" in {n.domain for n in split_domains(100, seed).train}
    with pytest.raises(ValueError, match="--held-out must be in"):
        split_domains(len(notes()), 0)


def test_teacher_example_trains_on_the_reply_only(fmt: ChatFormat) -> None:
    note = split_domains(20, 0).train[0]
    end_ids = end_tokens(fmt.tokenizer)
    example = teacher_example(note, 0, fmt, end_ids)
    first = example.loss_mask.index(1)
    assert set(example.loss_mask[first:]) == {1} and set(example.loss_mask[:first]) == {0}
    written = list(example.token_ids[first:])
    assert written[-1] in end_ids
    assert fmt.tokenizer.decode(written[:-1]) == teacher_reply(note, 0)
    # the prompt is what the chat template gives the spec agent's first message
    text = fmt.tokenizer.apply_chat_template(
        spec_prompts.first_prompt(note.domain), tokenize=False, add_generation_prompt=True
    )
    ids = fmt.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert list(example.token_ids[:first]) == list(ids)
    assert parse_reply(teacher_reply(note, 0)).name  # the agent accepts what it is taught


def test_the_prompt_is_a_shared_prefix_with_the_category_last(fmt: ChatFormat) -> None:
    a, b = split_domains(20, 0).train[:2]
    end_ids = end_tokens(fmt.tokenizer)
    rows = [teacher_example(n, 0, fmt, end_ids) for n in (a, b)]
    prompt = rows[0].loss_mask.index(1)
    # everything before the category's name is shared: the batch runs it once
    assert shared_prefix(rows) > 0.95 * prompt


class ByDomain:
    """A policy answering from a table keyed by the category the prompt asks for."""

    version = 0
    name = "by-domain"

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        assert params.temperature == 0.0
        domain = next(n for n in notes() if session == f"probe-{n.domain}")
        reply = self.answer(domain)
        if isinstance(reply, BaseException):
            raise reply
        return Turn(text=reply, usage=Usage(completion_tokens=1))

    async def end_session(self, session: str) -> None:
        pass

    async def aclose(self) -> None:
        pass


def test_probe_counts_compiled_refused_and_failed_replies() -> None:
    domains = split_domains(20, 0).held_out[:3]
    taught = probe_specs(ByDomain(lambda n: teacher_reply(n, 0)), domains, compile_tasks=2)
    assert (taught["domains"], taught["compiled"], taught["valid_spec_rate"]) == (3, 3, 1.0)
    prose = probe_specs(ByDomain(lambda n: "A library has books."), domains)
    assert prose["kinds"] == {"prose": 3} and prose["valid_spec_rate"] == 0.0
    broken = probe_specs(ByDomain(lambda n: PolicyError("server down")), domains[:1])
    assert broken["kinds"] == {"policy_error": 1}
    cut = probe_specs(ByDomain(lambda n: teacher_reply(n, 0)[:400]), domains[:1])
    assert cut["kinds"] == {"not_json": 1}
