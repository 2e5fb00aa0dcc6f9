"""Meeting scheduling across calendars: database, rules, tools, verifier, envgym check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.bundle import load_bundle
from envgym.check import check_bundle
from envgym.envs.meeting_scheduling.build import build_bundle
from envgym.envs.meeting_scheduling.data import hhmm, write_db
from envgym.envs.meeting_scheduling.world import load_world, minutes
from envgym.envs.procedural_kit.local import LocalBundle

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle(tmp_path_factory.mktemp("meet") / "b", seed=2, n_tasks=5)


def failed(report: dict) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["passed"]}


def test_time_helpers() -> None:
    assert minutes("09:30") == 570 and hhmm(570) == "09:30" and hhmm(0) == "00:00"


def test_database_is_deterministic(tmp_path: Path) -> None:
    a, b = write_db(tmp_path / "a.sqlite", 4), write_db(tmp_path / "b.sqlite", 4)
    assert a.read_bytes() == b.read_bytes()


def test_levels(bundle: Path) -> None:
    tasks = load_bundle(bundle).tasks
    assert [len(t.metadata["meetings"]) for t in tasks] == [1, 1, 2, 3, 6]
    assert [t.metadata["buffer_min"] for t in tasks] == [0, 0, 30, 30, 30]
    assert [t.metadata["protect_lunch"] for t in tasks] == [False, False, True, True, True]
    assert sum(bool(m["representative_team"]) for m in tasks[4].metadata["meetings"]) == 1


def test_world_rules_match_the_database(bundle: Path) -> None:
    world = load_world(bundle / "state" / "db.sqlite")
    task = load_bundle(bundle).tasks[2].metadata
    schedule = next(world.schedules(task, limit=1))
    assert [row["meeting"] for row in schedule] == ["M1", "M2"]
    spans = sorted(
        (minutes(r["start_utc"]), minutes(r["start_utc"]) + m["duration_min"])
        for r, m in zip(schedule, task["meetings"])
    )
    assert (
        spans[1][0] >= spans[0][1] + task["buffer_min"]
    )  # any order, never overlapping, buffer kept
    sizes = {r.name: r.capacity for r in world.rooms}
    assert all(
        sizes[row["room"]] >= len(m["attendees"]) for row, m in zip(schedule, task["meetings"])
    )


def test_tools(bundle: Path) -> None:
    with LocalBundle(bundle).episode() as ep:
        assert ep.call_tool("local_to_utc", local_time="09:00", tz_offset_hours=2) == "07:00"
        assert ep.call_tool("local_to_utc", local_time="09:30", tz_offset_hours=-1) == "10:30"
        with pytest.raises(ValueError, match="another day"):
            ep.call_tool("local_to_utc", local_time="00:30", tz_offset_hours=2)
        rooms = ep.call_tool("list_rooms", min_capacity=6, needs_video=True)
        assert all(r["capacity"] >= 6 and r["has_video"] for r in rooms)
        assert [(r["capacity"], r["floor"], r["name"]) for r in rooms] == sorted(
            (r["capacity"], r["floor"], r["name"]) for r in rooms
        )
        teams = ep.call_tool("list_teams")
        people = ep.call_tool("list_people", team=teams[0])
        assert people and all(p["team"] == teams[0] for p in people)


def test_verifier_names_each_broken_rule(bundle: Path) -> None:
    task = load_bundle(bundle).tasks[4].to_dict()
    with LocalBundle(bundle).episode() as ep:
        gold = ep.solve(task).submission
        rows = json.loads(gold["answer_text"])["schedule"]
        assert failed(ep.verify(gold, task)) == set()
        clash = [dict(rows[0], start_utc=rows[1]["start_utc"]), *rows[1:]]
        assert failed(ep.verify({"answer_text": json.dumps({"schedule": clash})}, task)) == {
            "no_overlap"
        }
        odd = [dict(rows[0], start_utc="10:15"), *rows[1:]]
        assert failed(ep.verify({"answer_text": json.dumps({"schedule": odd})}, task)) == {
            "start_format"
        }
        renamed = [dict(rows[0], meeting="M9"), *rows[1:]]
        assert "meetings_in_order" in failed(
            ep.verify({"answer_text": json.dumps({"schedule": renamed})}, task)
        )
        assert failed(ep.verify({"answer_text": json.dumps({"schedule": rows[:1]})}, task)) == {
            "valid_json"
        }


def test_envgym_check_passes_in_the_sandbox(bundle: Path, require_backend) -> None:
    require_backend("bwrap")
    report = check_bundle(load_bundle(bundle), sandbox="bwrap")
    assert report.passed, report.to_dict()
