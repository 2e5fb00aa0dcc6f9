"""The static trajectory report of an evaluation (``envgym eval --html DIR``).

``DIR/index.html`` (page, style and script inline), ``DIR/data.js`` (the data, loaded by a
script tag so the page works from ``file://``) and ``DIR/report.json`` (the same data for
programs).  No CDN, no network.  Besides the summary and the trajectories it shows the tools the
model was given and, when the model's tokenizer is at hand, the exact prompt text it read
(decoded from its token ids): what one needs to see why a model never calls a tool.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envgym.evaluate.summary import EvalSummary
from envgym.rollout.episode import EpisodeResult

from .assets import CSS, JS, PAGE

Decode = Callable[[list[int]], str]


def report_data(
    summary: EvalSummary,
    episodes: list[EpisodeResult],
    *,
    tools: list[dict[str, Any]] | None = None,
    decode: Decode | None = None,
    tools_view: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report's data.  ``tools``: the schemas the model was given; ``tools_view``: how it
    saw them (envgym.models.tool_support.ToolsDecision: ``view`` native | prompt |
    native-unverified, and ``reason``); ``decode``: the model's
    tokenizer (ids → text), which turns each episode's token ids back into the exact prompt
    text the model read (``prompt_text``: its first turn's; ``model_view``: every segment)."""
    eps = []
    for e in episodes:
        data = e.to_dict()
        data.pop("record")  # token arrays are for training, not for reading
        data["passed"] = e.passed
        data["segments"] = len(e.record.segments)
        data["prompt_text"], data["model_view"] = _model_view(e, decode)
        eps.append(data)
    return {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "summary": summary.to_dict(),
        "tools": tools,
        "tools_view": tools_view,
        "decoded": decode is not None,
        "episodes": eps,
    }


def _model_view(e: EpisodeResult, decode: Decode | None) -> tuple[str | None, list[str]]:
    """The first prompt and every segment as text, exactly as tokenized (no re-rendering)."""
    segments = e.record.segments
    if decode is None or not segments:
        return None, []
    first = segments[0]
    start = first.loss_mask.index(1) if 1 in first.loss_mask else len(first.token_ids)
    return decode(first.token_ids[:start]), [decode(s.token_ids) for s in segments]


def _finite(value: Any) -> Any:
    """NaN/inf (e.g. the mean reward of a task whose samples all errored) are not JSON: null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _json(data: Any) -> str:
    # ``<`` escaped so no string in the data can close a script element.
    text = json.dumps(_finite(data), ensure_ascii=False, default=str, allow_nan=False)
    return text.replace("<", "\\u003c")


def write_report(
    out_dir: Path | str,
    summary: EvalSummary,
    episodes: list[EpisodeResult],
    *,
    tools: list[dict[str, Any]] | None = None,
    decode: Decode | None = None,
    tools_view: dict[str, Any] | None = None,
) -> Path:
    """Write the report; returns the path of index.html."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = _json(report_data(summary, episodes, tools=tools, decode=decode, tools_view=tools_view))
    (out / "report.json").write_text(data, encoding="utf-8")
    (out / "data.js").write_text(f"window.ENVGYM_REPORT = {data};\n", encoding="utf-8")
    index = out / "index.html"
    index.write_text(PAGE.replace("{css}", CSS).replace("{js}", JS), encoding="utf-8")
    return index


__all__ = ["report_data", "write_report"]
