"""Tools-only solvability, dynamically: the gold answer must come from the data, through tools.

DeepSeek-V3.2 §3.2.3 restricts the synthesized solution function "to invoking tool functions or
performing logical computations".  The static rules (:mod:`envgym.synth_agents.solution_rules`) and
the isolation guard (:mod:`envgym.synth_agents.isolation`) stop a solution from *reading the state*
itself; they do not stop it from reading the answer out of ``task["metadata"]`` — an answer key the
agent being trained never sees (an LLM-written task whose solution
submitted ``metadata["answer"]`` without a data tool call, and whose verifier compared against
the same key, was kept with an answer that is wrong for the database).

Each check here runs the gold solution or the verifier once more in a sandbox, on a fresh (or an
emptied) state, and compares — a counterfactual trace, not a reading of the source:

* ``no_data_call``: the gold made no tool call other than the submit tool;
* ``hidden_metadata``: some value of the gold submission equals a metadata value that the prompt
  does not show; the metadata value is changed and the gold run again — if its submission
  changes (or it fails), the answer was copied from the key, not derived from tool results;
* ``same_without_data``: on an emptied state (no database), the gold still submits the same
  answer: it does not depend on the data;
* ``verifier_without_data``: on an emptied state, the verifier still accepts the gold answer: it
  judges against the metadata alone, so a wrong key can never be caught.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.bundle import Task
from envgym.sandbox import Sandbox
from envgym.state import EpisodeDirs
from envgym.verdict import Verdict

Leaf = tuple[tuple[Any, ...], Any]  # (path from the root, value)


@dataclass(frozen=True)
class ProvenanceProblem:
    task_id: str
    kind: str  # no_data_call | hidden_metadata | same_without_data | verifier_without_data
    detail: str

    @property
    def reason(self) -> str:
        """The validation reason code this problem maps to
        (envgym.synth_agents.validate.REASONS)."""
        return (
            "verifier_answer_key"
            if self.kind == "verifier_without_data"
            else "answer_not_from_tools"
        )


def atoms(value: Any) -> Iterator[Any]:
    """The strings and numbers inside a submission, descending into JSON held in strings."""
    if isinstance(value, dict):
        for v in value.values():
            yield from atoms(v)
    elif isinstance(value, list):
        for v in value:
            yield from atoms(v)
    elif isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                inner = json.loads(text)
            except ValueError:
                inner = None
            if isinstance(inner, (dict, list)):
                yield from atoms(inner)
                return
        if text:
            yield text
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[Leaf]:
    """Every scalar of ``value`` (bools and nulls excluded: a flag is not an answer) with its path."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))
    elif isinstance(value, str) and value.strip():
        yield path, value
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        yield path, value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().casefold() == b.strip().casefold()
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return False


def _shown(value: Any, prompt: str) -> bool:
    """Whether the prompt shows ``value`` (then the agent knows it too)."""
    text = prompt.casefold()
    if isinstance(value, str):
        return value.strip().casefold() in text
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) in text


def hidden_answer_leaves(task: Task, submission: dict[str, Any]) -> list[Leaf]:
    """Metadata values the prompt does not show that turn up in the gold submission."""
    answer = list(atoms(submission))
    return [
        (path, value)
        for path, value in leaves(dict(task.metadata))
        if not _shown(value, task.prompt) and any(_same(value, a) for a in answer)
    ]


def _changed(value: Any) -> Any:
    """A different value of the same type (one the data cannot contain by chance)."""
    if isinstance(value, str):
        return value + " (changed by envgym)"
    if isinstance(value, int):
        return value + 7919
    return value * 1.5 + 7.25


def _with(metadata: dict[str, Any], changes: list[Leaf]) -> dict[str, Any]:
    out = copy.deepcopy(metadata)
    for path, value in changes:
        node: Any = out
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = _changed(value)
    return out


def empty_state(path: Path) -> Path:
    """Remove everything in an episode directory this process filled (never following links)."""
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    return path


def _verdict(outcome: Any) -> Verdict:
    if not outcome.ok:
        return Verdict.failure("verifier_error", outcome.message[-400:])
    return Verdict.from_report(outcome.value)


def check_provenance(
    box: Sandbox,
    dirs: EpisodeDirs,
    task: Task,
    calls: list[tuple[str, dict[str, Any]]],
    submission: dict[str, Any],
) -> list[ProvenanceProblem]:
    """The four checks above for one task whose gold ran (``calls``, ``submission``) and passed.

    ``dirs`` holds the sandbox's episode directory.  The state is emptied *before* the reset:
    the worker closes its cached database connections on reset, so nothing keeps the removed
    database open.
    """

    def fresh() -> None:
        box.reset(dirs.refill())

    def emptied() -> None:
        box.reset(empty_state(dirs.refill()))

    out: list[ProvenanceProblem] = []
    data_calls = [name for name, _ in calls if name != task.submit_tool]
    if not data_calls:
        out.append(
            ProvenanceProblem(
                task.id,
                "no_data_call",
                f"the gold solution called no tool but "
                f"{task.submit_tool!r}: its answer cannot come from the data",
            )
        )
    hidden = hidden_answer_leaves(task, submission)
    if hidden:
        changed = {**task.to_dict(), "metadata": _with(dict(task.metadata), hidden)}
        fresh()
        again = box.solve(task.solution, changed, task.submit_tool)
        if not again.outcome.ok or again.submission != submission:
            keys = ", ".join(
                "metadata" + "".join(f"[{k!r}]" for k in p) + f" = {v!r}" for p, v in hidden[:3]
            )
            out.append(
                ProvenanceProblem(
                    task.id,
                    "hidden_metadata",
                    f"the gold answer copies {keys}, which the "
                    "prompt does not show: changing it changed the gold submission",
                )
            )
    emptied()
    blind = box.solve(task.solution, task.to_dict(), task.submit_tool)
    if blind.outcome.ok and blind.submission == submission and data_calls:
        out.append(
            ProvenanceProblem(
                task.id,
                "same_without_data",
                "with the database removed the gold solution "
                "still submits the same answer: it does not use the tool results",
            )
        )
    emptied()
    if _verdict(box.verify(task.verifier, submission, task.to_dict())).passed:
        out.append(
            ProvenanceProblem(
                task.id,
                "verifier_without_data",
                "with the database removed the verifier "
                "still accepts the gold answer: it judges against the task metadata alone, "
                "not the data",
            )
        )
    fresh()
    return out
