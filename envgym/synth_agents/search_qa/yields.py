"""Per-stage yield of model-driven search-QA synthesis, computed from its journal.

Computed from the journal (not counted in memory) so a resumed run reports the whole run: what
earlier, interrupted invocations did counts once, as does their model time.
"""

from __future__ import annotations

from typing import Any

from envgym.synth_agents.journal import Journal


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def stage_yield(journal: Journal) -> dict[str, Any]:
    """``explored → constructed → verified → kept`` counts, the fraction kept at each stage, and
    kept (verified, every candidate wrong) pairs per hour of model time."""
    constructs = journal.records("construct")
    verifies = journal.records("verify")
    answers = journal.records("answer")
    decisions = journal.records("decision")
    explored = len(constructs)
    constructed = sum(1 for r in constructs if r["ok"])
    verified = sum(1 for r in verifies if r["ok"])
    kept = sum(1 for r in decisions if r["kept"])
    answered_by: dict[str, int] = {}
    for r in answers:
        if r["correct"]:
            answered_by[r["agent"]] = answered_by.get(r["agent"], 0) + 1
    model_s = sum(r["cost"]["model_s"] for r in (*constructs, *verifies, *answers))
    by_role = {role: round(sum(r["cost"]["model_s"] for r in recs), 3)
               for role, recs in (("construct", constructs), ("verify", verifies), ("answer", answers))}  # fmt: skip
    tokens = sum(r["cost"]["completion_tokens"] for r in (*constructs, *verifies, *answers))
    reasons: dict[str, int] = {}
    for r in decisions:
        if not r["kept"]:
            reasons[r["stage"]] = reasons.get(r["stage"], 0) + 1
    return {
        "explored": explored,
        "constructed": constructed,
        "verified": verified,
        "all_candidates_failed": kept,
        "kept": kept,
        "decided": len(decisions),
        "fraction": {
            "constructed": _ratio(constructed, explored),
            "verified": _ratio(verified, constructed),
            "kept": _ratio(kept, verified),
            "overall": _ratio(kept, explored),
        },
        "dropped_at": reasons,
        "answered_by": answered_by,
        "candidate_runs": len(answers),
        "model_s": round(model_s, 3),
        "model_s_by_role": by_role,
        "completion_tokens": tokens,
        "kept_per_model_hour": round(kept * 3600 / model_s, 2) if model_s > 0 else None,
    }
