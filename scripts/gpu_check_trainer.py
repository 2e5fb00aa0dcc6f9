"""The GPU check's trainer part (scripts/gpu_check.py runs it): GRPO updates
(``envgym.trainer.update.Update``) of randomly initialised models on the device — SmolLM2-135M's
shape dense, and a SmolMoE-shaped Mixtral with its experts on ``envgym.kernels.moe`` and keep
routing — and the random models, samples and configs the engine checks reuse."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import torch
from gpu_check_common import Failed, Sizes, sync_device
from torch import Tensor

LR = 3e-5  # configs/grpo_smollm2_math12.yaml


def random_llama(sizes: Sizes, device: torch.device, *, layers: int | None = None) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    kw = dict(sizes.llama)
    if layers is not None:
        kw["num_hidden_layers"] = layers
    with torch.device(device):  # initialised in place: 135M parameters in well under a second
        return LlamaForCausalLM(LlamaConfig(**kw)).float()


def _samples(sizes: Sizes, vocab: int) -> list[Any]:
    """One GRPO group: a shared prompt, random responses, mixed rewards; half the trained
    positions carry a kept set of 20 ids (a top-k sampler's record), the rest none."""
    from envgym.models.kept import encode_kept
    from envgym.trainer.batch import Sample

    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (sizes.prompt,), generator=g).tolist()
    rewards = [float(i % 2) for i in range(sizes.samples)]
    mean = sum(rewards) / len(rewards)
    out = []
    for i, reward in enumerate(rewards):
        response = torch.randint(3, vocab, (sizes.seq - sizes.prompt,), generator=g).tolist()
        ids = prompt + response
        mask = [0] * sizes.prompt + [1] * len(response)
        kept: list[Any] = [None] * len(ids)
        for t in range(sizes.prompt, len(ids), 2):
            others = torch.randint(3, vocab, (19,), generator=g).tolist()
            kept[t] = encode_kept(sorted({ids[t], *others}))
        out.append(
            Sample(
                token_ids=ids,
                loss_mask=mask,
                engine_logp=[-3.0 if m else 0.0 for m in mask],
                kept=kept,
                routes=None,
                advantage=reward - mean,
                reward=reward,
                group=0,
                task_id=f"t{i}",
                policy_version=0,
            )
        )
    return out


def trainer_config(sizes: Sizes, **extra: Any) -> Any:
    from envgym.trainer.config import config_from_dict

    data = {
        "envs": [{"id": "gpu-check"}],
        "rollout": {"group_size": sizes.samples, "prompts": 1, "temperature": 0.8},
        "optimizer": {"lr": LR},
        "minibatches": 2,
        "micro_tokens": sizes.samples * sizes.seq // 4,
        **extra,
    }
    return config_from_dict(data)


def _changed(before: dict[str, Tensor], model: Any) -> tuple[int, int, float]:
    after = model.state_dict()
    diffs = {k: float((after[k].double() - before[k].double()).abs().max()) for k in before}
    return sum(d > 0 for d in diffs.values()), len(diffs), max(diffs.values())


def _snapshot(model: Any) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _grpo(
    model: Any, sizes: Sizes, *, samples: list[Any] | None = None, **extra: Any
) -> tuple[dict[str, float], tuple[int, int, float], float, Any]:
    """The trainer's own update path: ``Update`` collates each microbatch onto the model's
    device (nothing here moves a tensor for it)."""
    from envgym.trainer.policy import TrainablePolicy
    from envgym.trainer.update import Update

    config = trainer_config(sizes, **extra)
    policy = TrainablePolicy(model, chunk_size=config.chunk_size)
    update = Update(config, policy, None)
    samples = samples if samples is not None else _samples(sizes, model.config.vocab_size)
    before = _snapshot(model)
    start = time.perf_counter()
    metrics, skipped = update.run(samples, step=0)
    sync_device(next(model.parameters()).device)
    seconds = time.perf_counter() - start
    if skipped is not None:
        raise Failed(f"the update was skipped: {skipped}")
    return metrics, _changed(before, model), seconds, update


def _grpo_detail(
    metrics: dict[str, float], changed: tuple[int, int, float], seconds: float, sizes: Sizes
) -> str:
    n_changed, n_all, biggest = changed
    loss = metrics.get("loss", math.nan)
    if not math.isfinite(loss) or metrics.get("optimizer_steps") != 2.0:
        raise Failed(f"loss {loss}, optimizer steps {metrics.get('optimizer_steps')} (want 2)")
    if n_changed == 0:
        raise Failed("no weight changed")
    return (
        f"{sizes.samples} samples x {sizes.seq} tokens, 2 minibatches: loss {loss:.4g}, "
        f"grad_norm {metrics['grad_norm']:.3g}, entropy {metrics['entropy']:.3f}, "
        f"{n_changed}/{n_all} tensors changed (max |dw| {biggest:.2e}), {seconds:.2f} s"
    )


def check_grpo_dense(sizes: Sizes, device: torch.device, keep: dict[str, Any]) -> str:
    model = random_llama(sizes, device)
    if device.type == "cuda":  # the peak below: model, AdamW and the update, not the checks before
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    metrics, changed, seconds, _ = _grpo(model, sizes)
    keep["dense"] = model  # the weight-sync check serves this trained model
    return _grpo_detail(metrics, changed, seconds, sizes) + (
        f", peak {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"
        if device.type == "cuda"
        else ""
    )


def check_grpo_moe(sizes: Sizes, device: torch.device) -> str:
    """SmolMoE's recipe (upcycle, 4 experts, top-2) on SmolLM2's widths with fewer layers, the
    experts on ``envgym.kernels.moe`` (Triton on CUDA); routes recorded from the same weights on the
    very microbatches the update forms, so the update's flip rate must be exactly 0."""
    from envgym.trainer.moe_experts import use_kernel_experts
    from envgym.trainer.routing import capture_routes, routing_flip_rate
    from envgym.trainer.smolmoe import upcycle_model

    dense = random_llama(sizes, torch.device("cpu"), layers=sizes.moe_layers)
    model = upcycle_model(dense, n_experts=4, top_k=2, noise=0.1, seed=0)
    why = use_kernel_experts(model)
    if why is not None:
        raise Failed(f"the experts did not switch to envgym.kernels.moe: {why}")
    model = model.to(device)
    samples = _samples(sizes, model.config.vocab_size)
    from envgym.trainer.update import Update

    probe = Update(trainer_config(sizes), _policy(model), None)
    recorded = []
    for idx in probe._micro(samples, list(range(len(samples)))):
        batch = probe._collate([samples[i] for i in idx])
        routes = capture_routes(model, batch.input_ids, attention_mask=batch.attention_mask)
        for row, i in enumerate(idx):
            n = samples[i].length
            full = torch.full((n, *routes.shape[2:]), -1, dtype=torch.int64)
            full[: n - 1] = routes[row, : n - 1].cpu()  # the last token was never fed
            samples[i].routes = full
        recorded.append((idx, routes, batch))
    metrics, changed, seconds, update = _grpo(model, sizes, samples=samples)
    flip = metrics.get("routing_flip_rate")
    if flip != 0.0:
        raise Failed(f"routing_flip_rate {flip} with the recording weights (want exactly 0)")
    after = []  # how far one update moved the routers: what keep routing guards against
    with torch.no_grad():
        for _idx, routes, batch in recorded:
            now = capture_routes(model, batch.input_ids, attention_mask=batch.attention_mask)
            after.append(routing_flip_rate(routes, now, batch.mask > 0))
    routers = [k for k in update.policy.model.state_dict() if "gate.weight" in k]
    detail = _grpo_detail(metrics, changed, seconds, sizes)
    return (
        f"Mixtral {sizes.moe_layers} layers x 4 experts top-2 (upcycled, noise 0.1), "
        f"{len(routers)} routers, experts on envgym.kernels.moe: {detail}; routing_flip_rate "
        f"{flip} under replay, {statistics.fmean(after):.2e} after the update (info)"
    )


def _policy(model: Any) -> Any:
    from envgym.trainer.policy import TrainablePolicy

    return TrainablePolicy(model)
