"""Recipe: JSON round trip, content key, and rule-based detection on small fixture repos."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from envgym.envs.swe.recipe import HOST_PYTHON, Recipe, detect_recipe

pytestmark = pytest.mark.timeout(30)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_round_trip_key_and_immutability() -> None:
    recipe = Recipe(
        install=("python -m pip install -e .",), env={"B": "2", "A": "1"}, notes=("why",)
    )
    again = Recipe.from_json(json.loads(json.dumps(recipe.to_json())))
    assert again == recipe and again.key() == recipe.key()
    assert list(recipe.env) == ["A", "B"]
    assert recipe.noted("more").key() == recipe.key()  # notes explain; they do not shape the env
    assert Recipe(install=("x",)).key() != Recipe(install=("y",)).key()
    assert Recipe(env={"A": "1"}).key() != Recipe(env={"A": "2"}).key()
    with pytest.raises(TypeError):
        recipe.env["C"] = "3"  # type: ignore[index]
    with pytest.raises(ValueError, match="unknown recipe keys"):
        Recipe.from_json({"install": [], "shell": "rm -rf /"})


def test_pyproject_with_test_extra_and_pytest_plugins(tmp_path: Path) -> None:
    repo = _write(
        tmp_path,
        {
            "pyproject.toml": """
            [build-system]
            requires = ["setuptools>=64"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "demo"
            version = "0.1"
            requires-python = ">=3.8"
            [project.optional-dependencies]
            test = ["pytest"]
            dev = ["black"]
            docs = ["sphinx"]
            [tool.pytest.ini_options]
            addopts = "--cov=demo -n 2 --strict-markers"
            asyncio_mode = "auto"
        """,
            "src/demo/__init__.py": "",
            "tests/test_demo.py": "def test_x():\n    pass\n",
        },
    )
    recipe = detect_recipe(repo)
    assert recipe.install == (
        "python -m pip install -e '.[test]'",
        "python -m pip install pytest pytest-cov pytest-xdist pytest-asyncio",
    )
    assert recipe.test_framework == "pytest" and recipe.python == HOST_PYTHON
    assert dict(recipe.env) == {}
    assert any("extras installed: test (of dev, docs, test)" in n for n in recipe.notes)


def test_setup_py_requirements_tox_and_unittest(tmp_path: Path) -> None:
    repo = _write(
        tmp_path,
        {
            "setup.py": """
            from setuptools import setup
            setup(name="legacy", extras_require={"testing": ["mock"], "docs": ["sphinx"]})
        """,
            "requirements.txt": "six\n",
            "requirements-test.txt": "iniconfig\n",
            "requirements-docs.txt": "sphinx\n",
            "tox.ini": """
            [testenv]
            deps =
                -rrequirements.txt
                hypothesis>=6
                py38: mock
                unit-!py315t: matplotlib; python_version < "3.15"
                {[base]deps}
            commands = python -m unittest discover
        """,
            "tests/test_legacy.py": "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n",
        },
    )
    recipe = detect_recipe(repo)
    assert recipe.install == (
        "python -m pip install -r requirements.txt",
        "python -m pip install -r requirements-test.txt",
        "python -m pip install 'hypothesis>=6'",
        "python -m pip install -e '.[testing]'",
        "python -m pip install pytest",
    )
    assert recipe.test_framework == "unittest"
    assert any("requirements-docs.txt" in n and "not installed" in n for n in recipe.notes)
    assert any("python -m unittest discover" in n for n in recipe.notes)


def test_src_layout_without_packaging_and_noxfile(tmp_path: Path) -> None:
    repo = _write(
        tmp_path,
        {
            "src/lib/__init__.py": "",
            "noxfile.py": "import nox\n@nox.session\ndef tests(session):\n"
            "    session.install('attrs', '-e', '.')\n    session.run('pytest')\n",
            "tests/test_lib.py": "import pytest\n",
        },
    )
    recipe = detect_recipe(repo)
    assert recipe.install == ("python -m pip install attrs", "python -m pip install pytest")
    assert dict(recipe.env) == {"PYTHONPATH": "src"}


def test_broken_config_files_are_noted_not_fatal(tmp_path: Path) -> None:
    repo = _write(
        tmp_path,
        {
            "pyproject.toml": "[project\nname=",
            "tox.ini": "no section header\n",
            "noxfile.py": "def (:\n",
            "setup.py": "this is not python(",
        },
    )
    recipe = detect_recipe(repo)
    assert recipe.install == ("python -m pip install -e .", "python -m pip install pytest")
    text = " | ".join(recipe.notes)
    assert "pyproject.toml is not valid TOML" in text and "tox.ini does not parse" in text
    assert "noxfile.py does not parse" in text


def test_tests_pytest_would_not_collect_by_default_get_a_python_files_option(
    tmp_path: Path,
) -> None:
    # decorator's sdist keeps its tests in tests/test.py: the default test_*.py collects nothing
    repo = _write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'deco'\nversion = '1'\n",
            "src/deco/__init__.py": "",
            "tests/test.py": "def test_a():\n    pass\n",
        },
    )
    recipe = detect_recipe(repo)
    assert recipe.test_command[-2:] == ("-o", "python_files=test*.py tests.py *_test.py")
    assert any("tests/test.py" in n for n in recipe.notes)
    # a project that names its own python_files, or uses the default names, keeps pytest's choice
    _write(tmp_path, {"tests/test_b.py": "def test_b():\n    pass\n"})
    assert detect_recipe(repo).test_command == Recipe().test_command
