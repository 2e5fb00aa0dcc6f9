"""Cold-start supervised fine-tuning (DeepSeek-V3.2 §3.2.2): teach the policy to act before RL.

A plain, small loop over :class:`~envgym.trainer.sft_data.SFTExample` s:

* **loss** (:func:`sft_loss`): token-mean negative log-likelihood over the policy tokens of a
  batch, ``−Σ mask·log π_θ(y_t | y_<t) / Σ mask`` — system, user and tool tokens carry mask 0,
  so the model is trained only on what it will itself write;
* **batches** (:func:`plan_batches`): examples that share a prefix (same env: one system prompt
  and tools section, ~380 of ~550 tokens in the code-interpreter runs) are batched together and
  bucketed by length under a token budget; the shared prefix is run **once** per batch and its
  KV cache is broadcast to the rows (:func:`batch_logprobs`) — exact (the rows' log-probs equal
  separate forwards, checked at start and in the tests), ~2–3× fewer tokens through the model
  on CPU.  Packing was rejected: without a block-diagonal mask (flash-attention varlen, not
  available on CPU) packed examples attend to each other;
* **scoring only the trained positions**: hidden states of the positions that predict policy
  tokens go through the LM head, never ``[B, T, V]`` logits;
* AdamW, linear warmup then cosine decay to ``min_lr_ratio·lr`` (:func:`lr_at`), global
  gradient-norm clipping; a step with a non-finite loss or gradient is skipped and counted.

:func:`save_policy` writes a Hugging Face folder (weights, config, tokenizer with its chat
template, ``sft_run.json``) that ``envgym.models.load_policy(folder)`` and ``envgym eval
--model folder`` load.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from envgym.trainer.sft_data import SFTExample

MIN_SHARED = 32  # tokens two examples must share for their prefix to be computed once


@dataclass(frozen=True)
class SFTConfig:
    epochs: int = 3
    lr: float = 1e-4
    warmup_ratio: float = 0.1  # fraction of all steps spent warming up linearly
    min_lr_ratio: float = 0.1  # the cosine decays to min_lr_ratio * lr
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    batch_tokens: int = 4096  # tokens through the model per step (a shared prefix counts once)
    share_prefix: bool = True
    max_examples: int | None = None  # a seeded random subset of the data
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "epochs": self.epochs >= 1,
            "lr": math.isfinite(self.lr) and self.lr > 0,
            "warmup_ratio": 0.0 <= self.warmup_ratio < 1.0,
            "min_lr_ratio": 0.0 <= self.min_lr_ratio <= 1.0,
            "weight_decay": self.weight_decay >= 0,
            "betas": len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
            "grad_clip": self.grad_clip > 0,
            "batch_tokens": self.batch_tokens >= 16,
            "max_examples": self.max_examples is None or self.max_examples >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"SFTConfig.{name} = {getattr(self, name)!r} is out of range")


def sft_loss(logp: Tensor, mask: Tensor) -> Tensor:
    """Token-mean NLL over policy tokens: ``logp, mask: [B, T]`` → scalar.

    ``logp[b, t]`` is log π_θ of the token at ``t + 1`` of row ``b``; ``mask`` is 1 where that
    token was written by the policy.  Positions with mask 0 contribute nothing, whatever their
    ``logp`` holds.
    """
    if logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp {tuple(logp.shape)} and mask {tuple(mask.shape)} must both be [B, T]"
        )
    keep = mask.bool()
    count = keep.sum()
    if int(count) <= 0:
        raise ValueError("the batch has no policy token: nothing to train on")
    # where, not a product: 0 · (−inf) would be NaN at a masked position.
    return -torch.where(keep, logp, torch.zeros_like(logp)).sum() / count


def lr_at(step: int, total: int, cfg: SFTConfig) -> float:
    """Learning rate of step ``step`` (0-based) of ``total``: linear warmup, then cosine."""
    warmup = math.ceil(cfg.warmup_ratio * total)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    floor = cfg.min_lr_ratio * cfg.lr
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


# -- batches ------------------------------------------------------------------------------------


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _first_target(example: SFTExample) -> int:
    """Index of the first policy token (≥ 1: token 0 is never predicted)."""
    return next(i for i in range(1, len(example.loss_mask)) if example.loss_mask[i])


def shared_prefix(rows: Sequence[SFTExample]) -> int:
    """Tokens every row shares and none scores: the position predicting a row's first policy
    token must stay in the per-row part (its hidden state is needed there)."""
    if len(rows) < 2:
        return 0
    first = rows[0].token_ids
    common = min(_lcp(first, r.token_ids) for r in rows[1:])
    cap = min(_first_target(r) - 1 for r in rows)
    shared = min(common, cap)
    return shared if shared >= MIN_SHARED else 0


def batch_cost(rows: Sequence[SFTExample], share: bool) -> int:
    """Tokens through the model for this batch: the shared prefix once, the rest per row."""
    p = shared_prefix(rows) if share else 0
    return p + len(rows) * (max(len(r.token_ids) for r in rows) - p)


def plan_batches(
    examples: Sequence[SFTExample], budget: int, rng: random.Random, *, share: bool = True
) -> list[list[int]]:
    """One epoch's batches (indices into ``examples``), each within ``budget`` tokens.

    Examples are grouped by shared prefix (sorted token sequences, split where neighbours share
    fewer than MIN_SHARED tokens), bucketed by length inside a group (shuffled, then stably
    sorted, so equal lengths mix across epochs) and packed greedily; the batch order is
    shuffled.  An example longer than the budget gets a batch of its own.
    """
    order = sorted(range(len(examples)), key=lambda i: examples[i].token_ids)
    groups: list[list[int]] = []
    for i in order:
        if groups and _lcp(examples[groups[-1][-1]].token_ids, examples[i].token_ids) >= MIN_SHARED:
            groups[-1].append(i)
        else:
            groups.append([i])
    batches: list[list[int]] = []
    for group in groups:
        rng.shuffle(group)
        group.sort(key=lambda i: len(examples[i].token_ids))
        current: list[int] = []
        for i in group:
            trial = [examples[j] for j in [*current, i]]
            if current and batch_cost(trial, share) > budget:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
    rng.shuffle(batches)
    return batches


def batch_logprobs(
    model: Any, rows: Sequence[SFTExample], *, share_prefix: bool = True
) -> tuple[Tensor, Tensor]:
    """``(logp, mask)``, both ``[B, L - 1]`` (L = the longest row): ``logp[b, t]`` = log π_θ of
    token ``t + 1`` of row ``b`` where ``mask[b, t]`` (its loss mask) is 1, else 0.

    The shared prefix (:func:`shared_prefix`) runs once with batch size 1; its KV cache is
    repeated to the B rows, which then run only their own tokens (right-padded) on top of it.
    """
    p = shared_prefix(rows) if share_prefix else 0
    longest = max(len(r.token_ids) for r in rows)
    b, suffix = len(rows), longest - p
    ids = torch.zeros(b, suffix, dtype=torch.long)
    attention = torch.zeros(b, p + suffix, dtype=torch.long)
    attention[:, :p] = 1
    mask = torch.zeros(b, longest - 1, dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row.token_ids)
        ids[i, : n - p] = torch.tensor(row.token_ids[p:])
        attention[i, : p + n - p] = 1
        mask[i, : n - 1] = torch.tensor(row.loss_mask[1:])
    base = model.base_model
    if p:
        prefix = torch.tensor([rows[0].token_ids[:p]])
        cache = base(input_ids=prefix, use_cache=True).past_key_values
        cache.batch_repeat_interleave(b)  # differentiable: gradients flow back to the prefix
        positions = torch.arange(p, p + suffix).unsqueeze(0).expand(b, -1)
        hidden = base(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state  # [B, suffix, H]
    else:
        hidden = base(input_ids=ids, attention_mask=attention).last_hidden_state
    rows_idx, cols = mask.nonzero(as_tuple=True)  # scored positions t (predicting t + 1)
    pairs = zip(rows_idx.tolist(), cols.tolist())
    targets = torch.tensor([rows[r].token_ids[c + 1] for r, c in pairs])
    picked = hidden[rows_idx, cols - p]  # [N, H]
    logits = model.get_output_embeddings()(picked)  # [N, V]: trained positions only
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    values = torch.log_softmax(logits, dim=-1).gather(1, targets.unsqueeze(1)).squeeze(1)
    logp = torch.zeros(b, longest - 1, dtype=values.dtype).index_put((rows_idx, cols), values)
    return logp, mask


def verify_logprobs(model: Any, rows: Sequence[SFTExample], *, rtol: float = 1e-3) -> float:
    """Check :func:`batch_logprobs` against a plain full forward of each row; the largest
    difference.  An architecture whose LM head is not ``get_output_embeddings()`` of the last
    hidden state (logit scaling, soft-capping) fails here with a clear error."""
    with torch.no_grad():
        got, mask = batch_logprobs(model, rows)
        worst = 0.0
        for i, row in enumerate(rows):
            full = model(input_ids=torch.tensor([row.token_ids])).logits[0, :-1]
            nxt = torch.tensor(row.token_ids[1:]).unsqueeze(1)
            ref = torch.log_softmax(full, -1).gather(1, nxt)
            n = len(row.token_ids) - 1
            sel = mask[i, :n].bool()
            worst = max(worst, float((got[i, :n][sel] - ref[:, 0][sel]).abs().max()))
    if not worst <= rtol * max(1.0, float(ref.abs().max())):
        raise ValueError(
            f"{type(model).__name__}: the SFT forward differs from the model's own logits by "
            f"{worst:.3g}; this architecture is not supported by envgym.trainer.sft"
        )
    return worst


# -- the loop -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SFTStepStats:
    step: int
    epoch: int
    loss: float
    lr: float
    grad_norm: float
    rows: int
    tokens: int  # through the model (shared prefix once)
    policy_tokens: int
    seconds: float
    skipped: bool = False


@dataclass
class SFTResult:
    steps: list[SFTStepStats] = field(default_factory=list)
    examples: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    forward_check: float = 0.0  # verify_logprobs' largest difference

    @property
    def skipped(self) -> int:
        return sum(s.skipped for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "examples": self.examples,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "forward_check": self.forward_check,
            "skipped_steps": self.skipped,
            "steps": [asdict(s) for s in self.steps],
        }


def select_examples(examples: Sequence[SFTExample], cfg: SFTConfig) -> list[SFTExample]:
    """All examples, or a seeded random ``max_examples`` of them (data order kept)."""
    if cfg.max_examples is None or cfg.max_examples >= len(examples):
        return list(examples)
    keep = sorted(random.Random(cfg.seed).sample(range(len(examples)), cfg.max_examples))
    return [examples[i] for i in keep]


def train_sft(
    model: Any,
    examples: Sequence[SFTExample],
    cfg: SFTConfig,
    *,
    on_step: Callable[[SFTStepStats, int], None] | None = None,
) -> SFTResult:
    """Fine-tune ``model`` in place on ``examples``; ``on_step(stats, total_steps)`` per step."""
    data = select_examples(examples, cfg)
    if not data:
        raise ValueError("no SFT examples to train on")
    started, cpu0 = time.perf_counter(), time.process_time()
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    plans = [
        plan_batches(data, cfg.batch_tokens, rng, share=cfg.share_prefix) for _ in range(cfg.epochs)
    ]
    total = sum(len(p) for p in plans)
    result = SFTResult(examples=len(data))
    result.forward_check = verify_logprobs(model, data[:2])
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    model.train()
    step = 0
    try:
        for epoch, plan in enumerate(plans):
            for indices in plan:
                rows = [data[i] for i in indices]
                t0 = time.perf_counter()
                lr = lr_at(step, total, cfg)
                for group in opt.param_groups:
                    group["lr"] = lr
                logp, mask = batch_logprobs(model, rows, share_prefix=cfg.share_prefix)
                loss = sft_loss(logp, mask)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
                skipped = not (math.isfinite(float(loss.detach())) and math.isfinite(norm))
                if not skipped:
                    opt.step()
                stats = SFTStepStats(
                    step,
                    epoch,
                    float(loss.detach()),
                    lr,
                    norm,
                    len(rows),
                    batch_cost(rows, cfg.share_prefix),
                    int(mask.sum()),
                    time.perf_counter() - t0,
                    skipped,
                )
                result.steps.append(stats)
                if on_step is not None:
                    on_step(stats, total)
                step += 1
    finally:
        model.eval()
        opt.zero_grad(set_to_none=True)
    result.seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu0
    return result


# -- models in and out --------------------------------------------------------------------------


def load_trainable(spec: str) -> tuple[Any, Any]:
    """``(model, tokenizer)`` in float32: ``"smollm2"`` (the embedded model) or an HF folder/id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envgym import embedded

    folder = str(embedded.hf_dir()) if spec == embedded.NAME else str(spec)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot load the model {spec!r}: {err}") from err
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"the tokenizer of {spec!r} has no chat template")
    return model, tokenizer


def save_policy(model: Any, tokenizer: Any, out: Path, meta: dict[str, Any]) -> Path:
    """An HF folder ``load_policy(out)`` loads: weights, config, tokenizer + chat template and
    ``sft_run.json`` (``meta``: config, split, data and training record)."""
    out = Path(out)
    if out.exists() and any(p.name != "sft_run.json" for p in out.iterdir()):
        if not (out / "sft_run.json").is_file():
            raise FileExistsError(
                f"{out} is not empty and not an earlier SFT output; choose a new --out"
            )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    (out / "sft_run.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    return out
