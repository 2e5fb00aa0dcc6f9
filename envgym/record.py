"""The per-token record: the contract between rollouts and the trainer (DESIGN.md), version 2.

An episode is recorded as one or more :class:`Segment` s.  A segment is one token sequence in
which every turn's prompt *extends* the previous one (so it is trained on as a single sequence,
token-in/token-out: the ids the trainer sees are exactly the ids the engine saw and sampled —
no re-tokenization).  A new segment starts only when the rendered context stops being an
extension of what came before: the context policy dropped something (thinking retention drops
earlier reasoning when a new user message arrives, DeepSeek-V3.2 §3.2.1) or an overflow
strategy compacted the history (§4.4).

Per token ``i`` of a segment (all arrays have the segment's length ``T``):

- ``token_ids[i]``: the exact sequence (prompt, sampled completions, rendered tool/user turns);
- ``loss_mask[i]``: 1 where the policy sampled the token, 0 for prompt/tool/user tokens;
- ``sampled_logprobs[i]``: log-prob of the sampled token under the distribution it was actually
  drawn from — after temperature, top-k and top-p, renormalized over the kept set (π_old of the
  GRPO ratio under the Keep Sampling Mask, DeepSeek-V3.2 §3.1, eq. 5–6); ``logprobs`` is the
  same list (the trainer contract's name);
- ``full_logprobs[i]``: ``log_softmax(logits / T)[token]`` over the whole vocabulary, before
  truncation; ``full − sampled`` is the log of the kept set's mass;
  both are 0.0 where ``loss_mask`` is 0 and NaN where the backend did not report that kind
  (vLLM reports only the sampled kind; JSON stores NaN as ``null``);
- ``kept[i]``: the sampler's kept set (§3.1 Keep Sampling Mask) as a compact *entry*
  (envgym.models.kept): ``None`` = not truncated (or a context token), ``"unknown"`` = the
  backend did not report it, else a code that decodes to the exact ids;
  :meth:`Segment.kept_tensors` gives the padded tensors the log-prob kernel takes;
- ``routes[i]`` (MoE models only, else ``routes is None``): per MoE layer, the top-k experts the
  router chose when token ``i`` was the *input* of a forward pass (Keep Routing, §3.1) — for
  every position, prompt and tool tokens included, so the trainer can replay the whole forward;
  ``[]`` where no forward ever fed the token (the last sampled token of a segment: its output
  predicts nothing that is trained on).  :meth:`Segment.routes_tensor` gives ``[T, L, k]``.

Per assistant turn: ``turns[j]`` is its ``[start, end)`` span, ``turn_info[j]`` its sampling
parameters, policy version, finish reason and log-prob kind (:class:`TurnInfo`).

Storage: :meth:`EpisodeRecord.to_dict` writes ``version: 2`` with kept codes as they are and
routes as one compressed array per segment; :meth:`EpisodeRecord.from_dict` reads version 2 and
converts version 1 records (no ``version`` key) without guessing (see :func:`_segment_v1`).
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from envgym.models.kept import (
    UNKNOWN,
    KeptEntry,
    KeptSets,
    check_entry,
    encode_kept,
    kept_tensors,
)
from envgym.models.turn import LOGPROB_KINDS, SAMPLED

if TYPE_CHECKING:
    import torch

RECORD_VERSION = 2
NAN = math.nan


@dataclass(frozen=True)
class TurnInfo:
    """What one assistant turn was sampled with; ``None`` = the backend did not say."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # 0 = off
    policy_version: int | None = None  # the weights' version when the turn was sampled
    finish_reason: str | None = None  # "stop" | "length" (mask overlong turns) | "tool_calls"
    logprob_kind: str = SAMPLED  # "sampled+full" | "sampled" | "full": which arrays hold

    def __post_init__(self) -> None:
        if self.logprob_kind not in LOGPROB_KINDS:
            raise ValueError(
                f"logprob_kind must be one of {LOGPROB_KINDS}, not {self.logprob_kind!r}"
            )


def _kept_entry(value: Any) -> KeptEntry:
    if isinstance(value, str):
        check_entry(value)  # "unknown" or a code that decodes; else a clear ValueError
        return value
    return None if value is None else encode_kept(value)


@dataclass(eq=False)
class Segment:
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    sampled_logprobs: list[float] = field(default_factory=list)
    full_logprobs: list[float] = field(default_factory=list)
    kept: list[KeptEntry] = field(default_factory=list)
    routes: list[list[list[int]]] | None = None  # [T][L][k]; [] where never fed; None: dense
    turns: list[tuple[int, int]] = field(default_factory=list)
    turn_info: list[TurnInfo] = field(default_factory=list)

    @property
    def logprobs(self) -> list[float]:
        """``sampled_logprobs`` (the trainer contract calls it ``logprobs``)."""
        return self.sampled_logprobs

    def add_context(self, ids: Sequence[int]) -> None:
        """Append tokens the policy did not sample (prompt, tool results, user turns)."""
        n = len(ids)
        self.token_ids.extend(ids)
        self.loss_mask.extend([0] * n)
        self.sampled_logprobs.extend([0.0] * n)
        self.full_logprobs.extend([0.0] * n)
        self.kept.extend([None] * n)
        if self.routes is not None:
            self.routes.extend([] for _ in range(n))

    def add_sampled(
        self,
        ids: Sequence[int],
        logprobs: Sequence[float],
        *,
        full_logprobs: Sequence[float] | None = None,
        kept: Sequence[Any] | None = None,
        info: TurnInfo | None = None,
    ) -> None:
        """Append one assistant turn's sampled tokens.

        ``logprobs``: under the sampled distribution; ``full_logprobs``: over the full
        vocabulary, None = unknown; ``kept``: per token a kept set (ids, or an entry), None
        for the whole turn = unknown (not "not truncated": pass ``[None] * n`` for that).
        """
        n = len(ids)
        if len(logprobs) != n:
            raise ValueError(f"{n} sampled ids but {len(logprobs)} log-probs")
        if full_logprobs is not None and len(full_logprobs) != n:
            raise ValueError(f"{n} sampled ids but {len(full_logprobs)} full-vocabulary log-probs")
        if kept is not None and len(kept) != n:
            raise ValueError(f"{n} sampled ids but {len(kept)} kept sets")
        if n == 0:
            raise ValueError("a sampled turn needs at least one token")
        if isinstance(kept, KeptSets):
            entries = list(kept.entries)
        elif kept is None:
            entries = [UNKNOWN] * n
        else:
            entries = [_kept_entry(k) for k in kept]
        start = len(self.token_ids)
        self.token_ids.extend(ids)
        self.loss_mask.extend([1] * n)
        self.sampled_logprobs.extend(float(x) for x in logprobs)
        self.full_logprobs.extend([NAN] * n if full_logprobs is None else map(float, full_logprobs))
        self.kept.extend(entries)
        if self.routes is not None:
            self.routes.extend([] for _ in range(n))
        self.turns.append((start, len(self.token_ids)))
        self.turn_info.append(info or TurnInfo())

    def fill_routes(self, routes: Any) -> None:
        """Set the routes of positions ``[0, P)`` that have none yet from ``routes: [P, L, k]``
        (a tensor, array or nested lists).  Positions already routed keep their routes: they
        are the ones the tokens sampled after them were computed with."""
        if self.routes is None:
            self.routes = [[] for _ in self.token_ids]
        p = len(routes)
        if p > len(self.token_ids):
            raise ValueError(f"routes for {p} positions but the segment has {len(self.token_ids)}")
        start = next((i for i, r in enumerate(self.routes[:p]) if not r), p)
        if start == p:
            return
        values = routes[start:p]
        values = values.tolist() if hasattr(values, "tolist") else [list(v) for v in values]
        for offset, value in enumerate(values):
            if not self.routes[start + offset]:
                self.routes[start + offset] = value

    def check(self) -> None:
        """Raise ValueError when the parallel arrays disagree (a corrupted record)."""
        n = len(self.token_ids)
        arrays = (self.loss_mask, self.sampled_logprobs, self.full_logprobs, self.kept)
        lengths = {len(a) for a in arrays}
        if self.routes is not None:
            lengths.add(len(self.routes))
        if lengths != {n}:
            raise ValueError(f"segment arrays have lengths {sorted(lengths)}, expected {n}")
        if len(self.turn_info) != len(self.turns):
            raise ValueError(f"{len(self.turns)} turn spans but {len(self.turn_info)} turn infos")
        for start, end in self.turns:
            if not 0 <= start < end <= n or not all(self.loss_mask[start:end]):
                raise ValueError(f"turn span [{start}, {end}) is not a sampled span")
        for i, entry in enumerate(self.kept):
            if entry is not None and not (isinstance(entry, str) and entry):
                raise ValueError(f"kept[{i}] is {entry!r}: not None, 'unknown' or a code")

    # -- what the trainer reads ----------------------------------------------------------------
    def kept_tensors(
        self, *, unknown: Literal["raise", "full"] = "raise"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``kept_ids: [T, K]`` int64 (-1-padded) and ``kept_rows: [T]`` bool, row ``i`` for
        ``token_ids[i]`` (envgym.models.kept.kept_tensors; select the sampled rows with
        ``loss_mask``)."""
        return kept_tensors(self.kept, unknown=unknown)

    def routes_tensor(self) -> torch.Tensor:
        """``[T, L, k]`` int64 expert ids, -1 at positions no forward pass fed."""
        import torch

        return torch.from_numpy(_routes_array(self)).long()

    # -- storage ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "token_ids": list(self.token_ids),
            "loss_mask": list(self.loss_mask),
            "sampled_logprobs": [None if math.isnan(x) else x for x in self.sampled_logprobs],
            "full_logprobs": [None if math.isnan(x) else x for x in self.full_logprobs],
            "kept": list(self.kept),
            "routes": None if self.routes is None else _pack_routes(_routes_array(self)),
            "turns": [list(t) for t in self.turns],
            "turn_info": [asdict(t) for t in self.turn_info],
        }

    def __eq__(self, other: object) -> bool:  # NaN (unknown) equals NaN here
        if not isinstance(other, Segment):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list) and a and isinstance(a[0], float):
        return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))
    return bool(a == b)


def _routes_array(seg: Segment) -> np.ndarray:
    """``[T, L, k]`` int16 (−1 where missing) from the per-position lists."""
    assert seg.routes is not None
    shape = next((np.shape(r) for r in seg.routes if r), None)
    if shape is None:
        raise ValueError("the segment has routes but no position was routed")
    out = np.full((len(seg.routes), *shape), -1, dtype=np.int16)
    for i, route in enumerate(seg.routes):
        if route:
            if np.shape(route) != shape:
                raise ValueError(f"routes[{i}] has shape {np.shape(route)}, expected {shape}")
            out[i] = route
    return out


def _pack_routes(array: np.ndarray) -> dict[str, Any]:
    data = zlib.compress(array.astype("<i2").tobytes(), 6)
    return {"shape": list(array.shape), "int16_zlib_b64": base64.b64encode(data).decode("ascii")}


def _unpack_routes(packed: dict[str, Any]) -> list[list[list[int]]]:
    shape = tuple(int(x) for x in packed["shape"])
    raw = zlib.decompress(base64.b64decode(packed["int16_zlib_b64"], validate=True))
    array = np.frombuffer(raw, dtype="<i2").reshape(shape)
    return [[] if int(row.max()) < 0 else row.tolist() for row in array]


@dataclass
class EpisodeRecord:
    """Everything the trainer needs from one episode."""

    segments: list[Segment] = field(default_factory=list)
    policy_version: int = 0  # the policy's version when the episode started
    model: str = ""
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    version: int = RECORD_VERSION  # of the record format

    @property
    def sampled_tokens(self) -> int:
        return sum(sum(s.loss_mask) for s in self.segments)

    @property
    def total_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "segments": [s.to_dict() for s in self.segments],
            "policy_version": self.policy_version,
            "model": self.model,
            "reward": self.reward,
            "reward_components": dict(self.reward_components),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        """Read a stored record: version 2, or version 1 (no ``version`` key), converted."""
        version = data.get("version", 1)
        if version == 1:
            read = _segment_v1
        elif version == RECORD_VERSION:
            read = _segment_v2
        else:
            raise ValueError(
                f"record version {version!r} is not supported: this envgym reads versions 1 "
                f"and {RECORD_VERSION}"
            )
        segments = []
        for s in data.get("segments", []):
            seg = read(s)
            seg.check()
            segments.append(seg)
        return cls(
            segments=segments,
            policy_version=int(data.get("policy_version", 0)),
            model=str(data.get("model", "")),
            reward=float(data.get("reward", 0.0)),
            reward_components=dict(data.get("reward_components", {})),
        )


def _floats(values: list[Any]) -> list[float]:
    return [NAN if x is None else float(x) for x in values]


def _segment_v2(s: dict[str, Any]) -> Segment:
    routes = s.get("routes")
    return Segment(
        token_ids=list(s["token_ids"]),
        loss_mask=list(s["loss_mask"]),
        sampled_logprobs=_floats(s["sampled_logprobs"]),
        full_logprobs=_floats(s["full_logprobs"]),
        kept=list(s["kept"]),
        routes=None if routes is None else _unpack_routes(routes),
        turns=[(int(a), int(b)) for a, b in s["turns"]],
        turn_info=[TurnInfo(**t) for t in s["turn_info"]],
    )


def _segment_v1(s: dict[str, Any]) -> Segment:
    """Version 1 stored one ``logprobs`` list whose kind depended on the backend, and kept
    ``None`` for both "not truncated" and "not reported".  Converted without guessing:

    * a token with a kept id list came from the local engine, whose v1 log-prob was the
      full-vocabulary one: ``full_logprobs`` = it, ``sampled_logprobs`` = NaN (the kept mass
      was not stored);
    * a sampled token with ``kept=None`` is either untruncated local sampling (where both kinds
      coincide) or vLLM (whose log-prob was the sampled kind): ``sampled_logprobs`` = it,
      ``full_logprobs`` = NaN, ``kept`` = unknown;
    * v1 routes were per sampled token at the position that produced it: they move to that
      position (``t - 1``); other positions stay unrouted; turn parameters are unknown.
    """
    n = len(s["token_ids"])
    lengths = {len(s["loss_mask"]), len(s["logprobs"]), len(s["kept"])}
    routes_v1 = s.get("routes")
    if routes_v1 is not None:
        lengths.add(len(routes_v1))
    if lengths != {n}:
        raise ValueError(f"segment arrays have lengths {sorted(lengths)}, expected {n}")
    seg = Segment(token_ids=list(s["token_ids"]), loss_mask=list(s["loss_mask"]))
    for mask, lp, kept in zip(s["loss_mask"], s["logprobs"], s["kept"]):
        if not mask:
            seg.sampled_logprobs.append(0.0)
            seg.full_logprobs.append(0.0)
            seg.kept.append(None)
        elif kept is None:
            seg.sampled_logprobs.append(float(lp))
            seg.full_logprobs.append(NAN)
            seg.kept.append(UNKNOWN)
        else:
            seg.sampled_logprobs.append(NAN)
            seg.full_logprobs.append(float(lp))
            seg.kept.append(encode_kept(kept))
    if routes_v1 is not None:
        seg.routes = [[] for _ in range(n)]
        for t in range(1, n):
            if s["loss_mask"][t] and routes_v1[t]:
                seg.routes[t - 1] = [list(layer) for layer in routes_v1[t]]
    for a, b in s["turns"]:
        seg.turns.append((int(a), int(b)))
        full = any(k is not None for k in s["kept"][a:b])
        seg.turn_info.append(TurnInfo(logprob_kind="full" if full else SAMPLED))
    return seg
