"""A small, hermetic Debian-style corpus for the search tests (no apt needed).

Stanzas are written as ``apt-cache dumpavail`` prints them, so the tests exercise the same
parser the real build uses.  ``bigprovides`` has a field longer than a page (pagination) and
``aaaa`` a long run of ``a`` (the catastrophic-backtracking witness for ``find``).
"""

from __future__ import annotations

SECTIONS = ("games", "python", "libs", "net", "utils")
MAINTAINERS = (
    "Debian Games Team <games@lists.debian.org>",
    "Debian Python Team <python@lists.debian.org>",
    "Ada Lovelace <ada@example.org>",
)


def stanza(
    name: str,
    summary: str,
    *,
    section: str = "utils",
    depends: str = "",
    maintainer: str = MAINTAINERS[2],
    extra: str = "",
) -> str:
    lines = [f"Package: {name}", "Version: 1.0-1", f"Maintainer: {maintainer}",
             "Architecture: amd64", f"Section: {section}", "Priority: optional",
             "Filename: pool/main/x.deb", "Size: 1234", "SHA256: 00ff"]  # fmt: skip
    if depends:
        lines.append(f"Depends: {depends}")
    lines.append(f"Description: {summary}")
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


def dumpavail_text() -> str:
    stanzas = [
        stanza(
            "zebrafish-viewer",
            "interactive viewer for zebrafish microscopy images",
            section="science",
            depends="libc6 (>= 2.34), libpng16-16 | libpng-dev, python3:any",
        ),
        stanza(
            "python3-httpkit",
            "asynchronous HTTP client library for Python",
            section="python",
            depends="python3 (>= 3.11), python3-certifi",
            maintainer=MAINTAINERS[1],
        ),
        stanza(
            "spacerocks",
            "arcade game about rocks in space",
            section="games",
            depends="libsdl2-2.0-0",
            maintainer=MAINTAINERS[0],
        ),
        stanza(
            "bigprovides",
            "a package that provides very many virtual packages",
            section="libs",
            extra="Provides: " + ", ".join(f"virtual-feature-{i}" for i in range(600)),
        ),
        stanza("aaaa", "the letter a " + "a" * 3000, section="misc"),
    ]
    # Filler, so BM25 statistics look like a corpus — and a dependency graph where uniqueness
    # often fails (question builders must notice): even fillers have two dependencies in one
    # section (i+1 and i+6), (section, maintainer) groups share libc6, and pairs of rare
    # ``shared-*`` dependencies recur within a section (i and i+30).
    for i in range(40):
        deps = [f"filler-{(i + 1) % 40:02d}", "libc6", f"shared-a{i % 2}", f"shared-b{i % 3}"]
        if i % 2 == 0:
            deps.insert(1, f"filler-{(i + 6) % 40:02d}")
        stanzas.append(stanza(f"filler-{i:02d}", f"filler package number {i} for {SECTIONS[i % 5]}",
                              section=SECTIONS[i % 5], maintainer=MAINTAINERS[i % 3],
                              depends=", ".join(deps)))  # fmt: skip
    return "\n".join(stanzas)
