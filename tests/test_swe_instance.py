"""envgym/envs/swe/instance.py: SweInstance and strict SWE-bench JSONL reading/writing."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envgym.envs.swe.instance import InstanceError, SweInstance, read_instances, write_instances

SHA = "a" * 40


def _record(**over: object) -> dict[str, object]:
    record: dict[str, object] = {
        "instance_id": "o__r-1",
        "repo": "o/r",
        "base_commit": SHA,
        "problem_statement": "It breaks.",
        "patch": "diff",
        "test_patch": "tdiff",
        "FAIL_TO_PASS": ["tests/test_a.py::test_x"],
        "PASS_TO_PASS": [],
    }
    record.update(over)
    return record


def _jsonl(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


@pytest.mark.timeout(10)
def test_instance_is_frozen_with_immutable_defaults() -> None:
    a = SweInstance("i", "r", SHA, "p", "", "", fail_to_pass=["t"], metadata={"k": [1]})
    b = SweInstance("j", "r", SHA, "p", "", "")
    assert a.fail_to_pass == ("t",) and isinstance(a.fail_to_pass, tuple)
    with pytest.raises(TypeError):
        a.metadata["k"] = 2  # type: ignore[index]
    with pytest.raises(FrozenInstanceError):
        a.repo = "x"  # type: ignore[misc]
    assert b.metadata == {} and b.metadata is not SweInstance("k", "r", SHA, "p", "", "").metadata
    assert {a, b} and hash(a) == hash(a)


@pytest.mark.timeout(10)
def test_reads_lists_and_json_encoded_strings_and_keeps_unknown_fields(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path,
        _record(),
        "",
        _record(
            instance_id="o__r-2",
            FAIL_TO_PASS='["tests/t.py::a", "tests/t.py::b"]',
            PASS_TO_PASS="[]",
            difficulty="<15 min",
            hints_text=None,
            version="3.0",
        ),
    )
    first, second = read_instances(path)
    assert first.fail_to_pass == ("tests/test_a.py::test_x",) and first.metadata == {}
    assert second.fail_to_pass == ("tests/t.py::a", "tests/t.py::b")
    assert second.metadata == {"difficulty": "<15 min"} and second.hints_text == ""
    assert second.version == "3.0"


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("line", "field", "words"),
    [
        ("{not json", "", "not valid JSON"),
        ('["a list"]', "", "expected a JSON object"),
        (json.dumps({k: v for k, v in _record().items() if k != "patch"}), "patch", "missing"),
        (json.dumps(_record(base_commit="abc123")), "base_commit", "40-hex"),
        (json.dumps(_record(base_commit="g" * 40)), "base_commit", "40-hex"),
        (json.dumps(_record(repo=5)), "repo", "must be a string"),
        (json.dumps(_record(FAIL_TO_PASS="not json")), "FAIL_TO_PASS", "not a JSON list"),
        (json.dumps(_record(PASS_TO_PASS=[1, 2])), "PASS_TO_PASS", "list of test id strings"),
        (json.dumps(_record(version=3.0)), "version", "must be a string"),
        (json.dumps(_record(instance_id=" ")), "instance_id", "empty"),
    ],
)
def test_bad_lines_name_the_line_and_the_field(
    tmp_path: Path, line: str, field: str, words: str
) -> None:
    path = _jsonl(tmp_path, _record(instance_id="ok-1"), line)
    with pytest.raises(InstanceError, match=words) as caught:
        read_instances(path)
    assert caught.value.where == "data.jsonl line 2"
    assert caught.value.field == field
    assert "line 2" in str(caught.value)


@pytest.mark.timeout(10)
def test_duplicate_ids_are_refused_on_read_and_write(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, _record(), _record(patch="other"))
    with pytest.raises(InstanceError, match=r"duplicate instance id 'o__r-1' \(first on line 1\)"):
        read_instances(path)
    one = SweInstance("x", "r", SHA, "p", "", "")
    with pytest.raises(InstanceError, match="duplicate"):
        write_instances(tmp_path / "out.jsonl", [one, one])
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.timeout(10)
def test_missing_file_and_non_utf8(tmp_path: Path) -> None:
    with pytest.raises(InstanceError, match="no such file"):
        read_instances(tmp_path / "absent.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe{}")
    with pytest.raises(InstanceError, match="not UTF-8"):
        read_instances(tmp_path / "bin.jsonl")


@pytest.mark.timeout(10)
def test_metadata_shadowing_a_known_field_is_refused_on_write(tmp_path: Path) -> None:
    bad = SweInstance("x", "r", SHA, "p", "", "", metadata={"patch": "sneaky"})
    with pytest.raises(InstanceError, match="shadow"):
        write_instances(tmp_path / "out.jsonl", [bad])


@pytest.mark.timeout(10)
def test_swe_bench_lines_round_trip_field_for_field(tmp_path: Path) -> None:
    original = _record(FAIL_TO_PASS='["a::b"]', created_at="2023-01-01T00:00:00Z", extra={"n": 1})
    path = _jsonl(tmp_path, original)
    again = tmp_path / "again.jsonl"
    write_instances(again, read_instances(path))
    written = json.loads(again.read_text())
    assert written == {
        **original,
        "FAIL_TO_PASS": ["a::b"],
        "version": "",
        "environment_setup_commit": "",
        "hints_text": "",
        "repo_url": "",
    }


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_instances = st.builds(
    SweInstance,
    instance_id=st.text("abcxyz_-0123", min_size=1, max_size=12),
    repo=_text,
    base_commit=st.text("0123456789abcdef", min_size=40, max_size=40),
    problem_statement=_text,
    patch=_text,
    test_patch=_text,
    fail_to_pass=st.lists(_text, max_size=3).map(tuple),
    pass_to_pass=st.lists(_text, max_size=3).map(tuple),
    version=_text,
    created_at=_text,
    hints_text=_text,
    repo_url=_text,
    metadata=st.dictionaries(
        st.text("mnop", min_size=1, max_size=5),
        st.one_of(st.integers(), _text, st.lists(st.integers(), max_size=2)),
        max_size=3,
    ),
)


@pytest.mark.timeout(60)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(_instances, max_size=4, unique_by=lambda i: i.instance_id))
def test_write_then_read_is_the_identity(tmp_path: Path, instances: list[SweInstance]) -> None:
    path = tmp_path / "prop.jsonl"
    write_instances(path, instances)
    assert read_instances(path) == instances
