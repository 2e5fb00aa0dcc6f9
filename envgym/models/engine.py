"""The local engine's worker: one thread that prefills and runs batched decode steps.

``act`` calls from any number of episodes put requests on a queue; the worker thread admits
them between decode steps (continuous batching, up to ``max_batch`` rows), prefills only the
tokens its KV caches do not already hold, and advances every admitted row by one token per
batched forward (see envgym.models.kv for how rows of different lengths share a forward).  All
torch work happens on this thread, so the event loop never blocks; results go back with
``loop.call_soon_threadsafe``.

Prefix reuse, in order: the session's own cache (the previous turn's prompt and sampled
tokens: cross-turn KV reuse), cropped to the longest common prefix when the new prompt does not
extend it; then, when another session's cache shares a longer prefix (the same system prompt
and task for the G samples of a GRPO group), that prefix is copied instead of recomputed.
``Usage.cached_prompt_tokens`` counts the prompt tokens served either way.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from envgym.context.window import ContextWindowExceeded
from envgym.models.chat import ChatFormat, end_tokens
from envgym.models.kept import KeptEntry, KeptSets, encode_kept
from envgym.models.kv import KVStore, RaggedCache, kv_layout, mask_placeholder
from envgym.models.routes import moe_top_k, top_experts
from envgym.models.sampler import sample
from envgym.models.session import TokenSession, common_prefix, next_prompt
from envgym.models.turn import SAMPLED_AND_FULL, RecordedTurn
from envgym.policy import PolicyError, SamplingParams, Turn, Usage

log = logging.getLogger(__name__)
PREFILL_CHUNK = 4096  # bounds the [chunk, length] attention scores of long prefills


@dataclass
class Request:
    session: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    params: SamplingParams
    future: asyncio.Future[Turn]
    loop: asyncio.AbstractEventLoop
    policy_version: int = 0  # the policy's version when the turn was asked for


@dataclass
class _Session:
    tokens: TokenSession
    store: KVStore
    generator: torch.Generator | None = None
    busy: bool = False
    last_used: float = 0.0


@dataclass
class _Row:
    """One assistant turn being sampled."""

    request: Request
    session: _Session
    prompt: list[int]
    cached: int
    logits: torch.Tensor  # [V]: the distribution of the next token
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # under the sampled distribution
    full_logprobs: list[float] = field(default_factory=list)  # over the whole vocabulary
    kept: list[KeptEntry] = field(default_factory=list)  # compact entries (envgym.models.kept)
    finish: str | None = None


class Engine:
    def __init__(
        self,
        model: Any,
        fmt: ChatFormat,
        *,
        max_batch: int,
        max_kv_bytes: int,
        stop_at_tool_call: bool,
    ) -> None:
        self.model = model
        self.fmt = fmt
        self.max_batch = max_batch
        self.max_kv_bytes = max_kv_bytes
        config = model.config
        self._layout = kv_layout(model)
        self.device = self._layout[-1]  # inputs go where the model is; sampling stays on the CPU
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 1 << 30)
        self.moe_top_k = moe_top_k(config)
        self.end_tokens = end_tokens(fmt.tokenizer, getattr(model, "generation_config", None))
        self.stop_texts = (fmt.call_close,) if stop_at_tool_call and fmt.call_close else ()
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._sessions: dict[str, _Session] = {}
        self._waiting: deque[Request] = deque()
        self._rows: list[_Row] = []
        self._thread = threading.Thread(target=self._run, name="envgym-local-engine", daemon=True)
        self._thread.start()

    # -- called from any thread ------------------------------------------------------------
    def submit(self, request: Request) -> None:
        self._queue.put(("act", request))

    def call(
        self, fn: Callable[[], Any], future: asyncio.Future[Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        """Run ``fn`` on the worker thread (between decode steps) and resolve ``future``."""
        self._queue.put(("call", (fn, future, loop)))

    def stop(self) -> None:
        self._queue.put(("stop", None))
        self._thread.join(timeout=60)

    # -- the worker thread -----------------------------------------------------------------
    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                try:
                    if not self._drain():
                        return
                    self._admit()
                    if self._rows:
                        self._step()
                except Exception as err:  # noqa: BLE001 - one bad batch must not kill the engine
                    log.exception("local engine step failed")
                    for row in self._rows:
                        self._fail(
                            row.request, f"the local engine failed: {type(err).__name__}: {err}"
                        )
                        self._release(row, finished=False)
                    self._rows = []

    def _drain(self) -> bool:
        block = not self._rows and not self._waiting
        while True:
            try:
                kind, payload = self._queue.get(block=block)
            except queue.Empty:
                return True
            block = False
            if kind == "stop":
                for request in [*self._waiting, *(r.request for r in self._rows)]:
                    self._fail(request, "the local engine was closed")
                self._waiting.clear()
                self._rows = []
                self._sessions.clear()
                return False
            if kind == "act":
                self._waiting.append(payload)
            else:
                fn, future, loop = payload
                try:
                    _resolve(loop, future, fn(), None)
                except Exception as err:  # noqa: BLE001 - handed to the caller
                    _resolve(loop, future, None, err)

    def _admit(self) -> None:
        live = []
        for row in self._rows:  # the callers of these gave up (cancelled, budget): free them first
            if row.request.future.done():
                self._release(row, finished=False)
            else:
                live.append(row)
        self._rows = live
        while self._waiting and len(self._rows) < self.max_batch:
            request = self._waiting.popleft()
            if request.future.done():  # cancelled while queued
                continue
            try:
                admitted = self._prefill(request)
            except PolicyError as err:  # kept as raised: ContextWindowExceeded is an outcome
                self._fail(request, err)
                continue
            except Exception as err:  # noqa: BLE001 - a failed prefill fails its request only
                log.exception("local engine prefill failed")
                self._fail(request, f"the local engine failed: {type(err).__name__}: {err}")
                continue
            if admitted is not None:
                self._rows.append(admitted)

    def _prefill(self, request: Request) -> _Row | None:
        session = self._sessions.get(request.session)
        if session is None:
            session = _Session(TokenSession(), KVStore(*self._layout))
            self._sessions[request.session] = session
        if session.busy:
            raise PolicyError(f"session {request.session!r} already has a turn in flight")
        params = request.params
        if session.generator is None:
            session.generator = torch.Generator()
            if params.seed is not None:
                session.generator.manual_seed(params.seed)
            else:
                session.generator.seed()
        try:
            prompt = next_prompt(
                self.fmt, session.tokens, request.messages, request.tools, self.end_tokens
            ).ids
        except (ValueError, TypeError) as err:
            raise PolicyError(f"cannot render the conversation: {err}") from err
        except Exception as err:  # noqa: BLE001 - chat templates raise anything (jinja errors)
            raise PolicyError(f"the chat template failed: {type(err).__name__}: {err}") from err
        if len(prompt) >= self.max_positions:
            # an episode outcome (truncated, reward 0, counted), not a backend failure
            raise ContextWindowExceeded(
                f"the prompt has {len(prompt)} tokens; the model's context window is {self.max_positions}",
                prompt_tokens=len(prompt),
                window=self.max_positions,
            )
        store = session.store
        reuse = min(common_prefix(prompt, session.tokens.ids), store.length, len(prompt) - 1)
        store.crop(reuse)
        donor, shared = self._donor(prompt, session)
        if donor is not None and shared > reuse:
            store.copy_prefix(donor.store, shared)
            reuse = store.length
        session.busy = True
        session.last_used = time.monotonic()
        # From here on the store holds ``prompt``'s prefix: keep ``ids`` saying so, since other
        # sessions' prefills look for donors through it while this row decodes.
        session.tokens.ids = list(prompt)
        session.tokens.forget_messages()
        try:
            logits = self._forward_prefill(store, prompt[reuse:])
        except BaseException:
            session.busy = False
            store.crop(reuse)
            raise
        return _Row(request, session, prompt, reuse, logits)

    def _donor(self, prompt: list[int], me: _Session) -> tuple[_Session | None, int]:
        best, best_len = None, 0
        for other in self._sessions.values():
            if other is me or other.store.length <= best_len:
                continue
            n = min(common_prefix(prompt, other.tokens.ids), other.store.length, len(prompt) - 1)
            if n > best_len:
                best, best_len = other, n
        return best, best_len

    def _forward_prefill(self, store: KVStore, ids: list[int]) -> torch.Tensor:
        logits = None
        for start in range(0, len(ids), PREFILL_CHUNK):
            chunk = ids[start : start + PREFILL_CHUNK]
            logits = self._forward(
                [store],
                torch.tensor([chunk], device=self.device),
                torch.arange(store.length, store.length + len(chunk), device=self.device)[None],
            )
        assert logits is not None
        return logits[0]

    def _forward(
        self, stores: list[KVStore], input_ids: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """``input_ids, positions: [B, q]`` (on the model's device) → next-token logits ``[B, V]``
        on the CPU, where the sampler and its per-session generators are (the same draws on any
        device; the tokens go to Python anyway).  For MoE models each row's store also records
        the experts every MoE layer chose at each of the ``q`` new positions (prompt tokens
        included: Keep Routing replays the whole sequence)."""
        cache = RaggedCache(stores, input_ids.shape[1])
        inputs = dict(
            input_ids=input_ids,
            position_ids=positions,
            past_key_values=cache,
            attention_mask=mask_placeholder(len(stores), self.device),
            use_cache=True,
        )
        if not self.moe_top_k:
            logits = self.model(**inputs, logits_to_keep=1).logits[:, -1, :].float().cpu()
            cache.commit()
            return logits
        # The MoE causal-LM head would compute its load-balancing loss from the attention mask;
        # the base model returns the router logits without it, and the LM head is one matmul.
        out = self.model.base_model(**inputs, output_router_logits=True)
        routes = top_experts(out.router_logits, len(stores), input_ids.shape[1], self.moe_top_k)
        routes = routes.cpu()
        for store, row_routes in zip(stores, routes):  # before commit: length = first new position
            store.write_routes(store.length, row_routes)
        cache.commit()
        return self.model.get_output_embeddings()(out.last_hidden_state[:, -1, :]).float().cpu()

    def _step(self) -> None:
        live: list[_Row] = []
        for row in self._rows:
            generator = row.session.generator  # set by _prefill before the row was admitted
            drawn = sample(row.logits, row.request.params, generator)  # type: ignore[arg-type]
            row.tokens.append(drawn.token)
            row.logprobs.append(drawn.logprob)
            row.full_logprobs.append(drawn.full_logprob)
            row.kept.append(None if drawn.kept is None else encode_kept(drawn.kept))
            row.finish = self._finish_reason(row)
            if row.finish is not None:
                self._complete(row)
            else:
                live.append(row)
        self._rows = live
        if not live:
            return
        stores = [row.session.store for row in live]
        input_ids = torch.tensor([[row.tokens[-1]] for row in live], device=self.device)
        positions = torch.tensor([[row.session.store.length] for row in live], device=self.device)
        logits = self._forward(stores, input_ids, positions)
        for i, row in enumerate(live):
            row.logits = logits[i]

    def _finish_reason(self, row: _Row) -> str | None:
        if row.tokens[-1] in self.end_tokens:
            return "stop"
        if self.stop_texts or row.request.params.stop:
            tail = self.fmt.tokenizer.decode(row.tokens[-64:])
            if any(s in tail for s in self.stop_texts):
                return "tool_calls"
            if any(s and s in tail for s in row.request.params.stop):
                return "stop"
        if len(row.tokens) >= row.request.params.max_tokens:
            return "length"
        if len(row.prompt) + len(row.tokens) >= self.max_positions:
            return "length"
        return None

    def _complete(self, row: _Row) -> None:
        ids = row.tokens[:-1] if row.tokens[-1] in self.end_tokens else row.tokens
        text = self.fmt.generation_prefix + self.fmt.tokenizer.decode(ids)
        reasoning = bool(self.fmt.parser.parse(text).reasoning_content)
        row.session.tokens.record_turn(
            row.prompt, row.tokens, row.request.messages, row.request.tools, reasoning
        )
        # Every position but the last sampled token (never fed) went through a forward pass.
        routes = row.session.store.routes_upto(len(row.prompt) + len(row.tokens) - 1)
        first = len(row.prompt) - 1  # the position whose output sampled the first token
        turn = RecordedTurn(
            text=text,
            prompt_ids=list(row.prompt),
            token_ids=list(row.tokens),
            logprobs=list(row.logprobs),
            kept=KeptSets(row.kept),
            routes=routes[first : first + len(row.tokens)].tolist() if routes is not None else None,
            finish_reason=row.finish or "stop",
            usage=Usage(len(row.prompt), len(row.tokens), row.cached),
            full_logprobs=list(row.full_logprobs),
            logprob_kind=SAMPLED_AND_FULL,
            params=row.request.params,
            policy_version=row.request.policy_version,
            position_routes=routes,
        )
        self._release(row, finished=True)
        _resolve(row.request.loop, row.request.future, turn, None)
        self._evict()

    def _release(self, row: _Row, *, finished: bool) -> None:
        session = row.session
        session.busy = False
        session.last_used = time.monotonic()
        if not finished:
            session.tokens.ids = [*row.prompt, *row.tokens]
            session.tokens.forget_messages()

    def _evict(self) -> None:
        """Free the least recently used idle caches while they hold more than ``max_kv_bytes``;
        an evicted session keeps its ids and simply prefills again on its next turn."""
        total = sum(s.store.nbytes() for s in self._sessions.values())
        for session in sorted(self._sessions.values(), key=lambda s: s.last_used):
            if total <= self.max_kv_bytes:
                return
            if not session.busy and session.store.length:
                total -= session.store.nbytes()
                session.store.clear()

    def end_session(self, session: str) -> None:
        """Forget a session now, even with a turn in flight (its caller was cancelled or gave
        up): that row is freed and its request failed here rather than at the next admission,
        so a later episode reusing the id starts with a fresh generator and cache."""
        state = self._sessions.pop(session, None)
        ended = f"session {session!r} was ended while its turn was in flight"
        for row in self._rows:
            if row.session is state:
                self._fail(row.request, ended)
        self._rows = [row for row in self._rows if row.session is not state]
        for request in [r for r in self._waiting if r.session == session]:
            self._waiting.remove(request)
            self._fail(request, ended)
        if state is not None:
            state.store.clear()

    def _fail(self, request: Request, error: str | PolicyError) -> None:
        err = error if isinstance(error, PolicyError) else PolicyError(error)
        _resolve(request.loop, request.future, None, err)

    def stats(self) -> dict[str, int]:
        return {
            "sessions": len(self._sessions),
            "kv_bytes": sum(s.store.nbytes() for s in self._sessions.values()),
            "rows": len(self._rows),
        }


def _resolve(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    value: Any,
    error: BaseException | None,
) -> None:
    def settle() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the caller's loop is gone; nobody is waiting
        pass
