"""A pytest plugin that ``envgym/envs/swe/smith.py`` loads *inside the jail*: per-test outcomes,
failure messages and (optionally) which of the repository's functions each test ran.

Standard library and pytest only — it runs in the project's own environment, which is read-only
and may hold neither coverage.py nor anything of envgym's.  It is mounted as a single file and
loaded with ``-p envgym_smith_probe``; it never changes an outcome.

Why a call tracer and not coverage: synthesis needs "which functions did this test execute", per
test, not line coverage of the suite.  ``sys.setprofile`` gets one ``call`` event per Python
frame, so recording ``frame.f_code`` in a set is all the bookkeeping a test pays; code objects are
turned into ``path:first line`` (the key ``mutations.FunctionSite`` uses) once per test, keeping
only files under the repository root.  Fixtures run inside ``pytest_runtest_protocol`` and count
for the test that set them up (a module-scoped fixture for the first test of its scope).

Environment: ``ENVGYM_SMITH_OUT`` (the JSON file to write), ``ENVGYM_SMITH_TRACE=1`` to trace,
``ENVGYM_SMITH_ROOT`` (default ``/repo``).  Output: ``{"tests": {node id: {"outcome": "passed" |
"failed" | "error" | "skipped", "message": str, "functions": [str, ...]}}}``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

_OUT = os.environ.get("ENVGYM_SMITH_OUT", "")
_TRACE = os.environ.get("ENVGYM_SMITH_TRACE") == "1"
_ROOT = os.environ.get("ENVGYM_SMITH_ROOT", "/repo").rstrip("/") + "/"
_tests: dict[str, dict[str, Any]] = {}
_seen: set[Any] = set()


def _profile(frame: Any, event: str, arg: Any) -> None:
    if event == "call":
        _seen.add(frame.f_code)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    if not _TRACE:
        yield
        return
    _seen.clear()
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    names = {
        f"{code.co_filename[len(_ROOT) :]}:{code.co_firstlineno}"
        for code in _seen
        if code.co_filename.startswith(_ROOT)
    }
    _entry(item.nodeid)["functions"] = sorted(names)


def _entry(nodeid: str) -> dict[str, Any]:
    return _tests.setdefault(nodeid, {"outcome": "passed", "message": "", "functions": []})


def pytest_runtest_logreport(report: Any) -> None:
    entry = _entry(report.nodeid)
    if report.failed:
        # A failure in setup/teardown is an error, as in pytest's own JUnit report.
        entry["outcome"] = "failed" if report.when == "call" else "error"
        if not entry["message"]:
            entry["message"] = _message(report)
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"


def _message(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or str(report.longrepr)
    return text[:1000]


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if _OUT:
        with open(_OUT, "w", encoding="utf-8") as handle:
            json.dump({"tests": _tests, "exitstatus": int(exitstatus)}, handle)
