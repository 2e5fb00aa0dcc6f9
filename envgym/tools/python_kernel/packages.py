"""Which installed packages a kernel may import: ipykernel and the documented data-science stack.

With the whole venv mounted, a cell could ``import reasoning_gym`` and
regenerate a task's answer from its generator.  The jail therefore hides site-packages and
binds back only the entries (top-level modules, packages, their ``.dist-info``) of the
distributions reachable from :data:`KERNEL_PACKAGES` through their unconditional requirements
(extras are not followed: ``pandas[all]`` would pull half the venv back in).
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

#: What the ``python`` tool documents to the agent (bundle tools.py docstring,
#: docs/CODE_INTERPRETER.md), plus the kernel itself.
KERNEL_PACKAGES: tuple[str, ...] = ("ipykernel", "numpy", "pandas", "sympy", "matplotlib")


def site_packages() -> Path:
    """The interpreter's site-packages directory (the venv's when running in one)."""
    return Path(sysconfig.get_paths()["purelib"]).resolve()


def _requirements(dist: metadata.Distribution) -> Iterable[str]:
    for line in dist.requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        # Only what the package always needs here: no extras, markers evaluated for this host.
        if req.marker is not None and not Marker(str(req.marker)).evaluate({"extra": ""}):
            continue
        yield canonicalize_name(req.name)


def closure(roots: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions ``roots`` need, roots included (missing ones are skipped:
    an optional part of the stack that is not installed is simply not offered)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        todo.extend(_requirements(dist))
    return [seen[k] for k in sorted(seen)]


@functools.lru_cache(maxsize=8)
def site_entries(roots: tuple[str, ...] = KERNEL_PACKAGES) -> tuple[str, ...]:
    """Names directly under site-packages that the distributions of ``roots`` own.

    Entries outside site-packages (console scripts in ``bin/``) and the shared top-level
    ``__pycache__`` are left out; a name owned by a distribution outside the closure is never
    listed, so a generator package cannot ride along."""
    base = site_packages()
    names: set[str] = set()
    for dist in closure(roots):
        if Path(dist.locate_file("")).resolve() != base:
            continue  # installed elsewhere (the base interpreter's prefix is mounted whole)
        for file in dist.files or ():
            top = file.parts[0] if file.parts else ""
            if top and top not in ("..", "__pycache__") and not top.endswith(".pth"):
                names.add(top)
    return tuple(sorted(n for n in names if (base / n).exists()))
