"""Single-field corruptions of a gold submission, to prove a verifier is not a rubber stamp.

A corruption changes exactly one leaf of the submission (descending into string arguments that
hold JSON, such as ``answer_text``): it swaps in a value that the same key has elsewhere in the
answer (a plausible entity in the wrong place), perturbs it (a name that does not exist, a date
one day off, a number off by one) or drops the field.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from envgym.bundle_limits import json_depth

SubmissionPath = tuple[
    Any, ...
]  # keys/indices from the submission root; "json" marks a JSON string
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


def _chooser(rng: random.Random, others: list[Any]) -> Callable[[Any], Any]:
    """A replacement that swaps a value for one of ``others`` (the same key's other values)."""
    return lambda _value: rng.choice(others)


def corruptions(submission: dict[str, Any], n: int, rng: random.Random) -> list[dict[str, Any]]:
    """Up to ``n`` distinct single-field corruptions of ``submission`` (never equal to it)."""
    tree = _expand(submission)
    leaves = list(_leaves(tree, ()))
    by_key: dict[Any, list[Any]] = defaultdict(list)
    for path, value in leaves:
        by_key[path[-1] if path else None].append(value)

    options: list[tuple[SubmissionPath, Callable[[Any], Any] | None]] = []
    for path, value in leaves:
        key = path[-1] if path else None
        others = [v for v in by_key[key] if v != value]
        if others and isinstance(key, str):
            options.append((path, _chooser(rng, others)))
        options.append((path, _perturb))
        if len(path) > 1 and isinstance(path[-1], str):
            options.append((path, None))  # drop the field
    rng.shuffle(options)

    original = json.dumps(submission, sort_keys=True)
    seen = {original}
    out: list[dict[str, Any]] = []
    for path, change in options:
        if len(out) >= n:
            break
        mutated = copy.deepcopy(tree)
        _apply(mutated, path, change)
        candidate = _collapse(mutated)
        key = json.dumps(candidate, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(candidate)
    return out


class _Json:
    """A string argument that held JSON, expanded so its fields can be corrupted one by one."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _expand(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    # a gold submission comes from bundle code: JSON nested past 64 levels is left a plain string
    # (json.loads would recurse into a RecursionError), and so is a digit bomb (ValueError)
    if isinstance(value, str) and value.strip()[:1] in ("{", "[") and json_depth(value, 64) <= 64:
        try:
            return _Json(_expand(json.loads(value)))
        except ValueError:
            return value
    return value


def _collapse(value: Any) -> Any:
    if isinstance(value, _Json):
        return json.dumps(_collapse(value.value), ensure_ascii=False)
    if isinstance(value, dict):
        return {k: _collapse(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_collapse(v) for v in value]
    return value


def _leaves(value: Any, path: SubmissionPath) -> Any:
    if isinstance(value, _Json):
        yield from _leaves(value.value, path + ("json",))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _apply(tree: Any, path: SubmissionPath, change: Callable[[Any], Any] | None) -> None:
    parent = tree
    for step in path[:-1]:
        parent = parent.value if step == "json" else parent[step]
    last = path[-1]
    if last == "json":  # the leaf is the JSON document itself (a scalar JSON string)
        parent.value = _perturb(parent.value) if change is None else change(parent.value)
    elif change is None:
        del parent[last]
    else:
        parent[last] = change(parent[last])


def _perturb(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1.0
    if isinstance(value, str):
        match = _DATE.match(value)
        if match:
            year, month, day = (int(g) for g in match.groups())
            return f"{year:04d}-{month:02d}-{(day % 28) + 1:02d}"
        return value + " (unverified)" if value else "unknown"
    if value is None:
        return "none"
    return value
