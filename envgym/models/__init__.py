"""Model backends behind :class:`envgym.policy.Policy` (docs/MODELS.md).

* :class:`LocalPolicy` (``envgym.models.local``): torch + transformers, the embedded SmolLM2 by
  default; token-in/token-out, cross-turn KV reuse, batched decoding, log-probs, kept sets, MoE
  routes.
* :class:`OpenAIPolicy` (``envgym.models.openai_http``): any OpenAI-compatible chat endpoint.
* :class:`VLLMPolicy` / :class:`VLLMServer` (``envgym.models.vllm_policy`` / ``vllm_server``): vLLM with
  token-id prompts, and a managed server from ``.venv-vllm``.

:func:`load_policy` turns the ``--model`` strings of the CLI into a policy.
"""

from __future__ import annotations

from typing import Any

from envgym.policy import Policy

__all__ = ["load_policy"]


def load_policy(spec: str, **kwargs: Any) -> Policy:
    """The policy a ``--model`` string names (envgym.models.resolve: ``smollm2``, a local HF
    folder, ``http(s)://…/v1[#model]``, ``vllm+http(s)://…/v1[#model]``); ``model=`` names the
    served model of a server form; other ``kwargs`` go to the backend."""
    from dataclasses import replace

    from envgym.models.resolve import open_policy, resolve_model

    ref = resolve_model(spec)
    served = kwargs.pop("model", None)
    if served and ref.is_server:
        ref = replace(ref, served=str(served))
    return open_policy(ref, **kwargs)
