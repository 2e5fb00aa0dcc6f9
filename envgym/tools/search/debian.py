"""The offline corpus: Debian's package metadata, read from ``apt-cache dumpavail``.

Why this corpus: every Debian-based machine (and CI image) can produce it from its package
registry alone, with no internet beyond ``apt-get update``; it has ~60k real, long-tail entities
with structured fields (maintainer, section, version, dependencies) that multi-hop questions can
be built from, and its free text (descriptions, tags) makes lexical search meaningful.

``apt-cache dumpavail`` prints one deb822 stanza per available package (the candidate version),
so package names are unique and serve as document ids.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

# A machine with apt but without package lists (a fresh container) prints a handful of stanzas
# (only what dpkg knows as installed); below this the corpus is useless, so building refuses.
MIN_PACKAGES = 1000

# Fields shown to the agent, in this order.  Left out: download plumbing (Filename, Size, the
# hashes, Description-md5, Build-Ids), which is noise for search and for questions.
SHOWN_FIELDS = (
    "Package", "Version", "Section", "Priority", "Maintainer", "Original-Maintainer",
    "Architecture", "Multi-Arch", "Essential", "Source", "Homepage", "Installed-Size",
    "Pre-Depends", "Depends", "Recommends", "Suggests", "Enhances", "Provides", "Breaks",
    "Conflicts", "Replaces", "Built-Using", "Tag", "Description",
)  # fmt: skip
RELATION_FIELDS = ("Pre-Depends", "Depends", "Recommends", "Suggests")

_NAME = re.compile(r"[a-z0-9][a-z0-9+.\-]*")


class CorpusUnavailable(RuntimeError):
    """The machine cannot produce the corpus (no apt, or no package lists)."""


@dataclass(frozen=True)
class Package:
    """One package stanza: its fields as written, plus parsed relations."""

    name: str
    fields: dict[str, str]
    depends: tuple[str, ...] = field(default=())  # package names only, alternatives flattened

    @property
    def section(self) -> str:
        return self.fields.get("Section", "")

    @property
    def maintainer(self) -> str:
        return self.fields.get("Maintainer", "")

    @property
    def summary(self) -> str:
        return self.fields.get("Description", "").split("\n", 1)[0].strip()

    def text(self) -> str:
        """The document body: the shown fields, one ``Key: value`` line each (continuations kept)."""
        return "\n".join(f"{key}: {self.fields[key]}" for key in SHOWN_FIELDS if key in self.fields)


def relation_names(value: str) -> tuple[str, ...]:
    """``"libc6 (>= 2.34), foo | bar:any"`` → ``("libc6", "foo", "bar")`` (order kept, unique)."""
    names: dict[str, None] = {}
    for clause in value.split(","):
        for alternative in clause.split("|"):
            match = _NAME.match(alternative.strip())
            if match:
                names.setdefault(match.group(0), None)
    return tuple(names)


def parse_stanzas(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    """deb822 stanzas (blank-line separated ``Key: value`` with indented continuations)."""
    stanza: dict[str, str] = {}
    key = ""
    for raw in lines:
        line = raw.rstrip("\n")
        if not line.strip():
            if stanza:
                yield stanza
            stanza, key = {}, ""
        elif line[0] in " \t":
            if key:  # a continuation line before any key is malformed: skipped
                stanza[key] += "\n" + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            stanza[key] = value.strip()
    if stanza:
        yield stanza


def parse_packages(lines: Iterable[str]) -> Iterator[Package]:
    """Packages from dumpavail output; stanzas without a valid name are skipped."""
    for stanza in parse_stanzas(lines):
        name = stanza.get("Package", "")
        if not _NAME.fullmatch(name):
            continue
        depends: dict[str, None] = {}
        for key in ("Pre-Depends", "Depends"):
            for dep in relation_names(stanza.get(key, "")):
                depends.setdefault(dep, None)
        yield Package(name=name, fields=stanza, depends=tuple(depends))


def dumpavail() -> str:
    """The raw ``apt-cache dumpavail`` text, or :class:`CorpusUnavailable` saying how to fix it."""
    if shutil.which("apt-cache") is None:
        raise CorpusUnavailable(
            "the search corpus needs `apt-cache` (a Debian/Ubuntu machine); none on PATH"
        )
    proc = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CorpusUnavailable(
            f"`apt-cache dumpavail` failed ({proc.returncode}): {proc.stderr[-500:]}"
        )
    count = proc.stdout.count("\nPackage: ") + proc.stdout.startswith("Package: ")
    if count < MIN_PACKAGES:
        raise CorpusUnavailable(
            f"`apt-cache dumpavail` lists only {count} packages (need >= {MIN_PACKAGES}): the apt "
            "package lists are missing; run `sudo apt-get update` (scripts/setup.sh does) and retry"
        )
    return proc.stdout


def load_packages() -> list[Package]:
    """Every available package, sorted by name (so document order is stable across machines)."""
    return sorted(parse_packages(dumpavail().splitlines()), key=lambda p: p.name)
