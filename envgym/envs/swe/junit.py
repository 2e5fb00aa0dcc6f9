"""pytest's JUnit XML report → ``{pytest node id: outcome}``.

DeepSeek-V3.2 (§3.2.3, "Code Agent") has every environment report test results in the standard
JUnit format "ensuring consistent parsing across programming languages and test frameworks";
this module is that parser for pytest's ``--junitxml`` (families xunit1 and xunit2).

pytest writes a test ``tests/test_a.py::TestX::test_y[p]`` as ``classname="tests.test_a.TestX"``
``name="test_y[p]"`` (the path dotted, ``.py`` dropped; xunit1 also adds ``file=``).  Going back
is ambiguous in general (is ``a.b`` a module ``a/b.py`` or a class ``b`` in ``a.py``?), so the
module is found, in order, from the ``file`` attribute, from the files that exist under
``repo_dir``, and else by convention (trailing CapWords parts are classes).  A module that fails
to import is reported by pytest as ``classname=""`` ``name="tests.test_a"``; it becomes the id
``tests/test_a.py`` with outcome ``error`` (see :func:`collection_errors`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from xml.parsers import expat

from envgym.envs.swe.safe_read import open_regular

OUTCOMES = ("passed", "failed", "error", "skipped")
# When pytest reports one id twice (a rerun plugin, a teardown error after a pass), the worse wins.
_SEVERITY = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
_CHILD_OUTCOME = {"failure": "failed", "error": "error", "skipped": "skipped"}
CHUNK_BYTES = 1024**2


class JunitError(ValueError):
    """The report is empty, truncated or not pytest's JUnit XML."""


def parse_junit(text: str | bytes, *, repo_dir: Path | None = None) -> dict[str, str]:
    """Parse a JUnit XML report into ``{node id: "passed" | "failed" | "error" | "skipped"}``.

    Raises :class:`JunitError` (never anything else) when the text is not a usable report.
    """
    data = text.encode("utf-8", errors="replace") if isinstance(text, str) else text
    return parse_junit_chunks(
        [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)], repo_dir=repo_dir
    )


def parse_junit_chunks(chunks: Iterable[bytes], *, repo_dir: Path | None = None) -> dict[str, str]:
    """:func:`parse_junit` over a stream of byte chunks, in memory bounded by the number of test
    cases (expat events; no tree is built, character data is dropped), so a report's size costs
    time, not memory.  The caller bounds the bytes it feeds (validation.py caps the file)."""
    outcomes: dict[str, str] = {}
    state: dict[str, object] = {"root": None, "case": None}
    split_cache: dict[tuple[str, ...], int] = {}

    def refuse(*_: object) -> None:
        # pytest never writes one; refusing it rules out entity-expansion tricks by a test suite.
        raise JunitError("JUnit report has a DOCTYPE/ENTITY declaration; refused")

    def start(tag: str, attrs: dict[str, str]) -> None:
        if state["root"] is None:
            if tag not in ("testsuites", "testsuite"):
                raise JunitError(f"not a JUnit report: root element <{tag}>")
            state["root"] = tag
        if tag == "testcase":
            node_id = _node_id(attrs.get("classname") or "", attrs.get("name") or "", attrs.get("file"),
                               repo_dir, split_cache)  # fmt: skip
            if not node_id:
                raise JunitError("a <testcase> has neither classname nor name")
            state["case"] = [node_id, "passed"]
        elif tag in _CHILD_OUTCOME and isinstance(state["case"], list):
            case = state["case"]
            found = _CHILD_OUTCOME[tag]  # failure beats error beats skipped within one case
            if case[1] == "passed" or _RANK[found] < _RANK[case[1]]:
                case[1] = found

    def end(tag: str) -> None:
        if tag == "testcase" and isinstance(state["case"], list):
            node_id, outcome = state["case"]
            previous = outcomes.get(node_id)
            if previous is None or _SEVERITY[outcome] > _SEVERITY[previous]:
                outcomes[node_id] = outcome
            state["case"] = None

    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    seen = False
    try:
        for chunk in chunks:
            if chunk.strip():
                seen = True
            parser.Parse(chunk, False)
        if not seen:
            raise JunitError("empty JUnit report (pytest wrote nothing: crashed or killed?)")
        parser.Parse(b"", True)
    except expat.ExpatError as exc:
        raise JunitError(f"malformed JUnit XML ({exc}): truncated or not XML") from None
    except RecursionError:
        raise JunitError("malformed JUnit XML: nested too deeply") from None
    return outcomes


# Inside one <testcase>: pytest's order of precedence (a failure is reported over an error).
_RANK = {"failed": 0, "error": 1, "skipped": 2}


def collection_errors(outcomes: Mapping[str, str]) -> tuple[str, ...]:
    """The module-level entries (ids without ``::``): files that failed to collect."""
    return tuple(sorted(i for i, o in outcomes.items() if "::" not in i and o == "error"))


def test_outcomes(outcomes: Mapping[str, str]) -> dict[str, str]:
    """Only the test entries (``path::name``), without module-level collection entries."""
    return {i: o for i, o in outcomes.items() if "::" in i}


test_outcomes.__test__ = False  # type: ignore[attr-defined]  # not a pytest test, despite the name


def _node_id(
    classname: str,
    name: str,
    file: str | None,
    repo_dir: Path | None,
    cache: dict[tuple[str, ...], int],
) -> str:
    if not classname:
        # A collection entry: ``name`` is the dotted module path.
        return name.replace(".", "/") + ".py" if name else ""
    parts = classname.split(".")
    if file and file.endswith(".py"):
        module = file[:-3].replace("\\", "/").split("/")
        if parts[: len(module)] == module:
            return "::".join([file.replace("\\", "/"), *parts[len(module) :], name])
    key = tuple(parts)
    if key not in cache:
        cache[key] = _module_split(parts, repo_dir)
    split = cache[key]
    module_path = "/".join(parts[:split]) + ".py"
    return "::".join([module_path, *parts[split:], name])


def _module_split(parts: list[str], repo_dir: Path | None) -> int:
    """How many leading parts of a dotted classname form the module path."""
    if repo_dir is not None:
        for split in range(len(parts), 0, -1):
            if _is_regular(repo_dir, "/".join(parts[:split]) + ".py"):
                return split
    split = len(parts)
    while split > 1 and parts[split - 1][:1].isupper():
        split -= 1  # CapWords parts at the end are classes (pytest's own naming convention)
    return split


def _is_regular(root: Path, rel: str) -> bool:
    """Whether ``root/rel`` is a regular file reached without links (the tree is jail-written)."""
    try:
        fd, _ = open_regular(root, rel)
    except OSError:
        return False
    os.close(fd)
    return True
