"""The shipped list of τ² tasks a do-nothing agent passes (``noop_tasks.json``), read-only.

Measured by envgym/envs/tau2/noop.py (``python -m envgym.envs.tau2.noop --write``), never written by
hand; this module only reads it, so the env and the descriptor bundle can flag tasks without
importing the measurement (which imports the env).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "noop_tasks.json"
REGENERATE = "python -m envgym.envs.tau2.noop --write"


@functools.cache
def shipped() -> dict[str, Any]:
    """The shipped measurement, as written by ``envgym.envs.tau2.noop``."""
    try:
        data = json.loads(DATA.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RuntimeError(
            f"cannot read τ²'s no-op task list {DATA}: {exc} (regenerate: {REGENERATE})"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("domains"), dict):
        # a damaged shipped file, not a caller's wrong type: the same error as an unreadable one
        raise RuntimeError(  # noqa: TRY004
            f"τ²'s no-op task list {DATA} has no 'domains' object (regenerate: {REGENERATE})"
        )
    return data


def flagged_tasks(domain: str) -> dict[str, str]:
    """τ² task id → why a do-nothing agent passes it, for ``domain``, from the shipped list."""
    entry = shipped()["domains"].get(domain)
    if entry is None:
        raise RuntimeError(
            f"τ²'s no-op task list has no {domain!r} entry (regenerate: {REGENERATE})"
        )
    return {str(tid): str(v["reason"]) for tid, v in entry["flagged"].items()}
