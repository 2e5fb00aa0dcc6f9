"""The sampler's kept sets (Keep Sampling Mask, DeepSeek-V3.2 §3.1), stored compactly and exactly.

A kept set is the support top-k/top-p left for one sampled token.  The record keeps one *entry*
per token (envgym.record):

* ``None`` — the sampler did not truncate: the token was drawn from the whole vocabulary;
* :data:`UNKNOWN` (the string ``"unknown"``) — the backend did not report its kept set (vLLM's
  completions API, an old record): the trainer cannot apply the keep sampling mask there;
* a *code*: a string that decodes (:func:`decode_kept`) to the exact kept ids, ascending.

Code format (version 2 records): ``base64(flags + body)``.  The ids are sorted and stored as the
gaps between neighbours minus one, as LEB128 varints; when the set covers more than half of
``[0, max_id]`` its complement in that range is stored instead (``flags & 1``, body starts with
the varint ``max_id + 1``); the body is raw-deflated when that makes it shorter
(``flags & 2``).  A base64 string's length is a multiple of 4, so it never equals ``"unknown"``.

Why not JSON id lists: at top-p 0.99 a kept set holds thousands of ids (~10 KB of JSON per
token); sorted gaps are mostly one byte each and deflate squeezes them further
(docs/MODELS.md has the measured bytes per token).  Why not "the kept count in logit order":
the trainer's logits differ from the engine's in the last bits, so the order (and the set) it
would rebuild is not the one the engine sampled from — the mask must be the engine's own ids.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

if TYPE_CHECKING:
    import torch

UNKNOWN = "unknown"
KeptEntry = str | None  # None | UNKNOWN | a code
_COMPLEMENT, _DEFLATED = 1, 2
_MAX_VARINT_BYTES = 5  # ids < 2**35: far beyond any vocabulary


def _varints(values: np.ndarray) -> bytes:
    """LEB128 varints of non-negative ``values: [n]`` (vectorized)."""
    if values.size == 0 or int(values.max()) < 0x80:  # the common case: one byte each
        return values.astype(np.uint8).tobytes()
    v = values.astype(np.uint64)
    sizes = np.ones(v.shape, dtype=np.int64)
    for j in range(1, _MAX_VARINT_BYTES):
        sizes += v >= np.uint64(1 << (7 * j))
    starts = np.cumsum(sizes) - sizes
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    for j in range(_MAX_VARINT_BYTES):
        has = sizes > j
        if not has.any():
            break
        low = (v[has] >> np.uint64(7 * j)) & np.uint64(0x7F)
        more = (sizes[has] > j + 1).astype(np.uint64) << np.uint64(7)
        out[starts[has] + j] = (low | more).astype(np.uint8)
    return out.tobytes()


def _read_varints(data: bytes) -> np.ndarray:
    """Inverse of :func:`_varints`: ``[n]`` int64."""
    b = np.frombuffer(data, dtype=np.uint8)
    if b.size == 0:
        return np.zeros(0, dtype=np.int64)
    ends = (b & 0x80) == 0
    if not ends[-1]:
        raise ValueError("the last varint is cut off")
    group = np.concatenate(([0], np.cumsum(ends)[:-1]))  # which value each byte belongs to
    firsts = np.flatnonzero(np.concatenate(([True], ends[:-1])))
    shift = np.arange(b.size) - firsts[group]
    if int(shift.max()) >= _MAX_VARINT_BYTES:
        raise ValueError("a varint is longer than 5 bytes")
    parts = (b & 0x7F).astype(np.int64) << (7 * shift)
    # float64 sums are exact here: every value is < 2**35
    return np.bincount(group, weights=parts.astype(np.float64)).astype(np.int64)


def _gaps(ids: np.ndarray) -> np.ndarray:
    return np.diff(ids, prepend=-1) - 1  # ascending unique ids → gaps ≥ 0


def encode_kept(ids: Any) -> str:
    """The code of a kept set (any iterable of token ids, a list, an array or a tensor)."""
    if hasattr(ids, "numpy"):  # a torch tensor, without importing torch here
        ids = ids.detach().cpu().numpy()
    array = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids)
    if array.size == 0:
        raise ValueError("a kept set cannot be empty (the sampled token is always in it)")
    if array.dtype.kind not in "iu":
        raise TypeError(f"kept ids must be integers, not {array.dtype}")
    array = np.sort(array.astype(np.int64, copy=False))
    if array.size > 1 and not (np.diff(array) > 0).all():
        array = np.unique(array)
    if int(array[0]) < 0 or int(array[-1]) >= 1 << 35:
        raise ValueError(f"kept ids must be in [0, 2**35), got {int(array[0])}..{int(array[-1])}")
    flags, body = 0, _varints(_gaps(array))
    span = int(array[-1]) + 1
    if 2 * array.size > span:  # dense: the complement in [0, span) is shorter
        rest = np.setdiff1d(np.arange(span, dtype=np.int64), array, assume_unique=True)
        complement = _varints(np.array([span])) + _varints(_gaps(rest))
        if len(complement) < len(body):
            flags, body = _COMPLEMENT, complement
    packed = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = packed.compress(body) + packed.flush()
    if len(deflated) < len(body):
        flags, body = flags | _DEFLATED, deflated
    return base64.b64encode(bytes([flags]) + body).decode("ascii")


def decode_kept(entry: KeptEntry) -> list[int] | None | Literal["unknown"]:
    """A record entry back to the kept ids (ascending), ``None`` (not truncated) or
    :data:`UNKNOWN`."""
    if entry is None:
        return None
    if entry == UNKNOWN:
        return "unknown"
    return kept_array(entry).tolist()


def kept_array(code: str) -> np.ndarray:
    """The kept ids of a code, ascending, as ``[K]`` int64."""
    if not isinstance(code, str):
        raise TypeError(f"a kept-set code must be a string, not {type(code).__name__}")
    try:
        raw = base64.b64decode(code, validate=True)
        if not raw or raw[0] & ~(_COMPLEMENT | _DEFLATED):
            raise ValueError("unknown flags")
        flags, body = raw[0], raw[1:]
        if flags & _DEFLATED:
            body = zlib.decompress(body, -15)
        values = _read_varints(body)
        if flags & _COMPLEMENT:
            if values.size == 0:
                raise ValueError("no range")
            span, rest = int(values[0]), np.cumsum(values[1:] + 1) - 1
            ids = np.setdiff1d(np.arange(span, dtype=np.int64), rest, assume_unique=True)
        else:
            ids = np.cumsum(values + 1) - 1
    except (ValueError, binascii.Error, zlib.error) as err:
        raise ValueError(f"kept-set code {code[:40]!r} is corrupted: {err}") from None
    if ids.size == 0:
        raise ValueError(f"kept-set code {code[:40]!r} decodes to an empty set")
    return ids


def check_entry(entry: object) -> None:
    """Raise ValueError/TypeError unless ``entry`` is a valid record entry (decodes codes)."""
    if entry is None or entry == UNKNOWN:
        return
    kept_array(entry)  # type: ignore[arg-type]  # any object: kept_array's own errors check it


def kept_tensors(
    entries: Sequence[KeptEntry], *, unknown: Literal["raise", "full"] = "raise"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded tensors of kept sets for the keep-sampling-mask log-prob op
    (envgym/kernels/logprob.py).

    Returns ``kept_ids: [N, K]`` int64 (each row's ids ascending, padded with -1; ``K`` is the
    largest set, at least 1) and ``kept_rows: [N]`` bool (True where the row's kept set applies;
    False where the sampler did not truncate, so the full vocabulary applies).  Row ``i`` is
    ``entries[i]``: in a segment, the kept set of ``token_ids[i]``, i.e. of the distribution
    computed at position ``i - 1``.  An :data:`UNKNOWN` entry raises ValueError unless
    ``unknown="full"``, which treats it as the full vocabulary (an approximation: say so).
    """
    import torch

    if unknown not in ("raise", "full"):
        raise ValueError(f"unknown must be 'raise' or 'full', not {unknown!r}")
    sets: list[np.ndarray | None] = []
    for i, entry in enumerate(entries):
        if entry is None:
            sets.append(None)
        elif entry == UNKNOWN:
            if unknown == "raise":
                raise ValueError(
                    f"row {i}: the kept set is unknown (the backend did not report it, or "
                    f"vLLM's top {TOP_LOGPROBS} log-probs did not cover it), so the keep "
                    "sampling mask cannot be exact: sample with the local engine, or top_p 1 "
                    "and top_k 0 (or a smaller top_k), or pass unknown='full' (an approximation)"
                )
            sets.append(None)
        else:
            sets.append(kept_array(entry))
    width = max((s.size for s in sets if s is not None), default=1)
    kept_ids = torch.full((len(sets), width), -1, dtype=torch.int64)
    kept_rows = torch.zeros(len(sets), dtype=torch.bool)
    for i, s in enumerate(sets):
        if s is not None:
            kept_ids[i, : s.size] = torch.from_numpy(s)
            kept_rows[i] = True
    return kept_ids, kept_rows


class KeptSets(Sequence[Any]):
    """One turn's kept sets as :attr:`envgym.policy.Turn.kept`: stored as record entries (codes),
    read as ``list[int] | None`` per sampled token (decoded on access)."""

    def __init__(self, entries: Iterable[KeptEntry] = ()) -> None:
        self.entries: list[KeptEntry] = list(entries)

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, index: int) -> list[int] | None | str: ...
    @overload
    def __getitem__(self, index: slice) -> KeptSets: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return KeptSets(self.entries[index])
        return decode_kept(self.entries[index])

    def __iter__(self) -> Iterator[Any]:
        return (decode_kept(e) for e in self.entries)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeptSets):
            return self.entries == other.entries
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # unhashable: mutable, equal by value

    def __repr__(self) -> str:
        return f"KeptSets({len(self.entries)} entries)"


# -- kept sets from an engine's top log-probs (vLLM) ----------------------------------------------
# vLLM does not report kept sets, but with ``--logprobs-mode processed_logprobs`` its log-probs
# are taken *after* top-k/top-p: every token outside the kept set is -inf (the OpenAI server
# writes -inf as -9999.0).  So among the ``n`` best log-probs it returns for a position, the
# finite ones are exactly the kept set — provided at least one returned entry is -inf (then every
# kept token, all ranking above it, is in the list).  When all ``n`` are finite the kept set may
# be larger than ``n``: it cannot be known exactly and the entry is UNKNOWN (the trainer refuses
# it unless told ``unknown_kept: full``).
TOP_LOGPROBS = 64  # log-probs asked per sampled token; a top-k up to TOP_LOGPROBS - 1 is exact
MASKED_LOGPROB = -9999.0  # what vLLM's OpenAI server writes for -inf
_MASS_TOL = 1e-3  # |Σ exp(kept log-probs) − 1| allowed: processed log-probs sum to one


def kept_from_top_logprobs(
    top: dict[int, float], sampled: int, *, vocab_size: int | None = None
) -> KeptEntry:
    """The kept-set entry of one sampled token from its ``top`` log-probs (token id → processed
    log-prob: the ``n`` best, plus the sampled token), as a code, or :data:`UNKNOWN` when the list
    does not show the whole kept set.

    ``vocab_size``: when the list covers the whole vocabulary it is complete even without a -inf.
    Raises ValueError when the reply contradicts itself: the sampled token missing or masked, or
    the kept log-probs not summing to one (the server's log-probs are not ``processed_logprobs``:
    raw ones, or ``processed_logits``).
    """
    if sampled not in top:
        raise ValueError(f"the top log-probs do not include the sampled token {sampled}")
    if not top[sampled] > MASKED_LOGPROB:
        raise ValueError(f"the sampled token {sampled} has log-prob {top[sampled]}: masked")
    kept = [t for t, lp in top.items() if lp > MASKED_LOGPROB]
    complete = len(kept) < len(top) or (vocab_size is not None and len(top) >= vocab_size)
    if not complete:
        return UNKNOWN
    mass = float(np.exp(np.asarray([top[t] for t in kept], dtype=np.float64)).sum())
    if abs(mass - 1.0) > _MASS_TOL:
        raise ValueError(
            f"the kept log-probs sum to probability {mass:.6f}, not 1: the server must run with "
            "--logprobs-mode processed_logprobs"
        )
    return encode_kept(np.asarray(kept, dtype=np.int64))
