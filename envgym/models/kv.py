"""Per-sequence KV caches and the ragged attention that batches them.

Every episode (session) owns one :class:`KVStore`: per layer, a key and a value buffer of shape
``[1, kv_heads, capacity, head_dim]`` filled up to ``length``.  A batched decode step runs the
model once over ``B`` sessions whose lengths all differ; :class:`RaggedCache` writes each row's
new keys/values at that row's own offset, and :func:`ragged_attention` attends each row to its
own prefix.  So there is no padding, no copying of caches into and out of a batch, and a session
can join or leave the batch between any two steps (continuous batching); a session's cache stays
where it is between the turns of its episode (cross-turn KV reuse).

The attention function is registered with transformers under :data:`ATTN_IMPL`; for ordinary
tensors (``model.generate``, full-sequence scoring) it is plain SDPA with the usual masks, so a
model switched to it behaves exactly as with ``attn_implementation="sdpa"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTN_IMPL = "envgym_ragged"


def mask_placeholder(batch: int, device: torch.device | str | None = None) -> torch.Tensor:
    """An empty 4-D mask: with it transformers skips building its own mask (which assumes one
    shared length for the batch); ragged rows build theirs in :func:`ragged_attention`."""
    return torch.empty(batch, 1, 1, 0, device=device)


def kv_layout(model: torch.nn.Module) -> tuple[int, int, int, torch.dtype, torch.device]:
    """``(layers, kv_heads, head_dim, dtype, device)`` of a transformers causal LM: a KVStore's
    shape, and where its buffers live (the model's device: attention reads them there)."""
    config: Any = model.config  # a transformers PretrainedConfig (untyped attributes)
    heads = config.num_attention_heads
    first = next(model.parameters())
    return (
        config.num_hidden_layers,
        getattr(config, "num_key_value_heads", None) or heads,
        getattr(config, "head_dim", None) or config.hidden_size // heads,
        first.dtype,
        first.device,
    )


class KVStore:
    """One sequence's cache, all layers: buffers grown by ~25% so appends are amortized O(1).

    For MoE models it also holds, per cached position, the experts each MoE layer routed it to
    (``routes: [capacity, L, k]`` int16, written by :meth:`write_routes`): the routes share the
    keys' life cycle (crop, prefix copy, eviction), so a turn's routes are always those of the
    keys and values it attended to.  Keys and values live on ``device`` (the model's); the
    routes stay on the CPU, where the records that carry them are built.
    """

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ) -> None:
        self.layers, self.kv_heads, self.head_dim, self.dtype = layers, kv_heads, head_dim, dtype
        self.device = torch.device(device)
        self.keys: list[torch.Tensor] = []  # [1, kv_heads, capacity, head_dim] per layer
        self.values: list[torch.Tensor] = []
        self.routes: torch.Tensor | None = None  # [capacity, L, k] int16 (MoE only)
        self.length = 0  # positions holding valid keys/values

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def reserve(self, total: int) -> None:
        if total <= self.capacity:
            return
        capacity = max(512, total + total // 4)
        shape = (1, self.kv_heads, capacity, self.head_dim)
        like: dict[str, Any] = dict(dtype=self.dtype, device=self.device)
        keys = [torch.empty(shape, **like) for _ in range(self.layers)]
        values = [torch.empty(shape, **like) for _ in range(self.layers)]
        for old, new in zip(self.keys + self.values, keys + values):
            new[:, :, : self.length] = old[:, :, : self.length]
        self.keys, self.values = keys, values
        if self.routes is not None:
            routes = torch.empty((capacity, *self.routes.shape[1:]), dtype=torch.int16)
            routes[: self.length] = self.routes[: self.length]
            self.routes = routes

    def write_routes(self, start: int, routes: torch.Tensor) -> None:
        """Record ``routes: [new, L, k]`` for positions ``[start, start + new)`` (reserved)."""
        if self.routes is None or self.routes.shape[1:] != routes.shape[1:]:
            self.routes = torch.full((self.capacity, *routes.shape[1:]), -1, dtype=torch.int16)
        self.routes[start : start + routes.shape[0]] = routes

    def routes_upto(self, length: int) -> torch.Tensor | None:
        """A copy of the routes of positions ``[0, length)`` (``[length, L, k]``), or None."""
        return None if self.routes is None else self.routes[:length].clone()

    def crop(self, length: int) -> None:
        """Forget every position from ``length`` on (the buffers are kept)."""
        self.length = min(self.length, max(0, length))

    def copy_prefix(self, donor: KVStore, length: int) -> None:
        """Take the first ``length`` positions from another sequence with the same prefix."""
        length = min(length, donor.length)
        self.reserve(length)
        for mine, theirs in zip(self.keys + self.values, donor.keys + donor.values):
            mine[:, :, :length] = theirs[:, :, :length]
        if donor.routes is not None:
            self.write_routes(0, donor.routes[:length])
        self.length = length

    def clear(self) -> None:
        self.keys, self.values, self.routes, self.length = [], [], None, 0

    def nbytes(self) -> int:
        extra = [self.routes] if self.routes is not None else []
        return sum(t.numel() * t.element_size() for t in self.keys + self.values + extra)


@dataclass(frozen=True)
class RaggedKV:
    """What :meth:`RaggedCache.update` hands to attention: per row, its keys/values so far."""

    keys: list[torch.Tensor]  # [1, kv_heads, length_i, head_dim]
    values: list[torch.Tensor]
    new: int  # query tokens per row in this forward


class RaggedCache:
    """The ``past_key_values`` of one forward over rows of different lengths.

    Every row feeds the same number of new tokens (``new``: 1 when decoding; prefill runs one
    row at a time).  Call :meth:`commit` after the forward to advance the rows' lengths.
    """

    def __init__(self, rows: Sequence[KVStore], new: int) -> None:
        self.rows = list(rows)
        self.new = new
        for row in self.rows:
            row.reserve(row.length + new)

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *_: object,
        **__: object,
    ) -> tuple[RaggedKV, RaggedKV]:
        # key_states: [B, kv_heads, new, head_dim]
        keys, values = [], []
        for i, row in enumerate(self.rows):
            start, end = row.length, row.length + self.new
            row.keys[layer_idx][0, :, start:end] = key_states[i]
            row.values[layer_idx][0, :, start:end] = value_states[i]
            keys.append(row.keys[layer_idx][:, :, :end])
            values.append(row.values[layer_idx][:, :, :end])
        ragged = RaggedKV(keys, values, self.new)
        return (
            ragged,
            ragged,
        )  # attention reads ``.keys`` from the first, ``.values`` from the second

    def commit(self) -> None:
        for row in self.rows:
            row.length += self.new

    def get_seq_length(self, layer_idx: int = 0) -> int:  # asked by some model code paths
        return max((row.length for row in self.rows), default=0)


def ragged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, heads, new, head_dim]
    key: torch.Tensor | RaggedKV,
    value: torch.Tensor | RaggedKV,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    **kwargs: Any,  # transformers' attention keywords, passed through to its sdpa
) -> tuple[torch.Tensor, None]:
    if isinstance(key, torch.Tensor) and isinstance(value, torch.Tensor):
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            sliding_window=sliding_window,
            **kwargs,
        )
    if not isinstance(key, RaggedKV) or not isinstance(value, RaggedKV):
        raise TypeError("ragged_attention: key and value must both be tensors or both RaggedKV")
    new = key.new
    outputs = []
    for i, (k, v) in enumerate(zip(key.keys, value.values)):
        length = k.shape[2]
        mask: torch.Tensor | None = None
        causal = False
        windowed = sliding_window is not None and length > sliding_window
        if new > 1 and length == new and not windowed:
            causal = True  # a fresh sequence: SDPA's own causal kernel is the fastest path
        elif new > 1 or windowed:
            # Query j sits at absolute position length - new + j; it sees keys up to itself
            # (and, with a sliding window, no further back than the window).  An additive float
            # mask runs faster than a boolean one on CPU.
            dev = query.device
            q_pos = torch.arange(length - new, length, device=dev).unsqueeze(1)
            k_pos = torch.arange(length, device=dev).unsqueeze(0)
            allowed = k_pos <= q_pos
            if sliding_window is not None:
                allowed &= k_pos > q_pos - sliding_window
            mask = torch.zeros(allowed.shape, dtype=query.dtype, device=dev)
            mask = mask.masked_fill(~allowed, float("-inf"))
        out = F.scaled_dot_product_attention(
            query[i : i + 1],
            k,
            v,
            attn_mask=mask,
            is_causal=causal,
            scale=scaling,
            enable_gqa=query.shape[1] != k.shape[1],
        )
        outputs.append(out)
    return torch.cat(outputs).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTN_IMPL, ragged_attention)
AttentionMaskInterface.register(ATTN_IMPL, sdpa_mask)
