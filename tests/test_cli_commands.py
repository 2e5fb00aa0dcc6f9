"""The CLI's feature commands come from the ``envgym.commands`` entry-point group.

envgym/cli.py names no command module (tests/test_import_contract.py holds the core to that);
these tests check that what pyproject.toml declares is what ``envgym`` offers, and that one
broken command does not take the others down.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import envgym.cli as cli

ROOT = Path(__file__).resolve().parent.parent


def _names(app: typer.Typer) -> set[str]:
    commands = {
        c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands
    }
    return commands | {g.name or "" for g in app.registered_groups}


def test_every_declared_command_is_offered() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    wanted = set(declared[cli.COMMANDS_GROUP])
    missing = wanted - _names(cli.app)
    assert not missing, (
        f"declared in pyproject.toml but not offered: {sorted(missing)}; the installed entry "
        "points are stale: rerun scripts/setup.sh (pip install -e .)"
    )
    assert {"eval", "synth", "train", "demo", "swe"} <= wanted


def test_a_broken_command_is_reported_and_the_others_still_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh = typer.Typer()
    group = cli.COMMANDS_GROUP
    eps = [
        EntryPoint("broken", "envgym.no_such_module:register", group),
        EntryPoint("compare", "envgym.commands.compare:register", group),
    ]
    monkeypatch.setattr(cli, "app", fresh)
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: eps)
    cli._register_commands()
    assert _names(fresh) == {"compare"}
    result = CliRunner().invoke(fresh, ["--help"])
    assert result.exit_code == 0 and "compare" in result.output


def test_no_commands_installed_says_how_to_fix_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "app", typer.Typer())
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [])
    monkeypatch.setattr(cli, "err", cli.Console(stderr=True, width=200))
    cli._register_commands()
    assert "pip install -e ." in capsys.readouterr().err
