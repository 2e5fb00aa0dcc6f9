"""Writing a bundle's files: what every builder (the procedural kit, trip planning, code
interpreter, search QA, τ², the MCP suite) does before :func:`envgym.bundle.write_manifest`
hashes the folder last (docs/BUNDLE.md).

The bytes matter: the manifest's content hash covers them, so the same tasks must always give
the same ``tasks.jsonl`` (UTF-8, one JSON object a line, non-ASCII characters kept as they are,
each line's keys in the order the builder made them).  Written once here, builders cannot
drift apart in how they encode it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envgym.bundle import TASKS
from envgym.runtime import CODE_FILES


def fresh_bundle_dir(out_dir: Path | str) -> Path:
    """``out_dir`` as a Path; refused when it exists with anything in it (a builder never
    writes over, or into, another bundle)."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; a bundle is built into a fresh directory")
    return out


def copy_code_files(templates: Path, out: Path) -> None:
    """Copy the bundle's code files (``tools.py``, ``solution.py``, ``verifier.py``) from the
    family's ``templates`` folder into the bundle folder ``out``."""
    for name in CODE_FILES:
        shutil.copyfile(Path(templates) / name, Path(out) / name)


def write_tasks(out: Path, tasks: Iterable[Mapping[str, Any]]) -> None:
    """Write ``out/tasks.jsonl``: one line per task, in order."""
    with open(Path(out) / TASKS, "w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task, ensure_ascii=False) + "\n")
