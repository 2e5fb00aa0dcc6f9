"""The kit's one tasks.jsonl line shape (envgym.envs.procedural_kit.task_line): keys, order, ids."""

from __future__ import annotations

import json
from dataclasses import replace

from envgym.envs.procedural_kit.task_line import TaskNames
from envgym.envs.trip_planning.tasks import TASK_NAMES as TRIP

KEYS = ["id", "prompt", "solution", "verifier", "difficulty", "submit_tool", "system_prompt"]


def test_a_line_has_the_keys_in_the_order_bundles_were_written_with() -> None:
    names = TaskNames("retail", solution="solve_retail", verifier="verify_retail")
    line = names.line(6, 3, "Buy things.", {"budget": 10})
    # json.dumps keeps dict order, so the order is part of the bundle's bytes and its hash.
    assert list(line) == [*KEYS, "metadata"]
    assert json.dumps(line) == (
        '{"id": "retail-007-d3", "prompt": "Buy things.", "solution": "solve_retail", '
        '"verifier": "verify_retail", "difficulty": 3, "submit_tool": "submit_result", '
        '"system_prompt": null, "metadata": {"budget": 10}}'
    )


def test_a_named_baseline_follows_the_metadata() -> None:
    line = TRIP.line(0, 1, "Plan a trip.", {})
    assert list(line) == [*KEYS, "metadata", "baseline"]
    assert (line["id"], line["baseline"]) == ("trip-001-d1", "greedy_trip")


def test_a_hand_written_task_keeps_its_own_id_and_solver() -> None:
    line = replace(TRIP, solution="solve_hangzhou_3day").line(
        0, 3, "p", {}, task_id="hangzhou-3day"
    )
    assert (line["id"], line["solution"], line["difficulty"]) == (
        "hangzhou-3day",
        "solve_hangzhou_3day",
        3,
    )
