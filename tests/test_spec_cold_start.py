"""The spec writer's cold-start data and held-out probe (envgym.synth_agents.spec_cold_start):
the domain split, teacher examples token for token with the loss on the reply only, the shared
prompt prefix, and the probe's counts with scripted policies."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from envgym.apps.spec_cold_start_run import teacher_example
from envgym.models.chat import ChatFormat, end_tokens
from envgym.policy import PolicyError, SamplingParams, Turn, Usage
from envgym.synth_agents import spec_prompts
from envgym.synth_agents.domain_corpus import notes
from envgym.synth_agents.spec_agent import parse_reply
from envgym.synth_agents.spec_cold_start import probe_specs, split_domains, teacher_reply
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
        spec_prompts.first_prompt(note.domain, "brief"), tokenize=False, add_generation_prompt=True
    )
    ids = fmt.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert list(example.token_ids[:first]) == list(ids)
    assert parse_reply(teacher_reply(note, 0)).name  # the agent accepts what it is taught


def test_the_prompt_is_a_shared_prefix_with_the_category_last(fmt: ChatFormat) -> None:
    a, b = split_domains(20, 0).train[:2]
    end_ids = end_tokens(fmt.tokenizer)
    rows = [teacher_example(n, 0, fmt, end_ids, "full") for n in (a, b)]
    prompt = rows[0].loss_mask.index(1)
    # everything before the category's name is shared: a batch (or vLLM's prefix cache) runs it
    # once
    assert shared_prefix(rows) > 0.95 * prompt
    brief = teacher_example(a, 0, fmt, end_ids)
    assert brief.loss_mask.index(1) < 100  # the taught model is asked in one line


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


def test_a_taught_folder_is_asked_the_way_it_was_taught(tmp_path) -> None:
    from envgym.synth_agents.spec_agent import taught_prompt

    assert taught_prompt("smollm2") == "full"
    (tmp_path / "sft_run.json").write_text('{"spec_prompt": "brief"}')
    assert taught_prompt(str(tmp_path)) == "brief"
    for damaged in ('{"spec_prompt": "rm -rf"}', "[1, 2]", "{not json", '"brief"'):
        (tmp_path / "sft_run.json").write_text(damaged)
        assert taught_prompt(str(tmp_path)) == "full"
    with pytest.raises(ValueError, match="unknown spec prompt"):
        spec_prompts.first_prompt("bike sharing", "tiny")


def _tiny_folder(path: Any) -> str:
    """A tiny random Llama with SmolLM2's tokenizer: the real training and probe paths, fast."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from envgym.embedded import load_tokenizer

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, eos_token_id=2, bos_token_id=1,
                         pad_token_id=2, tie_word_embeddings=True)  # fmt: skip
    LlamaForCausalLM(config).float().save_pretrained(str(path))
    load_tokenizer().save_pretrained(str(path))
    return str(path)


def test_cold_start_writes_a_folder_the_spec_agent_asks_briefly(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from envgym.apps.spec_cold_start_run import SpecColdStartConfig, run_spec_cold_start
    from envgym.cli import app
    from envgym.synth_agents.spec_agent import taught_prompt

    base = _tiny_folder(tmp_path / "base")
    cfg = SpecColdStartConfig(held_out=20, epochs=1, batch_tokens=4096, max_tokens=64,
                              max_examples=4)  # fmt: skip
    out = tmp_path / "taught"
    summary = run_spec_cold_start(out, cfg, model=base, probe=2)
    assert summary["train_domains"] == len(notes()) - 20 == summary["examples"]
    assert summary["steps"] >= 1 and summary["policy_tokens"] > 50_000  # all; 4 trained on
    assert summary["probe"]["domains"] == 2 == sum(summary["probe"]["kinds"].values())
    assert taught_prompt(str(out)) == "brief"
    # --probe-only: the taught folder probed again, nothing trained; a folder of another split
    # or one never taught is refused by name
    again = run_spec_cold_start(out, cfg, model=base, probe=1, probe_only=True)
    assert again["probe"]["domains"] == 1 and "steps" not in again
    assert again["held_out_domains"] == summary["held_out_domains"]
    with pytest.raises(ValueError, match="another domain split"):
        run_spec_cold_start(out, replace(cfg, seed=1), model=base, probe=1, probe_only=True)
    with pytest.raises(ValueError, match="needs a folder taught by cold-start spec-writer"):
        run_spec_cold_start(tmp_path / "none", cfg, model=base, probe=1, probe_only=True)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "sft_run.json").symlink_to(out / "sft_run.json")
    with pytest.raises(ValueError, match="is a link or over 4 MiB"):
        run_spec_cold_start(linked, cfg, model=base, probe=1, probe_only=True)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "sft_run.json").write_text("[1, 2")
    with pytest.raises(ValueError, match="not readable JSON"):
        run_spec_cold_start(tmp_path / "junk", cfg, model=base, probe=1, probe_only=True)
    # bad input is named, and nothing is trained
    result = CliRunner().invoke(
        app, ["cold-start", "spec-writer", "--out", str(tmp_path / "x"), "--held-out", "500"]
    )
    assert result.exit_code == 2 and "--held-out must be in" in result.output
    assert not (tmp_path / "x").exists()
    result = CliRunner().invoke(
        app, ["cold-start", "spec-writer", "--out", str(tmp_path / "x"), "--max-examples", "0"]
    )
    assert result.exit_code == 2 and "--max-examples must be >= 1" in result.output
    assert not (tmp_path / "x").exists()
