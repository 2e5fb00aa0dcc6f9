"""Which vocabulary columns each group of rows is scored over, in chunks (torch log-prob op).

Rows split into two kinds of groups, each cut into blocks of at most
``row_elements // chunk_size`` rows (so one ``[rows, chunk]`` logit tile stays bounded however
many tokens come in):

* full-vocabulary rows: columns ``0..V-1``, contiguous, so each chunk is a view of the head;
* kept-set rows (DeepSeek-V3.2 §3.1 Keep Sampling Mask): columns = the sorted union ``U`` of the
  block's kept ids; chunk ``c`` of ``U`` gets a ``[rows, chunk]`` bool mask built from the kept
  entries that fall in it (entries are sorted by column once, so each chunk reads a contiguous
  slice of them: O(entries) in all, not O(entries × chunks)).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

ROW_BLOCK_ELEMENTS = 1 << 22  # rows × chunk of one logit tile: 16 MiB in fp32


def rows_per_block(token_chunk: int | None, chunk_size: int) -> int:
    """Tokens per block: ``token_chunk``, or as many as keep a tile under ROW_BLOCK_ELEMENTS."""
    return token_chunk if token_chunk is not None else max(1, ROW_BLOCK_ELEMENTS // chunk_size)


@dataclass(frozen=True)
class Columns:
    """The columns one block of rows is scored over."""

    width: int  # number of columns (V, or |U|)
    ids: Tensor | None = None  # [U] ascending vocabulary ids; None = all of 0..V-1
    entry_row: Tensor | None = None  # [M] row (within the block) of each kept entry
    entry_col: Tensor | None = None  # [M] its position in ids; entries sorted by it
    bounds: tuple[int, ...] = ()  # chunk c's entries are [bounds[c], bounds[c + 1])

    def chunks(self, chunk_size: int) -> Iterator[tuple[int, int]]:
        for c0 in range(0, self.width, chunk_size):
            yield c0, min(c0 + chunk_size, self.width)

    def mask(self, chunk: int, rows: int, c0: int, c1: int) -> Tensor | None:
        """``[rows, c1 - c0]`` bool: True where the column is in the row's kept set; None = all."""
        if self.entry_row is None or self.entry_col is None:
            return None
        s, e = self.bounds[chunk], self.bounds[chunk + 1]
        m = torch.zeros(rows, c1 - c0, dtype=torch.bool, device=self.entry_row.device)
        m[self.entry_row[s:e], self.entry_col[s:e] - c0] = True
        return m


def kept_columns(kept_ids: Tensor, chunk_size: int) -> Columns:  # kept_ids [n, K], -1 padding
    """The union of a block's kept sets and its entries sorted by column position."""
    valid = kept_ids >= 0
    rows = (
        torch.arange(kept_ids.shape[0], device=kept_ids.device)
        .unsqueeze(1)
        .expand_as(kept_ids)[valid]
    )
    ids, col = torch.unique(kept_ids[valid], sorted=True, return_inverse=True)
    order = torch.argsort(col)
    entry_col = col[order]
    starts = torch.arange(0, ids.numel() + chunk_size, chunk_size, device=ids.device)
    bounds = torch.searchsorted(entry_col, starts).tolist()
    return Columns(
        width=ids.numel(), ids=ids, entry_row=rows[order], entry_col=entry_col, bounds=tuple(bounds)
    )


def plan_groups(
    kept_ids: Tensor | None,  # [N, K] deduplicated, or None
    kept_rows: Tensor,  # [N] bool
    vocab: int,
    chunk_size: int,
    per_block: int,
) -> Iterator[tuple[Tensor, Columns]]:
    """``(rows [n] int64, columns)`` per block of at most ``per_block`` rows; every row of
    ``[0, N)`` appears exactly once."""
    full = (~kept_rows).nonzero().squeeze(1)
    for r0 in range(0, full.numel(), per_block):
        yield full[r0 : r0 + per_block], Columns(width=vocab)
    if kept_ids is None:
        return
    kept = kept_rows.nonzero().squeeze(1)
    for r0 in range(0, kept.numel(), per_block):
        rows = kept[r0 : r0 + per_block]
        yield rows, kept_columns(kept_ids[rows], chunk_size)
