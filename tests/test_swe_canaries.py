"""Canaries (envgym/envs/swe/canaries.py): must-fail tests that look like their neighbours, in the
container of each F2P test — the module for functions, the class for TestCase methods."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.envs.swe.canaries import plant_canaries

pytestmark = pytest.mark.timeout(60)

CLASSES = '''import unittest


class PeekTests(unittest.TestCase):
    """Peeking."""

    def test_peek(self):
        self.assertEqual(1, 1)

    @staticmethod
    def helper():
        return 2

    def test_truthiness(self):
        self.assertTrue([1])


class OtherTests(unittest.TestCase):
    def test_other(self):
        pass
'''
FUNCTIONS = "def test_a():\n    pass\n\n\ndef test_b():\n    pass\n"


def _outcomes(root: Path) -> dict[str, str]:
    """pytest's own verdict per node id (outcome word from -rA lines)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(root)],
                          cwd=root, capture_output=True, text=True, timeout=60)  # fmt: skip
    out = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED"):
            out[rest.split(" - ")[0].strip()] = word
    return out


def test_canaries_go_into_the_class_of_a_testcase_f2p_test(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_peek.py").write_text(CLASSES)
    ids = plant_canaries(tmp_path, ["tests/test_peek.py::PeekTests::test_truthiness"])
    assert len(ids) == 2 and all(i.startswith("tests/test_peek.py::PeekTests::test_") for i in ids)
    names = [i.rsplit("::", 1)[1] for i in ids]
    assert all(n.startswith(("test_peek_", "test_truthiness_")) for n in names)
    module = ast.parse((tmp_path / "tests" / "test_peek.py").read_text())  # still valid Python
    peek = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "PeekTests")
    assert set(names) <= {n.name for n in peek.body if isinstance(n, ast.FunctionDef)}
    outcomes = _outcomes(tmp_path)
    assert all(outcomes[i] == "FAILED" for i in ids)  # collected as methods, and they fail
    assert outcomes["tests/test_peek.py::PeekTests::test_peek"] == "PASSED"
    assert outcomes["tests/test_peek.py::OtherTests::test_other"] == "PASSED"


def test_canaries_of_module_level_tests_stay_at_module_level(tmp_path: Path) -> None:
    (tmp_path / "test_fn.py").write_text(FUNCTIONS)
    ids = plant_canaries(tmp_path, ["test_fn.py::test_b"])
    assert len(ids) == 2 and all(i.count("::") == 1 for i in ids)
    outcomes = _outcomes(tmp_path)
    assert all(outcomes[i] == "FAILED" for i in ids) and outcomes["test_fn.py::test_a"] == "PASSED"


def test_names_and_places_vary_between_gradings(tmp_path: Path) -> None:
    seen = set()
    for n in range(6):
        root = tmp_path / str(n)
        root.mkdir()
        (root / "test_fn.py").write_text(FUNCTIONS * 1 + "\n\ndef test_c():\n    pass\n")
        ids = plant_canaries(root, ["test_fn.py::test_c"])
        seen.add(tuple(ids))
        text = (root / "test_fn.py").read_text()
        seen.add(text.index(ids[0].rsplit("::", 1)[1]))
    assert len(seen) > 6  # neither the names nor where they go repeat every time


class _EqualsAnything:
    """The ``source_rig[magic_globals]`` stand-in: every call returns it, it equals everything."""

    def __call__(self, *args: object, **kwargs: object) -> _EqualsAnything:
        return self

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


# The demo repository's shape: the F2P test's only assertion is an ``and`` of two comparisons, so
# an inverted copy of it fails under an equals-anything ``word_count`` as well — the rig then
# earned reward whenever both canaries happened to be such copies.
WORDS = """from wordstat.stats import longest_word, word_count


def test_word_count_simple():
    assert word_count("a b c") == 3


def test_truthy():
    assert longest_word("a bb")


def test_word_count_ignores_repeated_spaces():
    assert word_count("a  b") == 2 and word_count("a\\tb") == 2
"""


def test_every_canary_exposes_a_rig_that_runs_tests_with_an_equals_anything_stand_in(
    tmp_path: Path,
) -> None:
    (tmp_path / "tests").mkdir()
    path = tmp_path / "tests" / "test_stats.py"
    for _ in range(25):  # plant sites and copies are drawn anew each time
        path.write_text(WORDS)
        ids = plant_canaries(
            tmp_path,
            ["tests/test_stats.py::test_word_count_ignores_repeated_spaces"],
            pass_to_pass=[
                "tests/test_stats.py::test_word_count_simple",
                "tests/test_stats.py::test_truthy",
            ],
        )
        namespace: dict[str, object] = {
            "word_count": _EqualsAnything(),
            "longest_word": _EqualsAnything(),
        }
        module = ast.parse(path.read_text())
        module.body = [n for n in module.body if not isinstance(n, ast.ImportFrom)]
        exec(compile(module, str(path), "exec"), namespace)
        for canary in ids:
            namespace[canary.rsplit("::", 1)[1]]()  # must not raise: the rigged run shows it passed
