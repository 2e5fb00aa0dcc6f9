"""envgym/tools/search/debian.py: the dumpavail parser and the clear error when apt cannot supply
it."""

from __future__ import annotations

import subprocess

import pytest
from search_corpus import dumpavail_text

from envgym.tools.search import debian
from envgym.tools.search.debian import (
    CorpusUnavailable,
    parse_packages,
    parse_stanzas,
    relation_names,
)


@pytest.mark.timeout(10)
def test_stanzas_keep_continuations_and_skip_nameless() -> None:
    text = (
        "Package: a\nDescription: one\n more\n\nVersion: 2\n\n\nPackage: Bad Name\n\nPackage: b\n"
    )
    stanzas = list(parse_stanzas(text.splitlines()))
    assert stanzas[0] == {"Package": "a", "Description": "one\nmore"}
    assert [p.name for p in parse_packages(text.splitlines())] == ["a", "b"]


@pytest.mark.timeout(10)
def test_relations_flatten_alternatives_and_strip_versions() -> None:
    value = "libc6 (>= 2.34), libpng16-16 | libpng-dev, python3:any, libc6"
    assert relation_names(value) == ("libc6", "libpng16-16", "libpng-dev", "python3")


@pytest.mark.timeout(10)
def test_package_text_hides_download_plumbing() -> None:
    packages = {p.name: p for p in parse_packages(dumpavail_text().splitlines())}
    viewer = packages["zebrafish-viewer"]
    assert viewer.depends == ("libc6", "libpng16-16", "libpng-dev", "python3")
    assert viewer.section == "science" and viewer.summary.startswith("interactive viewer")
    text = viewer.text()
    assert text.startswith("Package: zebrafish-viewer\nVersion: 1.0-1\n")
    assert "SHA256" not in text and "Filename" not in text and "Size: 1234" not in text


@pytest.mark.timeout(10)
def test_no_apt_cache_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda name: None)
    with pytest.raises(CorpusUnavailable, match="apt-cache"):
        debian.dumpavail()


@pytest.mark.timeout(10)
def test_missing_package_lists_say_to_run_apt_get_update(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = subprocess.CompletedProcess(["apt-cache"], 0, stdout=dumpavail_text(), stderr="")
    monkeypatch.setattr(debian.shutil, "which", lambda name: "/usr/bin/apt-cache")
    monkeypatch.setattr(debian.subprocess, "run", lambda *a, **k: fake)
    with pytest.raises(CorpusUnavailable, match=r"lists only 45 packages .*apt-get update"):
        debian.dumpavail()


@pytest.mark.timeout(10)
def test_failing_apt_cache_reports_its_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = subprocess.CompletedProcess(["apt-cache"], 100, stdout="", stderr="E: cache is broken")
    monkeypatch.setattr(debian.shutil, "which", lambda name: "/usr/bin/apt-cache")
    monkeypatch.setattr(debian.subprocess, "run", lambda *a, **k: fake)
    with pytest.raises(CorpusUnavailable, match="cache is broken"):
        debian.dumpavail()
