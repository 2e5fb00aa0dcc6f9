"""smith reads what a jail ran in and wrote: paths and files from there are input.

The probe report comes from the project's tests (in the jail), and so do the files of the copy
they ran in; the host must read and rewrite only plain paths below the copy, only regular files
reached without a link, and ignore a report of the wrong shape.
"""

from __future__ import annotations

import os
from pathlib import Path

from envgym.envs.swe.smith import Probe, _candidates, _covering, _probe_report

HOST_CODE = "def secret(a):\n    return a + 1\n"


def _trace(functions: list[str]) -> Probe:
    return Probe(
        "ok",
        {"tests/test_x.py::test_x": {"outcome": "passed", "message": "", "functions": functions}},
        0.1,
        "",
    )


def test_paths_outside_the_copy_are_not_candidates() -> None:
    covering = _covering(
        _trace(
            [
                "../../outside.py:1",
                "/etc/x.py:1",
                "src/.git/x.py:1",
                "src/ok.py:1",
                "src/bad.py:nan",
            ]
        )
    )
    assert list(covering) == [("src/ok.py", 1)]


def test_a_source_file_swapped_for_a_link_is_not_read(tmp_path: Path) -> None:
    host = tmp_path / "host.py"
    host.write_text(HOST_CODE)
    copy = tmp_path / "copy"
    (copy / "src").mkdir(parents=True)
    os.symlink(host, copy / "src" / "mod.py")
    os.symlink(tmp_path, copy / "linked")
    covering = {("src/mod.py", 1): ("t",), ("linked/host.py", 1): ("t",)}
    assert list(_candidates(copy, covering, seed=0)) == []


def test_a_probe_report_that_is_a_link_or_malformed_is_no_report(tmp_path: Path) -> None:
    (tmp_path / "secret.json").write_text('{"tests": {"a": {"outcome": "passed"}}}')
    os.symlink(tmp_path / "secret.json", tmp_path / "probe.json")
    assert _probe_report(tmp_path) is None
    (tmp_path / "probe.json").unlink()
    for text in ('{"tests": 3}', "[1]", "{", "[" * 100_000):
        (tmp_path / "probe.json").write_text(text)
        assert _probe_report(tmp_path) is None
    (tmp_path / "probe.json").write_text(
        '{"tests": {"a": {"outcome": "passed", "functions": 7}, "b": 5}}'
    )
    assert _probe_report(tmp_path) == {"a": {"outcome": "passed", "message": "", "functions": []}}
