"""The policy contract: one async interface for every model backend.

Messages + tools in, one assistant turn + its per-token data out.  Backends: the local
torch/transformers engine (the embedded SmolLM2 default), OpenAI-compatible HTTP servers
(vLLM, llama.cpp, hosted APIs) and in-process vLLM.

Token-in/token-out: ``Turn.prompt_ids`` is the exact sequence the engine conditioned on.  A
backend keeps one *session* per episode and, when the new prompt extends the previous prompt
plus the previous completion (only tool/user turns were appended), it must reuse those exact
ids and append only the rendered new messages — never re-tokenize the history — so that
``prompt_ids[t+1]`` starts with ``prompt_ids[t] + token_ids[t]``.  That is what lets the rollout
engine build one training sequence per segment (envgym.record) and what lets the local engine
reuse its KV cache across turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_tokens: int = 512
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be ≥ 0, not {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], not {self.top_p}")
        if self.top_k < 0 or self.max_tokens <= 0:
            raise ValueError("top_k must be ≥ 0 and max_tokens > 0")


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens served from a KV/prefix cache (not recomputed)


@dataclass(frozen=True)
class Turn:
    """One sampled assistant turn."""

    text: str  # the raw generated text (what a text parser reads)
    message: dict[str, Any] | None = None  # set when the backend parsed it (native tool calls)
    prompt_ids: list[int] | None = None  # the full prompt the engine saw; None if unknown (HTTP)
    token_ids: list[int] = field(default_factory=list)  # sampled ids
    logprobs: list[float] = field(default_factory=list)  # engine log-prob per sampled id
    # keep-sampling-mask support per sampled id: a kept set, None (not truncated) or "unknown";
    # the local engines give a KeptSets (envgym.models.kept), decoded on access
    kept: Sequence[list[int] | str | None] | None = None
    routes: list[list[list[int]]] | None = None  # MoE routes per sampled id, per layer
    finish_reason: str = "stop"  # "stop" | "length" | "tool_calls"
    usage: Usage = Usage()


class PolicyError(RuntimeError):
    """The backend could not produce a turn after its retries (server down, bad replies...)."""


@runtime_checkable
class Policy(Protocol):
    """A model that acts in environments.  Async; safe to call concurrently for many sessions."""

    name: str  # stable identifier (used in content hashes of evaluations)
    version: int  # policy version: bumped by the trainer on every weight update

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        """Sample the next assistant turn for the episode ``session``."""
        ...

    async def end_session(self, session: str) -> None:
        """Forget an episode (free its KV cache)."""
        ...

    async def aclose(self) -> None:
        """Release the backend (servers, threads, GPU memory)."""
        ...
