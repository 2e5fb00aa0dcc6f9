"""The GPU check's engine part (scripts/gpu_check.py runs it): the local engine's start-up
check on the device, the vLLM weight sync and its probe against a stand-in server on
127.0.0.1 (no vLLM needed), and vLLM's routed experts replayed by the trainer (only where
``import vllm`` works)."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import torch
from gpu_check_common import F64, Failed, Sizes
from gpu_check_trainer import random_llama, trainer_config


def check_local_engine(sizes: Sizes, device: torch.device) -> str:
    """The local engine's start-up check (ragged KV cache vs a plain forward) on a model on the
    device: what ``build_engine`` runs for ``model.engine: local``."""
    from envgym.models.engine import Engine
    from envgym.models.kv import KVStore, kv_layout
    from envgym.models.local import _prepare

    model = random_llama(sizes, device, layers=2)
    _prepare(model)
    # Then the engine's own forward (no tokenizer on this machine, so not a whole turn): two
    # rows of different lengths prefilled, then decoded together in one ragged step.
    engine = Engine.__new__(Engine)
    engine.model, engine.moe_top_k, engine.device = model, 0, device
    lengths, stores = (7, 3), [KVStore(*kv_layout(model)) for _ in range(2)]
    rows = [torch.arange(1, n + 2, device=device)[None] * 11 for n in lengths]
    with torch.inference_mode():
        for store, ids in zip(stores, rows):
            prefix = torch.arange(ids.shape[1] - 1, device=device)[None]
            engine._forward([store], ids[:, :-1], prefix)
        got = engine._forward(
            stores,
            torch.cat([ids[:, -1:] for ids in rows]),
            torch.tensor([[n] for n in lengths], device=device),
        )
        want = torch.stack([model(input_ids=ids).logits[0, -1].float().cpu() for ids in rows])
    gap = float((got - want).abs().max())
    if not gap <= 1e-3 * float(want.abs().max()):
        raise Failed(f"the engine's batched ragged decode is {gap:.3g} from a plain forward")
    return (
        f"ragged prefill + decode reproduce a plain forward on the device; the engine's "
        f"batched decode of 2 ragged rows: max |dlogit| {gap:.2e}"
    )


class _StandIn(BaseHTTPRequestHandler):
    """vLLM's dev-mode endpoints: records the reload, then answers the probe's prompt log-probs
    from the folder it was told to reload, loaded afresh on the CPU in float64 — a server that
    loaded exactly what the sync wrote."""

    folder: ClassVar[str | None] = None
    calls: ClassVar[list[str]] = []

    def do_POST(self) -> None:  # the stdlib's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        type(self).calls.append(self.path)
        reply: dict[str, Any] = {}
        if self.path == "/collective_rpc":
            type(self).folder = body["kwargs"]["weights_path"]
        elif self.path == "/v1/completions":
            reply = {"choices": [{"prompt_logprobs": _served_logprobs(self.folder, body)}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def _served_logprobs(folder: str | None, body: dict[str, Any]) -> list[Any]:
    from transformers import AutoModelForCausalLM

    if folder is None:
        raise RuntimeError("probe before any reload")
    ids = list(body["prompt"])
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=F64)
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], dim=-1)
    return [None] + [
        {str(ids[i]): {"logprob": float(lp[i - 1, ids[i]]), "rank": 1}} for i in range(1, len(ids))
    ]


@contextmanager
def _stand_in_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _Engine:
    """What ``sync_weights`` reads of a ``VLLMPolicy``: its client's URL and served name."""

    def __init__(self, url: str) -> None:
        self.client = type("Client", (), {"base_url": url})()
        self.model = "policy"
        self.version = 0


def check_weight_sync(sizes: Sizes, device: torch.device, keep: dict[str, Any]) -> str:
    """``sync_weights`` for ``model.engine: vllm``: the untied safetensors copy written from the
    device, the three dev-mode calls, then the probe's CUDA forward against a float64 CPU
    reload of that copy (``check_engine_weights``, ``model.sync_check_tol`` 1e-3)."""
    from envgym.trainer.weight_sync import check_engine_weights, sync_weights

    model = keep.get("dense") or random_llama(sizes, device)
    with tempfile.TemporaryDirectory() as tmp, _stand_in_server() as url:
        config = trainer_config(
            sizes, model={"engine": "vllm", "vllm_url": url}, checkpoint={"dir": tmp}
        )
        engine = _Engine(url)
        _StandIn.calls = []
        asyncio.run(sync_weights(engine, model, 1, config))
        gap = asyncio.run(check_engine_weights(engine, model, 1e-3))
        tied = json.loads((Path(tmp) / "engine-weights" / "config.json").read_text())
    want = ["/collective_rpc", "/reset_prefix_cache", "/update_weight_version", "/v1/completions"]
    if _StandIn.calls[:4] != want or engine.version != 1:
        raise Failed(f"calls {_StandIn.calls}, engine version {engine.version}")
    if tied.get("tie_word_embeddings") is not False:
        raise Failed("the engine copy's head is still tied")
    return (
        f"reload + prefix reset + version, untied head written; probe max |dlogp| "
        f"{gap:.2e} (device float32 vs CPU float64 reload; tol 1e-3)"
    )


# -- vLLM itself ----------------------------------------------------------------------------


def check_vllm_routes(sizes: Sizes, device: torch.device) -> str:
    """A vLLM server of a small upcycled MoE with ``--enable-return-routed-experts``: the
    experts it reports for a greedy completion, replayed through the trainer's router capture,
    must agree (flip rate 0 with the same weights)."""
    import httpx

    from envgym.models.vllm_policy import _routed_experts
    from envgym.models.vllm_server import VLLMServer
    from envgym.trainer.routing import capture_routes, routing_flip_rate
    from envgym.trainer.smolmoe import upcycle_model

    dense = random_llama(sizes, torch.device("cpu"), layers=sizes.moe_layers)
    moe = upcycle_model(dense, n_experts=4, top_k=2, noise=0.1, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        moe.save_pretrained(tmp)
        server = VLLMServer(
            tmp,
            served_name="moe",
            venv=Path(sys.prefix),
            routed_experts=True,
            max_model_len=1024,
            log_path=Path(tmp) / "vllm.log",
            extra_args=("--skip-tokenizer-init",),
        )  # a random model: no tokenizer
        server.start()
        try:
            prompt = list(range(100, 132))
            reply = httpx.post(
                f"{server.base_url}/completions",
                timeout=300,
                json={
                    "model": "moe",
                    "prompt": prompt,
                    "max_tokens": 8,
                    "temperature": 0.0,
                    "return_token_ids": True,
                },
            ).json()
        finally:
            server.stop()
    choice = reply["choices"][0]
    ids = prompt + list(choice["token_ids"])
    routes = torch.as_tensor(_routed_experts(choice.get("routed_experts"), len(ids) - 1))
    ours = capture_routes(moe.to(device), torch.tensor([ids[:-1]], device=device))[0].cpu()
    flip = routing_flip_rate(routes.to(torch.int64)[None], ours[None])
    if flip != 0.0:
        raise Failed(f"flip rate {flip:.3g} between vLLM's routed experts and the trainer's")
    return f"{len(ids) - 1} positions x {routes.shape[1]} layers: flip rate 0"
