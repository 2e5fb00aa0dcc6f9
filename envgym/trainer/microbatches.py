"""Microbatches: which rows of a minibatch run through the model together (gradient
accumulation), each within a token budget, the segments of one episode always in one.

* :func:`balanced_microbatches` — the fewest microbatches of similar padded size (longest unit
  first, onto the lightest bin): for a policy that runs every row whole.
* :func:`prefix_microbatches` — rows sharing a prefix side by side, the prefix counted once: for
  a policy that runs a microbatch's common prefix once (``share_prefix``, the dense default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from envgym.models.session import common_prefix


def balanced_microbatches(
    lengths: Sequence[int],
    max_tokens: int,
    together: Sequence[int] | None = None,
    *,
    packed: bool = False,
) -> list[list[int]]:
    """Split rows into the fewest microbatches whose padded size (rows × longest row; with
    ``packed``, the sum of the rows: a packed forward runs no padding) is at most ``max_tokens``, balancing token sums across them (longest unit first, onto the bin
    with the fewest tokens).  A unit is a row, or with ``together`` (a key per row) the rows
    sharing a key: the segments of one episode, which the loss needs in one pass (its sequence
    statistics run over the whole trajectory).  A unit over ``max_tokens`` gets a microbatch of
    its own.  Returns row indices per microbatch, each ascending."""
    _check_rows(lengths, max_tokens, together)
    if not lengths:
        return []
    rows = _units(len(lengths), together)
    size = [sum(lengths[i] for i in u) for u in rows]
    order = sorted(range(len(rows)), key=lambda u: (-size[u], rows[u][0]))
    bins_n = max(1, math.ceil(sum(lengths) / max_tokens))
    while True:
        bins: list[list[int]] = [[] for _ in range(bins_n)]
        units_in = [0] * bins_n
        sums = [0] * bins_n
        for u in order:
            j = min(range(bins_n), key=lambda b: (sums[b], b))
            bins[j].extend(rows[u])
            units_in[j] += 1
            sums[j] += size[u]
        fits = all(
            units_in[j] == 1
            or (sums[j] if packed else len(b) * max(lengths[i] for i in b)) <= max_tokens
            for j, b in enumerate(bins)
            if b
        )
        if fits or bins_n >= len(rows):
            return [sorted(b) for b in bins if b]
        bins_n += 1


def prefix_microbatches(
    ids: Sequence[Sequence[int]],
    max_tokens: int,
    together: Sequence[int] | None = None,
    *,
    packed: bool = False,
) -> list[list[int]]:
    """Microbatches for a policy that runs its rows' common prefix once (``share_prefix``,
    envgym/trainer/policy.py): what a microbatch costs is then that prefix once plus the rows'
    own tails (padded to the longest, or summed when ``packed``), so rows sharing a system
    prompt — a GRPO group its whole prompt — belong together.  Units (a row, or with
    ``together`` the rows of one episode) are sorted by their first row's token ids, which puts
    shared prefixes side by side, and filled in that order while the cost stays within
    ``max_tokens``; a unit over it gets a microbatch of its own.  Without this grouping a token
    budget smaller than two whole rows never lets two rows share anything.  Returns row indices
    per microbatch, each ascending."""
    lengths = [len(row) for row in ids]
    _check_rows(lengths, max_tokens, together)
    order = sorted(_units(len(ids), together), key=lambda u: (list(ids[u[0]]), u[0]))
    bins: list[list[int]] = []
    current: list[int] = []
    for unit in order:
        trial = [*current, *unit]
        if current and _prefix_cost(ids, trial, packed) > max_tokens:
            bins.append(current)
            trial = list(unit)
        current = trial
    if current:
        bins.append(current)
    return [sorted(b) for b in bins]


def _prefix_cost(ids: Sequence[Sequence[int]], rows: Sequence[int], packed: bool) -> int:
    """Tokens through the model for ``rows`` under a shared prefix, counted as
    :func:`envgym.trainer.policy.shared_prefix_len` sets it (each row keeps ≥ 1 token of its
    own; a single row shares nothing)."""
    lengths = [len(ids[i]) for i in rows]
    p = 0
    if len(rows) > 1:
        first = ids[rows[0]]
        p = min(min(common_prefix(first, ids[i]) for i in rows[1:]), min(lengths) - 1)
    if packed:
        return p + sum(n - p for n in lengths)
    return p + len(rows) * (max(lengths) - p)


def _units(n: int, together: Sequence[int] | None) -> list[list[int]]:
    """Each unit's rows, in first-row order: a row alone, or the rows sharing a ``together`` key."""
    units: dict[object, list[int]] = {}
    for i in range(n):
        units.setdefault(together[i] if together is not None else i, []).append(i)
    return list(units.values())


def _check_rows(lengths: Sequence[int], max_tokens: int, together: Sequence[int] | None) -> None:
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be > 0, not {max_tokens}")
    if any(n <= 0 for n in lengths):
        raise ValueError(f"row lengths must be > 0: {list(lengths)}")
    if together is not None and len(together) != len(lengths):
        raise ValueError(f"together has {len(together)} keys for {len(lengths)} rows")
