"""Structured facts of the Debian corpus that questions are built from, with their uniqueness.

A question is only as good as its answer is unique: every template asks for the one entity
satisfying some constraints, so these indexes let a template check "exactly one" over the
*whole* corpus before it writes the question.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from envgym.tools.search.debian import Package

_EMAIL = re.compile(r"\s*<[^>]*>\s*$")


def maintainer_name(maintainer: str) -> str:
    """``"Ada Lovelace <ada@example.org>"`` → ``"Ada Lovelace"`` (the form a question uses)."""
    return _EMAIL.sub("", maintainer).strip()


def maintainer_email(maintainer: str) -> str:
    match = re.search(r"<([^>]*)>", maintainer)
    return match.group(1).strip() if match else ""


@dataclass
class Facts:
    packages: dict[str, Package]
    reverse: dict[str, list[str]] = field(default_factory=dict)  # dependency → dependents
    by_section_maintainer: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, packages: Sequence[Package]) -> Facts:
        by_name = {p.name: p for p in packages}
        reverse: dict[str, list[str]] = defaultdict(list)
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for p in packages:
            for dep in p.depends:
                reverse[dep].append(p.name)
            groups[(p.section, p.maintainer)].append(p.name)
        return cls(by_name, dict(reverse), dict(groups))

    def popularity(self, name: str) -> int:
        """How many packages depend on ``name``: low = long tail."""
        return len(self.reverse.get(name, ()))

    def known_depends(self, name: str) -> list[Package]:
        """The dependencies of ``name`` that are themselves documents of the corpus."""
        return [self.packages[d] for d in self.packages[name].depends if d in self.packages]
