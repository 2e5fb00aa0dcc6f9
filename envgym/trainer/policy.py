"""The trainable policy: per-token log-probs (and entropy) of recorded sequences under π_θ.

Any Hugging Face causal LM.  The log-probs come from the final hidden states and the LM head
through ``envgym.kernels.logprob.selected_logprobs``, which never materializes the ``[N, V]`` logits
(the vocabulary is processed in chunks); only the trained positions are scored at all.

* **Temperature.** The engine recorded ``log_softmax(logits / T)``; π_θ is computed at the
  same ``T`` so the importance ratio compares like with like.
* **Keep Sampling Mask** (DeepSeek-V3.2 §3.1): where the sampler truncated (top-p/top-k) and
  the record holds the exact kept ids, π_θ is renormalized over that kept set, so π_θ and π_old
  share one action subspace (``kept_rows`` False = the full vocabulary applies).
* **Keep Routing** (DeepSeek-V3.2 §3.1): when the batch carries the MoE routes the engine used,
  the forward runs inside ``envgym.trainer.routing.replay_routes`` so the same experts are trained.
  :meth:`TrainablePolicy.routing_flip_rate` measures how often the current router would choose
  differently (a metric of how much replay matters).
* **Packing** (``packing: true``; envgym/trainer/packing.py): a batch marked ``packed`` runs its
  rows' real tokens as one row, position ids restarting per record and no attention across records,
  so no position of the forward is padding (:meth:`TrainablePolicy.packed_hidden_states`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from envgym.kernels.logprob import selected_logprobs
from envgym.trainer.batch import TrainBatch
from envgym.trainer.packing import pack, prefix_block_mask

if TYPE_CHECKING:  # transformers is imported where a model is loaded, not at import time
    from transformers import PreTrainedModel


class TrainablePolicy:
    """Wraps a causal LM for training.

    Args:
        model: an HF ``*ForCausalLM`` (its ``base_model`` returns the final, normed hidden
            states; ``get_output_embeddings()`` is the LM head).
        chunk_size: vocabulary chunk of the log-prob op.
        keep_sampling_mask: renormalize over the recorded kept sets.
        keep_routing: replay recorded MoE routes.
        share_prefix: run the rows' common first tokens once (:meth:`hidden_states`).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        chunk_size: int = 1024,
        keep_sampling_mask: bool = True,
        keep_routing: bool = True,
        share_prefix: bool = True,
    ) -> None:
        _check_head(model)
        self.share_prefix = share_prefix
        self.model = model
        self.chunk_size = chunk_size
        self.keep_sampling_mask = keep_sampling_mask
        self.keep_routing = keep_routing

    @property
    def head_weight(self) -> Tensor:
        return self.model.get_output_embeddings().weight

    def runs_prefix_once(self, *, routed: bool, packed: bool) -> bool:
        """Whether a microbatch's common prefix runs once here: ``share_prefix``, not a routed
        (MoE) batch, and when packed, an attention the explicit prefix mask describes.  The
        update then groups rows by prefix (envgym/trainer/microbatches.py)."""
        if not self.share_prefix or routed:
            return False
        return not packed or _explicit_mask_ok(self.model)

    def hidden_states(self, batch: TrainBatch) -> Tensor:
        """``[B, T, H]`` final hidden states of ``batch.input_ids`` (routes replayed if any).

        Rows of one env share their first tokens (system prompt + tools; a GRPO group its whole
        prompt): with ``share_prefix`` that prefix runs once, its KV cache is repeated to the
        rows, and only the rest runs per row — exact (causal attention: a prefix position never
        sees what follows), gradients flow back through the one prefix pass, and on CPU it cuts
        the tokens through the model ~3× (tests/test_train_policy.py compares both paths).
        Routed (MoE) batches run whole: the recorded routes cover every position in one pass.
        """
        routed = batch.routes is not None
        p = shared_prefix_len(batch) if self.runs_prefix_once(routed=routed, packed=False) else 0
        base = self.model.base_model
        b, t = batch.input_ids.shape
        cache = None
        if p > 0:
            head = base(input_ids=batch.input_ids[:1, :p], use_cache=True)
            cache = head.past_key_values  # None with gradient checkpointing in training mode
        if cache is None:
            with self._routing(batch.routes):
                out = base(
                    input_ids=batch.input_ids,
                    attention_mask=batch.attention_mask,
                    use_cache=False,
                )
            return out.last_hidden_state
        cache.batch_repeat_interleave(b)  # differentiable: gradients reach the prefix pass
        positions = torch.arange(p, t, device=batch.input_ids.device).unsqueeze(0).expand(b, -1)
        tail = base(
            input_ids=batch.input_ids[:, p:],
            attention_mask=batch.attention_mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        prefix = head.last_hidden_state.expand(b, -1, -1)  # [B, p, H]
        return torch.cat([prefix, tail.last_hidden_state], dim=1)

    def packed_hidden_states(self, batch: TrainBatch) -> tuple[Tensor, Tensor]:
        """``(hidden [P, H], index [B, T])``: the batch run padding-free
        (envgym/trainer/packing.py); ``hidden[index[b, t]]`` is what :meth:`hidden_states` gives at
        ``[b, t]`` (``index`` is -1 at padding).

        Without a shared prefix the rows' real tokens form one row with position ids restarting
        per record and no mask: transformers then builds the block-diagonal causal mask itself
        (or runs flash attention varlen).  With one (``share_prefix``; sdpa or eager attention
        over full-attention layers, where an explicit mask says the same) the prefix runs once
        and the packed tails attend to its KV cache and causally within their own record.
        """
        p = 0
        if self.runs_prefix_once(routed=batch.routes is not None, packed=True):
            p = shared_prefix_len(batch)
        row = pack(batch.input_ids, batch.attention_mask, batch.routes, prefix=p)
        base = self.model.base_model
        if p == 0:
            with self._routing(row.routes):
                out = base(
                    input_ids=row.input_ids,
                    position_ids=row.position_ids,
                    attention_mask=None,
                    use_cache=False,
                )
            return out.last_hidden_state[0], row.index
        head = base(input_ids=batch.input_ids[:1, :p], use_cache=True)
        eager = self.model.config._attn_implementation == "eager"
        dtype = head.last_hidden_state.dtype
        tail = base(
            input_ids=row.input_ids,
            attention_mask=prefix_block_mask(row, additive=dtype if eager else None),
            position_ids=row.position_ids,
            past_key_values=head.past_key_values,
            use_cache=True,
        )
        hidden = torch.cat([head.last_hidden_state[0], tail.last_hidden_state[0]], dim=0)
        return hidden, row.index

    def logprobs(
        self, batch: TrainBatch, *, temperature: float, with_entropy: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """``logp: [B, T]`` of ``batch.targets`` under π_θ at ``temperature`` (0 where
        ``mask`` is 0) and, when asked, the entropy ``[B, T]`` of the same distribution."""
        sel = batch.mask > 0
        if batch.packed:
            hidden_all, index = self.packed_hidden_states(batch)
            trained = hidden_all[index[sel]]
        else:
            trained = self.hidden_states(batch)[sel]
        kept_ids = kept_rows = None
        if self.keep_sampling_mask and bool(batch.kept_rows.any()):
            kept_ids, kept_rows = batch.kept_ids, batch.kept_rows
        lp, ent = selected_logprobs(
            trained,
            self.head_weight,
            batch.targets[sel],
            temperature=temperature,
            kept_ids=kept_ids,
            kept_rows=kept_rows,
            chunk_size=self.chunk_size,
            with_entropy=with_entropy,
        )
        logp = torch.zeros(batch.mask.shape, dtype=lp.dtype, device=lp.device)
        logp = logp.masked_scatter(sel, lp)
        entropy = None
        if ent is not None:
            entropy = torch.zeros(batch.mask.shape, dtype=ent.dtype, device=ent.device)
            entropy = entropy.masked_scatter(sel, ent)
        return logp, entropy

    def routing_flip_rate(self, batch: TrainBatch) -> float | None:
        """Fraction of recorded expert choices the current router would not make, over the
        trained positions (envgym.trainer.routing.routing_flip_rate); None for a dense batch."""
        if batch.routes is None:
            return None
        from envgym.trainer.routing import capture_routes, routing_flip_rate

        now = capture_routes(self.model, batch.input_ids, attention_mask=batch.attention_mask)
        return routing_flip_rate(batch.routes, now, batch.mask > 0)

    @contextlib.contextmanager
    def _routing(self, routes: Tensor | None) -> Iterator[None]:
        if routes is None or not self.keep_routing:
            yield
            return
        from envgym.trainer.routing import replay_routes

        # Padding positions carry -1: replay_routes leaves them to the live router; their
        # outputs are masked out of every loss and right padding is never attended to.
        with replay_routes(self.model, routes):
            yield


def shared_prefix_len(batch: TrainBatch) -> int:
    """How many first tokens every row of ``batch`` has in common (real tokens only), less
    one so each row keeps ≥ 1 token of its own; 0 for a single row (nothing to share)."""
    ids, attn = batch.input_ids, batch.attention_mask
    if ids.shape[0] < 2:
        return 0
    same = (ids == ids[:1]).all(dim=0) & (attn > 0).all(dim=0)  # [T]
    n = int(same.long().cumprod(0).sum())
    shortest = int(attn.sum(dim=1).min())
    return max(0, min(n, shortest - 1))


def _explicit_mask_ok(model: Any) -> bool:
    """Whether :func:`envgym.trainer.packing.prefix_block_mask` is the model's whole attention mask:
    sdpa or eager attention (they take a dense 4-D mask as given) and no sliding-window layer
    (the mask has no window).  Otherwise packing runs without the shared prefix."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    kinds = getattr(config, "layer_types", None) or []
    return all(k == "full_attention" for k in kinds)


def _check_head(model: Any) -> None:
    """Refuse heads the hidden-state × weight path would compute wrongly (silent bias)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not hasattr(head, "weight"):
        raise TypeError(f"{type(model).__name__} has no LM head (get_output_embeddings())")
    if getattr(head, "bias", None) is not None:
        raise ValueError(f"{type(model).__name__}'s LM head has a bias: not supported")
    config = getattr(model, "config", None)
    for name in ("final_logit_softcapping", "logit_scale", "output_multiplier_scale"):
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0):
            raise ValueError(
                f"{type(model).__name__} transforms its logits ({name}={value}): not supported "
                "by the hidden-state log-prob path"
            )
