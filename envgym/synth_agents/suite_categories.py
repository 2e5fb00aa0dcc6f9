"""Which categories a suite has and how they split: ``--categories FILE|all|specs`` read into
canonical names, and the seeded split by category into train, validation and held-out."""

from __future__ import annotations

import hashlib
from pathlib import Path

from envgym.suite_manifest import SuiteError
from envgym.synth_agents.categories import UnknownCategory, all_names, find_category

MAX_CATEGORIES_FILE = 1024 * 1024


def read_categories(spec: str) -> tuple[str, ...]:
    """``all`` (every procedural category), ``specs`` (every category compiled from a spec:
    all but the hand-written families, so ``--max-rows`` applies to each), or a file: one name
    per line, ``#`` comments."""
    if spec == "all":
        return tuple(all_names())
    if spec == "specs":
        return tuple(n for n in all_names() if find_category(n).spec_written)
    path = Path(spec)
    try:
        if path.stat().st_size > MAX_CATEGORIES_FILE:
            raise SuiteError(f"the categories file {spec} is over {MAX_CATEGORIES_FILE} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(
            f"cannot read the categories file {spec!r} (or say 'all' or 'specs'): {exc}"
        ) from None
    names: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        try:
            canonical = find_category(name).name
        except UnknownCategory as exc:
            raise SuiteError(f"{spec} line {number}: {exc}") from None
        if canonical in names:
            raise SuiteError(
                f"{spec} line {number}: {name!r} is {canonical!r} again "
                f"(already on line {names[canonical]})"
            )
        names[canonical] = number
    if not names:
        raise SuiteError(f"the categories file {spec} names no category (only blanks/comments)")
    return tuple(names)


def split_categories(
    names: tuple[str, ...], share: float, seed: int, validation_share: float = 0.0
) -> dict[str, str]:
    """Category → ``train`` | ``validation`` | ``held_out``, by each name's seeded hash: the
    ``round(share × n)`` smallest are held out, the next ``round(validation_share × n)`` are for
    validation.  A share asked for gets at least one category and training keeps at least one.
    Depends on the set of names and the seed, not their order; adding a validation share leaves
    the held-out categories as they were."""
    ranked = sorted(names, key=lambda n: hashlib.sha256(f"{seed}\0{n}".encode()).hexdigest())
    held = _count(share, len(names), len(names) - 1)
    valid = _count(validation_share, len(names), len(names) - 1 - held)
    return {
        n: ("held_out" if i < held else "validation" if i < held + valid else "train")
        for i, n in enumerate(ranked)
    }


def _count(share: float, n: int, most: int) -> int:
    """``round(share × n)``, at least 1 when a share is asked for, at most ``most``."""
    k = round(share * n)
    if share > 0 and k == 0:
        k = 1
    return max(0, min(k, most))
