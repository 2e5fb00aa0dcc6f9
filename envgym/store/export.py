"""Episodes as training/analysis data: JSONL and Parquet files that ``datasets`` loads.

One row per episode.  Scalar outcome columns; ``segments`` holds the per-token record (record
version 2, envgym.record) as a list of structs: ``token_ids``, ``loss_mask``, ``logprobs`` (under
the sampled distribution) and ``full_logprobs`` (over the whole vocabulary; ``null`` where the
backend did not report that kind), ``turns`` as ``[start, end)`` pairs and ``turn_info`` (per
turn: sampling parameters, policy version, finish reason, log-prob kind).  The heterogeneous
parts are JSON strings so every row has one schema: chat messages, reward components, MoE routes,
and the sampler's kept sets twice — ``kept`` decoded (per token the kept ids, ``null`` = not
truncated, ``"unknown"`` = not reported: readable without envgym) and ``kept_codes`` (the
record's compact codes, envgym.models.kept).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from envgym.models.kept import decode_kept
from envgym.record import Segment
from envgym.rollout.episode import EpisodeResult

FORMATS = ("jsonl", "parquet")


def episode_row(evaluation: str, model: str, r: EpisodeResult) -> dict[str, Any]:
    return {
        "evaluation": evaluation,
        "model": model,
        "task_id": r.task_id,
        "sample": r.sample,
        "reward": float(r.reward),
        "passed": r.passed,
        "error": r.error,
        "truncated_by": r.truncated_by,
        "turns": r.turns,
        "tool_calls": r.tool_calls,
        "sampled_tokens": r.sampled_tokens,
        "policy_version": r.record.policy_version,
        "reward_components": json.dumps(r.reward_components),
        "messages": json.dumps(r.messages, ensure_ascii=False),
        "segments": [segment_row(s) for s in r.record.segments],
    }


def _floats(values: list[float]) -> list[float | None]:
    return [None if math.isnan(x) else float(x) for x in values]  # NaN: not reported


def segment_row(s: Segment) -> dict[str, Any]:
    return {
        "token_ids": list(s.token_ids),
        "loss_mask": list(s.loss_mask),
        "logprobs": _floats(s.sampled_logprobs),
        "full_logprobs": _floats(s.full_logprobs),
        "turns": [list(t) for t in s.turns],
        "turn_info": [asdict(info) for info in s.turn_info],
        "kept": json.dumps([decode_kept(k) for k in s.kept]),
        "kept_codes": json.dumps(s.kept),
        "routes": json.dumps(s.routes),
    }


def _arrow_schema() -> Any:
    import pyarrow as pa

    turn_info = pa.struct(
        [
            ("temperature", pa.float64()),
            ("top_p", pa.float64()),
            ("top_k", pa.int64()),
            ("policy_version", pa.int64()),
            ("finish_reason", pa.string()),
            ("logprob_kind", pa.string()),
        ]
    )
    segment = pa.struct(
        [
            ("token_ids", pa.list_(pa.int64())),
            ("loss_mask", pa.list_(pa.int8())),
            ("logprobs", pa.list_(pa.float64())),
            ("full_logprobs", pa.list_(pa.float64())),
            ("turns", pa.list_(pa.list_(pa.int64()))),
            ("turn_info", pa.list_(turn_info)),
            ("kept", pa.string()),
            ("kept_codes", pa.string()),
            ("routes", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("evaluation", pa.string()),
            ("model", pa.string()),
            ("task_id", pa.string()),
            ("sample", pa.int64()),
            ("reward", pa.float64()),
            ("passed", pa.bool_()),
            ("error", pa.string()),
            ("truncated_by", pa.string()),
            ("turns", pa.int64()),
            ("tool_calls", pa.int64()),
            ("sampled_tokens", pa.int64()),
            ("policy_version", pa.int64()),
            ("reward_components", pa.string()),
            ("messages", pa.string()),
            ("segments", pa.list_(segment)),
        ]
    )


def export_rows(
    path: Path, rows: list[tuple[str, str, EpisodeResult]], *, fmt: str | None = None
) -> int:
    fmt = fmt or {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(path.suffix)
    if fmt not in FORMATS:
        raise ValueError(
            f"export format must be one of {', '.join(FORMATS)} (or a .jsonl/.parquet path), not {fmt!r}"
        )
    records = [episode_row(*row) for row in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if fmt == "jsonl":
        with open(tmp, "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records, schema=_arrow_schema()), tmp)
    tmp.replace(path)  # a reader never sees half a file
    return len(records)
