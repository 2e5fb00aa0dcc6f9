"""The local engine feeds its model on the model's device, without a GPU: a stand-in model whose
parameter sits on ``meta`` records where every input of every forward is (ids, positions, the
mask placeholder and the KV buffers), for a prefill and a batched decode step.  Inputs left on
the CPU show up as ``cpu``.  The real GPU run is scripts/gpu_check.sh (docs/GPU.md)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import LlamaConfig

from envgym.embedded import load_tokenizer
from envgym.models import kv
from envgym.models.chat import ChatFormat
from envgym.models.engine import Engine, Request
from envgym.policy import SamplingParams

META = torch.device("meta")
START = [{"role": "user", "content": "Say something."}]


class _Recorder(torch.nn.Module):
    """A causal LM's surface on another device: one parameter on ``meta``; each forward
    records its inputs' devices and answers uniform logits on the CPU."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=8,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
        )
        self.generation_config = None
        self.weight = torch.nn.Parameter(torch.empty(1, device=META))
        self.seen: list[dict[str, torch.device]] = []

    def forward(
        self,
        *,
        input_ids: Any,
        position_ids: Any,
        past_key_values: Any,
        attention_mask: Any,
        use_cache: bool,
        logits_to_keep: int = 0,
    ) -> Any:
        self.seen.append(
            {
                "input_ids": input_ids.device,
                "position_ids": position_ids.device,
                "attention_mask": attention_mask.device,
                "kv": past_key_values.rows[0].keys[0].device,
            }
        )
        return SimpleNamespace(logits=torch.zeros(input_ids.shape[0], 1, self.config.vocab_size))


@pytest.mark.timeout(120)
def test_prefill_and_decode_feed_the_model_on_its_device() -> None:
    tokenizer = load_tokenizer()
    model = _Recorder(len(tokenizer))
    engine = Engine(
        model, ChatFormat(tokenizer), max_batch=2, max_kv_bytes=1 << 30, stop_at_tool_call=False
    )
    try:
        params = SamplingParams(temperature=1.0, max_tokens=8, seed=0)
        rows = [
            engine._prefill(Request(f"s{i}", START, [], params, None, None))  # type: ignore[arg-type]
            for i in range(2)
        ]
        engine._rows = [r for r in rows if r is not None]
        engine._step()  # one batched decode step of both rows
        sampled = [len(r.tokens) for r in engine._rows]
    finally:
        engine._rows = []  # never handed to the worker: nothing for it to fail on stop
        engine.stop()
    assert len(model.seen) == 2 + 1  # two prefills, then one decode step for both rows
    for seen in model.seen:
        assert seen == dict.fromkeys(seen, META), seen
    assert sampled == [1, 1]  # sampled on the CPU, from the CPU logits the engine brought back


def test_ragged_attention_builds_its_mask_on_the_querys_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    masks: list[Any] = []

    def sdpa(q: Any, k: Any, v: Any, *, attn_mask: Any, **_: Any) -> Any:
        masks.append(attn_mask)
        return torch.empty(q.shape, device=q.device)

    monkeypatch.setattr(kv.F, "scaled_dot_product_attention", sdpa)
    store = kv.KVStore(1, 1, 4, torch.float32, META)
    store.reserve(5)
    keys = store.keys[0][:, :, :5]
    query = torch.empty(1, 2, 2, 4, device=META)  # 2 new tokens after 3 cached: a masked prefill
    kv.ragged_attention(
        torch.nn.Module(),
        query,
        kv.RaggedKV([keys], [keys], 2),
        kv.RaggedKV([keys], [keys], 2),
        None,
    )
    assert [m.device for m in masks] == [META]
    assert kv.mask_placeholder(3, META).device == META
