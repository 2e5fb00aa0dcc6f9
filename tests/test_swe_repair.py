"""Setup repairs as pure functions: the rules, and strict validation of a model's recipe patch."""

from __future__ import annotations

from pathlib import Path

import pytest

from envgym.envs.swe.recipe import Recipe
from envgym.envs.swe.repair import Failure, parse_patch, rule_repair

pytestmark = pytest.mark.timeout(30)

BASE = Recipe(
    install=(
        "python -m pip install -r requirements.txt",
        "python -m pip install -e '.[test]'",
        "python -m pip install pytest",
    )
)


def _smoke(output: str, repo: Path) -> Failure:
    return Failure("python -m pytest --collect-only -q", output, repo, is_install=False)


def test_missing_third_party_module_is_installed_after_the_recipe(tmp_path: Path) -> None:
    fixed = rule_repair(
        BASE, _smoke("E   ModuleNotFoundError: No module named 'yaml.constructor'", tmp_path)
    )
    assert fixed is not None and fixed.install == (*BASE.install, "python -m pip install PyYAML")
    assert fixed.notes[-1] == "repair: module 'yaml' missing: added 'python -m pip install PyYAML'"
    # tried once: the same failure again has no rule left (the loop then asks the model or stops)
    assert rule_repair(fixed, _smoke("No module named 'yaml'", tmp_path)) is None


def test_the_projects_own_module_goes_on_the_path_not_to_pip(tmp_path: Path) -> None:
    (tmp_path / "src" / "mypkg").mkdir(parents=True)
    fixed = rule_repair(BASE, _smoke("No module named 'mypkg'", tmp_path))
    assert (
        fixed is not None
        and fixed.install == BASE.install
        and dict(fixed.env) == {"PYTHONPATH": "src"}
    )


def test_a_build_that_imports_a_module_builds_without_isolation(tmp_path: Path) -> None:
    failure = Failure(
        "python -m pip install -e '.[test]'",
        "ModuleNotFoundError: No module named 'numpy'",
        tmp_path,
        is_install=True,
    )
    fixed = rule_repair(BASE, failure)
    assert fixed is not None and fixed.install == (
        "python -m pip install -r requirements.txt",
        "python -m pip install setuptools wheel numpy",
        "python -m pip install --no-build-isolation -e '.[test]'",
        "python -m pip install pytest",
    )


def test_pytest_plugins_from_usage_errors(tmp_path: Path) -> None:
    output = (
        "ERROR: usage: __main__.py [options] [file_or_dir] [file_or_dir] [...]\n"
        "__main__.py: error: unrecognized arguments: --cov=pkg -n 4\n"
    )
    fixed = rule_repair(BASE, _smoke(output, tmp_path))
    assert (
        fixed is not None and fixed.install[-1] == "python -m pip install pytest-cov pytest-xdist"
    )
    marker = rule_repair(
        BASE, _smoke("'asyncio' not found in `markers` configuration option", tmp_path)
    )
    assert marker is not None and marker.install[-1] == "python -m pip install pytest-asyncio"


def test_failed_editable_install_falls_back_to_a_plain_one(tmp_path: Path) -> None:
    failure = Failure(
        "python -m pip install -e '.[test]'",
        "error: editable mode is not supported",
        tmp_path,
        is_install=True,
    )
    fixed = rule_repair(BASE, failure)
    assert fixed is not None and fixed.install[1] == "python -m pip install '.[test]'"
    assert dict(fixed.env) == {"PYTHONPATH": "."}
    assert (
        rule_repair(
            BASE,
            Failure(
                "python -m pip install -r requirements.txt",
                "No matching distribution",
                tmp_path,
                is_install=True,
            ),
        )
        is None
    )


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("Sure! Just set DEMO_MODE.", "not JSON"),
        ("[1, 2]", "JSON list, not an object"),
        ('{"install": "pip install x"}', "install: not a list of command strings (got str)"),
        ('{"install": ["ok", 3]}', "install: every command must be a non-empty string"),
        ('{"install": [["nested"]]}', "install: every command must be a non-empty string"),
        ('{"test_command": []}', "test_command: empty argv"),
        ('{"env": {"PATH": "/evil"}}', "env: variable name 'PATH' is invalid or reserved"),
        ('{"env": {"A": 1}}', "env: value of A is not a plain string"),
        ('{"env": ["A=1"]}', "env: not an object (got list)"),
        ('{"shell": "rm -rf /"}', "unknown keys ['shell']"),
        ('{"reason": "nothing to do"}', "the patch changes nothing"),
        (
            '{"install": ["python -m pip install -r requirements.txt", "python -m pip install -e \'.[test]\'", '
            '"python -m pip install pytest"]}',
            "the patch changes nothing",
        ),
        ('{"reason": 5, "env": {"A": "1"}}', "reason: not a string"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_malformed_model_replies_are_rejected_with_a_reason(reply: str, why: str) -> None:
    patched, reason = parse_patch(reply, BASE)
    assert patched is None and why in reason


def test_a_good_patch_in_a_code_fence_applies() -> None:
    reply = 'Here you go:\n```json\n{"env": {"DEMO_MODE": "1"}, "test_command": ["python", "-m", "pytest", "-x"], "reason": "conftest"}\n```'
    patched, reason = parse_patch(reply, BASE)
    assert reason == "" and patched is not None
    assert dict(patched.env) == {"DEMO_MODE": "1"} and patched.test_command == (
        "python",
        "-m",
        "pytest",
        "-x",
    )
    assert (
        patched.install == BASE.install
        and patched.notes[-1] == "model repair: conftest (env, test_command)"
    )
