"""The rules a task must enforce, known independently of its verifier.

``envgym check`` used to measure rule coverage over the checks the gold verdict reports, that is
over what the verifier says about itself: a verifier that silently stopped checking a rule also
stopped reporting it, and passed with coverage 1.0 while paying answers that break the rule.
The rules a task declares come from what made the task, not from the verifier:

* ``metadata["declared_rules"]``: a list of check names the task's generator writes from its own
  constraints (the procedural recipes, trip planning's spec);
* the rule of every declared per-rule witness (tasks.jsonl; the LLM agent's witness blocks).

Each declared rule must be reported by the gold verdict and covered by a witness.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DECLARED_KEY = "declared_rules"
MAX_RULES = 200  # a task with more rules than this is not a task a model can be asked to do
MAX_RULE_CHARS = 100


def declared_rules(
    metadata: Mapping[str, Any], witness_rules: tuple[str, ...]
) -> tuple[tuple[str, ...], str | None]:
    """The task's declared rules, in order (metadata first, then witness rules), and a problem.

    The metadata field is hostile input like the rest of a bundle: anything but a bounded list of
    short non-empty strings is a problem naming what is wrong, and is then ignored.
    """
    out: list[str] = []
    problem = None
    raw = metadata.get(DECLARED_KEY) if isinstance(metadata, Mapping) else None
    if raw is not None:
        if not isinstance(raw, list) or len(raw) > MAX_RULES:
            problem = f"metadata.{DECLARED_KEY} must be a list of at most {MAX_RULES} rule names"
        elif not all(isinstance(r, str) and 0 < len(r) <= MAX_RULE_CHARS for r in raw):
            problem = f"metadata.{DECLARED_KEY} must hold non-empty strings of at most {MAX_RULE_CHARS} chars"
        else:
            out += raw
    out += [r for r in witness_rules if isinstance(r, str)]
    return tuple(dict.fromkeys(out)), problem
