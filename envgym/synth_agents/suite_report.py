"""The figures of a suite (printed by ``envgym synth --categories``, stored in suite.json).

Counted from the suite journal (admitted and dropped bundles) and each category's synthesis
journal (jobs made, validated, rejected): environments, tasks, categories, distinct tool names
and signatures (name + argument schema), tools per environment, tasks per level, the greedy
baseline's solve share per level (``envgym check`` runs each task's ``baseline`` solver during
validation and the journal keeps its outcome), and the check pass rate (validated bundles over
bundles made).
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from envgym.suite_check import solve_share_per_level
from envgym.synth_agents.journal import Journal
from envgym.synth_agents.recorder import JOURNAL as SYNTH_JOURNAL


class _Config(Protocol):
    categories: tuple[str, ...]
    per_category: int


def suite_report(out: Path, config: _Config, records: list[dict[str, Any]]) -> dict[str, Any]:
    included = [r for r in records if r["status"] == "included"]
    dropped = [r for r in records if r["status"] == "dropped"]
    names = Counter(s.split("{", 1)[0] for r in included for s in r["signatures"])
    signatures = {s for r in included for s in r["signatures"]}
    tools = sorted(len(r["signatures"]) for r in included)
    levels: Counter[int] = Counter()
    greedy: list[tuple[int, bool]] = []
    for r in included:
        for level, solved in zip(r["levels"], r["baseline"]):
            levels[level] += 1
            if solved is not None:
                greedy.append((level, bool(solved)))
    jobs = _jobs(out, config)
    made = sum(bool(j.get("made")) for j in jobs)
    validated = sum(j.get("status") == "kept" for j in jobs)
    rejected: Counter[str] = Counter()
    for j in jobs:
        if j.get("status") != "kept":
            rejected.update(j.get("reasons") or ["unknown"])
    checked = [p for r in included for p in r["check_passed"]]
    return {
        "environments": len(included),
        "tasks": sum(len(r["tasks"]) for r in included),
        "categories": len({r["category"] for r in included}),
        "categories_requested": len(config.categories),
        "distinct_tool_names": len(names),
        "distinct_tool_signatures": len(signatures),
        "tools_per_environment": {
            "min": tools[0] if tools else 0,
            "median": statistics.median(tools) if tools else 0,
            "max": tools[-1] if tools else 0,
        },
        "tasks_per_level": {str(k): v for k, v in sorted(levels.items())},
        "greedy_solve_share_per_level": solve_share_per_level(greedy),
        "jobs": len(jobs),
        "jobs_requested": len(config.categories) * config.per_category,
        "made": made,
        "validated": validated,
        "check_pass_rate": validated / made if made else 0.0,
        "task_check_pass_rate": sum(checked) / len(checked) if checked else 0.0,
        "rejected": dict(rejected),
        "duplicates": {
            "tasks_in_category": sum(len(j.get("duplicates") or []) for j in jobs),
            "tasks_across_suite": sum(len(r.get("dropped_tasks") or []) for r in records),
            "environments": sum(r["reason"] == "duplicate_environment" for r in dropped),
            "bundles_all_tasks_duplicate": sum(r["reason"] == "duplicate_tasks" for r in dropped),
        },
    }


def _jobs(out: Path, config: _Config) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    for path in sorted((out / "work").glob(f"*/{SYNTH_JOURNAL}")):
        jobs += Journal(path).records("job")
    return jobs
