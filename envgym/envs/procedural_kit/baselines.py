"""Baselines stronger than one greedy pass: local repair and a bounded exhaustive search.

A procedural task is a choice of one option per *slot* (a product per category, a route per
shipment, a start per meeting, in or out per order line) scored by a *penalty*: 0 when every
rule the task states is met, more the further a choice is from meeting them.  Each family
(``envs/<family>/baselines.py``) turns a task's public data (its metadata and the database the
tools expose; never the gold) into a :class:`Search` and a greedy start; the searches here are
shared:

* :func:`repair` — from the greedy choice, take the one-move change (one slot to another
  option; with ``pairs``, two slots at once, i.e. a swap) that lowers the penalty most, until
  the penalty is 0 or no such move helps.
* :func:`exhaustive` — every combination, in the pools' order, when there are at most
  ``bound`` of them; past the bound it does not start and says :data:`BEYOND`.

A baseline's answer still has to pass the task's verifier to count as solved: the penalty only
guides the search.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envgym.envs.procedural_kit.local import (
    passed,  # the bundle's verdict, as envgym check reads it
)

# Combinations an exhaustive baseline may enumerate.  A task whose space is larger is "beyond
# the search bound": the baseline does not try it (an unbounded search solves every task).
EXHAUSTIVE_BOUND = 10_000
BEYOND = "beyond the search bound"
MAX_ROUNDS = 200  # repair moves; each strictly lowers the penalty, so this only caps time
NAMES = ("greedy", "greedy+repair", "exhaustive")

Choice = tuple[Any, ...]


@dataclass(frozen=True)
class Search:
    """One task as slots with options, a penalty (0: every stated rule met) and an answer."""

    pools: Sequence[Sequence[Any]]
    penalty: Callable[[Choice], float]
    answer: Callable[[Choice], dict[str, Any]]

    @property
    def size(self) -> int:
        """How many combinations there are (the exhaustive search's space)."""
        return math.prod(len(pool) for pool in self.pools)


def repair(
    search: Search, start: Choice, *, pairs: bool = False, max_rounds: int = MAX_ROUNDS
) -> Choice:
    """Best-improvement local search from ``start`` over one-slot (and, with ``pairs``,
    two-slot) changes; returns the last choice, solved (penalty 0) or stuck."""
    current, score = tuple(start), search.penalty(tuple(start))
    for _ in range(max_rounds):
        if score == 0:
            break
        best, best_score = None, score
        for candidate in _moves(search.pools, current, pairs):
            value = search.penalty(candidate)
            if value < best_score:
                best, best_score = candidate, value
        if best is None:
            break
        current, score = best, best_score
    return current


def _moves(pools: Sequence[Sequence[Any]], current: Choice, pairs: bool):
    slots = range(len(pools))
    for i in slots:
        for option in pools[i]:
            if option != current[i]:
                yield current[:i] + (option,) + current[i + 1 :]
    if not pairs:
        return
    for i, j in itertools.combinations(slots, 2):
        for a in pools[i]:
            if a == current[i]:
                continue
            for b in pools[j]:
                if b != current[j]:
                    out = list(current)
                    out[i], out[j] = a, b
                    yield tuple(out)


def exhaustive(search: Search, bound: int = EXHAUSTIVE_BOUND) -> Choice | str | None:
    """The first combination with penalty 0 (pool order), None when there is none, or
    :data:`BEYOND` when there are more than ``bound`` combinations to try."""
    if search.size > bound:
        return BEYOND
    return next((c for c in itertools.product(*search.pools) if search.penalty(c) == 0), None)


def attempts(
    search: Search | None,
    start: Choice | None,
    *,
    pairs: bool = False,
    bound: int = EXHAUSTIVE_BOUND,
) -> dict[str, dict[str, Any] | str | None]:
    """Each baseline's answer to one task: an answer dict, None (gave up) or :data:`BEYOND`.

    ``search`` None: the task has a slot with no option at all, so no baseline answers."""
    if search is None or start is None:
        return {name: None for name in NAMES}
    found = exhaustive(search, bound)
    repaired = repair(search, start, pairs=pairs)
    return {
        "greedy": search.answer(start),
        "greedy+repair": search.answer(repaired),
        "exhaustive": found if found is None or isinstance(found, str) else search.answer(found),
    }


def judged(
    verify: Callable[[dict[str, Any]], dict[str, Any]],
    answers: dict[str, dict[str, Any] | str | None],
) -> dict[str, bool | str]:
    """Each baseline's outcome under the task's own verifier: True (solved), False, or
    :data:`BEYOND` (the exhaustive search did not start)."""
    out: dict[str, bool | str] = {}
    for name, answer in answers.items():
        if isinstance(answer, str):
            out[name] = answer
        else:
            out[name] = answer is not None and passed(verify({"answer_text": json.dumps(answer)}))
    return out


def stronger_solves(
    verify: Callable[[dict[str, Any]], dict[str, Any]],
    answers: dict[str, dict[str, Any] | str | None],
) -> str | None:
    """The first stronger baseline whose answer the task's verifier accepts, or None.

    The top-level re-draw of every procedural family: at a recipe's ``top_levels`` (and trip
    planning's ``TOP_LEVELS``) a draw this names a baseline for is thrown away and re-drawn.
    """
    outcome = judged(verify, answers)
    return next((name for name, solved in outcome.items() if solved is True), None)
