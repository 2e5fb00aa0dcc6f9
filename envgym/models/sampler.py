"""Temperature / top-k / top-p sampling that reports what the trainer needs per token.

For each sampled token the sampler returns (DeepSeek-V3.2 §3.1, eq. 5–6 and Keep Sampling Mask):

* ``logprob`` — the log-probability under the distribution the token was **actually drawn
  from**: ``log_softmax(logits / T)`` restricted to the kept set and renormalized over it,
  i.e. ``full_logprob − log Σ_{j ∈ kept} softmax(logits / T)_j``.  That is π_old of the
  importance ratio when the trainer applies the keep sampling mask to π_θ (the trainer
  renormalizes its own distribution over the same ``kept`` ids).  Without truncation it equals
  ``full_logprob``.
* ``full_logprob`` — ``log_softmax(logits / T)[token]`` over the **whole vocabulary**, before
  top-k/top-p: π_old for a trainer that does not mask; and with ``logprob`` it gives the kept
  set's mass (``full_logprob − logprob``).
* ``kept`` — the token ids the truncation left as candidates (``[K]`` int64, most probable
  first); ``None`` when the sampler did not truncate (``top_k=0`` and ``top_p=1``).

Truncation order (as transformers does it): top-k first, then top-p on the renormalized top-k
distribution: sorted by probability, a token is kept when the probability mass of the tokens
ranked above it is below ``top_p`` (so the most probable token is always kept, and the kept set
is the smallest prefix whose mass reaches ``top_p``).  Ties are broken by token id (stable sort).

``temperature == 0`` is greedy: the argmax is taken, ``kept == [token]`` (a top-1 truncation),
``logprob == 0`` (the point mass it was drawn from) and ``full_logprob`` is under the untempered
distribution (``T = 1``: ``logits / 0`` has no log-softmax).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from envgym.policy import SamplingParams


@dataclass(frozen=True)
class SampledToken:
    token: int
    logprob: float  # under the sampled (tempered, truncated, renormalized) distribution
    full_logprob: float  # log_softmax(logits / T)[token] over the whole vocabulary
    kept: torch.Tensor | None  # [K] int64, most probable first; None = not truncated


def truncation(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor | None:
    """The kept token ids (most probable first) of temperature-scaled ``logits: [V]``, or None."""
    vocab = logits.shape[-1]
    top_k = params.top_k if 0 < params.top_k < vocab else 0
    if top_k == 0 and params.top_p >= 1.0:
        return None
    order = torch.sort(logits, descending=True, stable=True).indices
    if top_k:
        order = order[:top_k]
    if params.top_p < 1.0:
        probs = torch.softmax(logits[order], dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        order = order[mass_before < params.top_p]
    return order


def sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
) -> SampledToken:
    """One token from ``logits: [V]`` (float32)."""
    logits = logits.float()
    if params.temperature == 0:
        token = int(torch.argmax(logits))
        full = float(torch.log_softmax(logits, dim=-1)[token])
        return SampledToken(token, 0.0, full, torch.tensor([token]))
    scaled = logits / params.temperature
    logprobs = torch.log_softmax(scaled, dim=-1)  # [V]
    kept = truncation(scaled, params)
    if kept is None:
        token = int(torch.multinomial(logprobs.exp(), 1, generator=generator))
        full = float(logprobs[token])
        return SampledToken(token, full, full, None)
    renormalized = torch.log_softmax(scaled[kept], dim=-1)  # [K]: the distribution drawn from
    j = int(torch.multinomial(renormalized.exp(), 1, generator=generator))
    token = int(kept[j])
    return SampledToken(token, float(renormalized[j]), float(logprobs[token]), kept)
