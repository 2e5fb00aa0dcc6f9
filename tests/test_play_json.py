"""``envgym play``: a JSON answer is typed as it is (key={...}, key=[...], or alone for a
one-parameter tool), not escaped for a shell; malformed input is an error naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from bundle_factory import make_notes_bundle
from typer.testing import CliRunner

from envgym.cli import app
from envgym.play import MAX_LINE, parse_command

ANSWER = ["answer"]  # a submit tool with one parameter


@pytest.mark.parametrize(
    ("line", "params", "expected"),
    [
        (
            'submit answer={"city": "New York", "days": [1, 2]} note="x y"',
            None,
            ("submit", {"answer": {"city": "New York", "days": [1, 2]}, "note": "x y"}),
        ),
        (
            'submit answer=[1, "a b", {"k": null}]',
            None,
            ("submit", {"answer": [1, "a b", {"k": None}]}),
        ),
        ("submit answer='it''s' n=2", None, ("submit", {"answer": "its", "n": 2})),
        ('submit [1, "two words"]', ANSWER, ("submit", {"answer": [1, "two words"]})),
        ('submit {"total": 5}', ANSWER, ("submit", {"answer": {"total": 5}})),
        ('submit {"answer": 5}', ANSWER, ("submit", {"answer": 5})),  # already the arguments
        ('submit {"a": 1, "b": 2}', ["a", "b"], ("submit", {"a": 1, "b": 2})),
    ],
)
def test_json_values_are_read_as_typed(line: str, params, expected) -> None:
    assert parse_command(line, params) == expected


@pytest.mark.parametrize(
    ("line", "params", "named"),
    [
        ('submit answer={"a": 1}x', None, "unexpected text after the value: 'x'"),
        ("submit answer={bad", None, "answer= is not valid JSON"),
        ('submit answer="open', None, "no closing quotation after answer="),
        ("submit [1, 2]", ["a", "b"], "a bare JSON array needs a tool with one parameter"),
        ("submit [1, 2]", None, "a bare JSON array needs a tool with one parameter"),
        ("submit " + "[" * 100_000, ANSWER, "nested too deeply"),
        ("submit answer=" + "[" * 100_000, None, "answer= is nested too deeply"),
        ("submit answer=1 stray", None, "expected key=value, got 'stray'"),
        ("submit " + "x" * (MAX_LINE + 1), None, "input over"),
    ],
)
def test_malformed_answers_are_named(line: str, params, named: str) -> None:
    result = parse_command(line, params)
    assert isinstance(result, str) and named in result, result


def test_play_submits_a_pasted_json_answer(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    # the notes bundle's submit tool has one parameter: its value typed alone, as JSON text
    keys = 'submit_result "tangerine"\n'
    result = CliRunner().invoke(app, ["play", str(root)], input=keys)
    assert result.exit_code == 0, result.stdout
    assert "reward 1.0" in result.stdout
