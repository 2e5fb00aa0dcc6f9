"""The one shape of a procedural family's ``tasks.jsonl`` line (docs/BUNDLE.md).

Every procedural family (retail orders, meeting scheduling, shipment logistics, trip planning)
writes the same keys in the same order: ``id``, ``prompt``, ``solution``, ``verifier``,
``difficulty``, ``submit_tool``, ``system_prompt``, ``metadata`` and, where the family names its
greedy solver, ``baseline``; the kit (build.py) appends ``witnesses`` once they are proved.  The
order is part of the bundle's bytes (``json.dumps`` keeps it), so it is written here once: a
family that built the dict its own way could drift and change its bundle hash unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskNames:
    """What is fixed across one family's task lines: the id prefix and the function names."""

    prefix: str  # ids are ``<prefix>-<NNN>-d<difficulty>``, NNN the 1-based task number
    solution: str  # the gold solver in solution.py
    verifier: str  # the verifier in verifier.py
    submit_tool: str = "submit_result"
    # the greedy solver in solution.py; None where the kit adds it (Recipe.baseline)
    baseline: str | None = None

    def line(
        self,
        index: int,
        difficulty: int,
        prompt: str,
        metadata: dict[str, Any],
        *,
        task_id: str | None = None,
    ) -> dict[str, Any]:
        """The line of the ``index``-th (0-based) task; ``task_id`` replaces the numbered id
        (a hand-written task such as trip planning's worked example)."""
        line: dict[str, Any] = {
            "id": task_id
            if task_id is not None
            else f"{self.prefix}-{index + 1:03d}-d{difficulty}",
            "prompt": prompt,
            "solution": self.solution,
            "verifier": self.verifier,
            "difficulty": difficulty,
            "submit_tool": self.submit_tool,
            "system_prompt": None,
            "metadata": metadata,
        }
        if self.baseline is not None:
            line["baseline"] = self.baseline
        return line
