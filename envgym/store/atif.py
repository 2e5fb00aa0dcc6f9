"""Episodes as ATIF trajectories (Harbor's Agent Trajectory Interchange Format).

One trajectory per episode (:func:`episode_trajectory`), as the plain JSON object ATIF defines;
this module builds dicts and imports nothing of Harbor (its models validate our output in the
tests, in their own virtual environment).  The mapping:

* messages → steps, in order: ``system`` → a ``system`` step, ``user`` → a ``user`` step (an
  envgym nudge keeps ``name: "envgym"`` in ``extra``), ``assistant`` → an ``agent`` step with
  ``reasoning_content`` and ``tool_calls`` (arguments parsed from their JSON text; text that is
  not a JSON object is kept in the call's ``extra.raw_arguments``), and each ``tool`` message
  → a result in the observation of the agent step that made the call (``source_call_id``; a
  result whose id the step did not make keeps it in ``extra.tool_call_id``, as ATIF requires
  source ids to name the step's own calls);
* the per-token record → each agent step's ``metrics``: ``prompt_token_ids`` (the exact
  sequence the turn was sampled after, within its record segment), ``completion_token_ids``,
  ``logprobs`` (under the sampled distribution; left out when the backend did not report them)
  and, in ``metrics.extra``, the full-vocabulary log-probs and the turn's sampling parameters,
  policy version and finish reason.  Assistant messages and record turns are matched in order,
  only when their counts agree (else the notes say so and no step gets token metrics);
* outcome → ``final_metrics`` (token totals) and the trajectory's ``extra`` (reward, its
  components, the verifier's report, truncation, errors, context compactions).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envgym.record import Segment
from envgym.rollout.episode import EpisodeResult

__all__ = ["ATIF_VERSION", "AtifTurn", "episode_trajectory", "write_trajectories"]

ATIF_VERSION = "ATIF-v1.7"  # tool-call and observation-result `extra` are v1.7 fields
AGENT_NAME = "envgym"


@dataclass(frozen=True)
class AtifTurn:
    """One sampled assistant turn of the record: its segment and ``[start, end)`` span."""

    segment: Segment
    start: int
    end: int
    index: int  # of the turn within its segment


def record_turns(result: EpisodeResult) -> list[AtifTurn]:
    return [
        AtifTurn(segment, start, end, j)
        for segment in result.record.segments
        for j, (start, end) in enumerate(segment.turns)
    ]


def _text(content: Any) -> str:
    """A message's content as text (OpenAI content parts: their text, joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return json.dumps(content, ensure_ascii=False)


def _finite(values: Sequence[float]) -> list[float] | None:
    out = [float(v) for v in values]
    return None if any(not math.isfinite(v) for v in out) else out


def _metrics(turn: AtifTurn, token_ids: bool) -> dict[str, Any]:
    s, a, b = turn.segment, turn.start, turn.end
    metrics: dict[str, Any] = {"prompt_tokens": a, "completion_tokens": b - a}
    extra: dict[str, Any] = {"segment_turn": turn.index}
    if turn.index < len(s.turn_info):
        extra.update(asdict(s.turn_info[turn.index]))
    if token_ids:
        metrics["prompt_token_ids"] = list(s.token_ids[:a])
        metrics["completion_token_ids"] = list(s.token_ids[a:b])
    sampled = _finite(s.sampled_logprobs[a:b])
    if sampled is not None:
        metrics["logprobs"] = sampled
    full = _finite(s.full_logprobs[a:b])
    if full is not None:
        extra["full_logprobs"] = full
    metrics["extra"] = extra
    return metrics


def _tool_call(call: dict[str, Any], n: int) -> dict[str, Any]:
    given = call.get("function")
    function: dict[str, Any] = given if isinstance(given, dict) else {}
    raw = function.get("arguments", {})
    out: dict[str, Any] = {
        "tool_call_id": str(call.get("id") or f"call-{n}"),
        "function_name": str(function.get("name", "")),
        "arguments": raw if isinstance(raw, dict) else {},
    }
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            out["arguments"] = parsed
        else:
            out["extra"] = {"raw_arguments": raw}
    return out


def _steps(
    result: EpisodeResult, turns: list[AtifTurn] | None, token_ids: bool
) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    agent_step: dict[str, Any] | None = None  # the step tool results attach to
    n_agent = 0
    for message in result.messages:
        role = message.get("role")
        if role == "tool":
            if agent_step is None:  # a result before any call: a system event
                agent_step = {"source": "system", "message": ""}
                steps.append(agent_step)
            ids = {c["tool_call_id"] for c in agent_step.get("tool_calls", [])}
            call_id = message.get("tool_call_id")
            entry: dict[str, Any] = {"content": _text(message.get("content"))}
            if call_id in ids:
                entry["source_call_id"] = call_id
            elif call_id is not None:
                entry["extra"] = {"tool_call_id": str(call_id)}
            agent_step.setdefault("observation", {"results": []})["results"].append(entry)
            continue
        step: dict[str, Any] = {"message": _text(message.get("content"))}
        if role == "assistant":
            step["source"] = "agent"
            if message.get("reasoning_content"):
                step["reasoning_content"] = str(message["reasoning_content"])
            calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
            if calls:
                step["tool_calls"] = [_tool_call(c, i) for i, c in enumerate(calls)]
            if turns is not None:
                step["metrics"] = _metrics(turns[n_agent], token_ids)
                step["llm_call_count"] = 1
            n_agent += 1
            agent_step = step
        else:
            step["source"] = "system" if role == "system" else "user"
            if message.get("name"):
                step["extra"] = {"name": str(message["name"])}
            agent_step = None
        steps.append(step)
    return steps


def episode_trajectory(
    result: EpisodeResult, *, evaluation: str, model: str, token_ids: bool = True
) -> dict[str, Any]:
    """The ATIF trajectory of one stored episode (a JSON-ready dict)."""
    turns = record_turns(result)
    n_assistant = sum(1 for m in result.messages if m.get("role") == "assistant")
    notes = []
    if len(turns) != n_assistant:
        notes.append(
            f"the per-token record has {len(turns)} sampled turns for {n_assistant} assistant "
            "messages, so no step carries token metrics"
        )
    steps = _steps(result, turns if len(turns) == n_assistant else None, token_ids)
    if not steps:  # ATIF wants at least one step; an episode that errored before its prompt
        steps = [{"source": "system", "message": result.error_message or "(no messages)"}]
        notes.append("the episode has no messages")
    for i, step in enumerate(steps, 1):
        step["step_id"] = i
    session = f"{evaluation}/{result.task_id}#{result.sample}"
    trajectory: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": session,
        "trajectory_id": session,
        "agent": {"name": AGENT_NAME, "version": _version(), "model_name": model},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": result.prompt_tokens,
            "total_completion_tokens": result.sampled_tokens,
            "total_cached_tokens": result.cached_prompt_tokens,
            "total_steps": len(steps),
        },
        "extra": {
            "evaluation": evaluation,
            "task_id": result.task_id,
            "sample": result.sample,
            "reward": result.reward,
            "passed": result.passed,
            "reward_components": dict(result.reward_components),
            "terminated": result.terminated,
            "truncated": result.truncated,
            "truncated_by": result.truncated_by,
            "error": result.error,
            "error_message": result.error_message,
            "turns": result.turns,
            "tool_calls": result.tool_calls,
            "duration_s": result.duration_s,
            "policy_version": result.record.policy_version,
            "agent_errors": dict(result.agent_errors),
            "report": result.report,
            "context_dropped": list(result.context_dropped),
            "context_compactions": list(result.context_compactions),
        },
    }
    if notes:
        trajectory["notes"] = "; ".join(notes)
    return trajectory


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("envgym")
    except PackageNotFoundError:
        return "0"


def write_trajectories(
    path: Path | str,
    rows: Iterable[tuple[str, str, EpisodeResult]],
    *,
    token_ids: bool = True,
) -> int:
    """Write ``(evaluation, model, episode)`` rows as ATIF: a ``.jsonl`` file (one trajectory a
    line) or else a directory of ``<n>.json`` files; returns how many were written."""
    path = Path(path)
    count = 0
    if path.suffix == ".jsonl":
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for evaluation, model, result in rows:
                trajectory = episode_trajectory(
                    result, evaluation=evaluation, model=model, token_ids=token_ids
                )
                fh.write(json.dumps(trajectory, ensure_ascii=False, allow_nan=False) + "\n")
                count += 1
        tmp.replace(path)  # a reader never sees half a file
        return count
    path.mkdir(parents=True, exist_ok=True)
    for evaluation, model, result in rows:
        trajectory = episode_trajectory(
            result, evaluation=evaluation, model=model, token_ids=token_ids
        )
        # names from a counter, never from ids (a task id may hold "/" or "..")
        target = path / f"{count:06d}.json"
        target.write_text(
            json.dumps(trajectory, ensure_ascii=False, allow_nan=False, indent=1) + "\n",
            encoding="utf-8",
        )
        count += 1
    return count
