"""What the spec-writing LLM agent (:mod:`envgym.synth_agents.spec_agent`) says to its model.

The model is shown the published JSON Schema (compacted), one hand-written example spec and the
rules the schema cannot say (docs/ENV_SPEC.md), and asked for one spec as JSON.  Everything it
needs to know is in the first user message, so a small model with no tool calling can answer.
The category is the user's (bounded by ``llm_agent.category_problem`` before it gets here); it is
passed as JSON text so its quotes or braces cannot break the sentence around it.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from envgym.envs.procedural_kit.spec.validate import schema

EXAMPLES = Path(__file__).resolve().parent.parent / "envs" / "procedural_kit" / "spec" / "examples"
EXAMPLE = "library_loans"  # the smallest of the three reviewed examples, and a complete one

SYSTEM = (
    "You design environments for training tool-using agents. You write them as a declarative "
    "JSON spec that a compiler turns into a database, tools, tasks and verifiers. You never "
    "write code. You answer with exactly one JSON object in a ```json block and nothing else."
)

RULES = """Rules the schema cannot say:
- spec_version is 1. Names (entities, attributes, relations, tools) are lower_snake_case identifiers.
- 2 to 5 entities. Each entity has a "key": a text attribute with a "prefix" of 1-4 capital letters
  (e.g. "BK"), and at least one attribute that is not text. rows is 8..300.
- Attribute fields by type (no others): text: vocabulary (2-200 words) and words (1-4), or prefix for
  the key; category: values (2-30), weights; int/number: min, max (0..1e9, max >= min + 4), unit, skew,
  decimals (number); date: min, max ("YYYY-MM-DD", at least 30 days apart); bool: p_true (0.05-0.95).
- Relations are many-to-one: {"name", "from": child entity, "to": parent entity}. No cycles. A relation
  name must not equal an attribute name of its "from" entity.
- Tools: lookup (entity), list (entity, filters), search (entity, text attribute), follow (entity,
  relation), aggregate (entity = the child, filters), action (entity, category attribute, from, to,
  verb; from and to are two different values of that attribute). Tool names are unique; never
  "submit_result" or "page".
- Each task template has a target entity with a list tool and a lookup tool. A join needs a follow
  tool for its relation; an aggregate over a child needs an aggregate tool on the child with the
  relation among its filters. filters: category, bool, int, number or date attributes of the target.
  objectives and budgets: int, number or date attributes with a wide range (objectives need room for
  a single best row). An attribute an action changes is never a filter, objective or report.
  Levels 3-5 need at least one join or aggregate.
- Use the words of the domain for names, labels, units and values."""

# The category comes last: everything before it is the same for every job, so an engine with
# prefix caching (vLLM) and the cold start's batches (one forward of the shared prefix) reuse it.
ASK = """You will write the spec for one category, named at the end.

JSON Schema of a spec (compact):
{schema}

{rules}

A complete example (category "library loans"):
```json
{example}
```

Now write a new spec for the category {category}: its own entities, attributes, relations, tools
and task templates, in the domain's own words. Reply with the whole spec in one ```json block."""

# A model taught to write specs (``envgym cold-start spec-writer``) has learned the schema, the
# rules and the layout; re-reading ~3,800 tokens of them each job would only cost it time, and
# training on them would cost the cold start 4x the tokens and more memory than a 2-core
# machine has for attention over them.  It is asked in one line instead.
BRIEF_ASK = """Write the spec for the category {category}. Reply with the whole spec in one ```json block."""

PROMPTS = ("full", "brief")

FEEDBACK = """That spec was refused ({kind}): {problem}
Fix it and reply with the whole corrected spec in one ```json block, nothing else."""

UNSOLVABLE = (
    "the spec is valid, but the compiler could not draw a task with a single best answer on "
    "{draws} databases ({detail}). Give the objectives wider ranges (ints spanning at least 20, "
    "numbers, dates), more rows, or fewer conditions that every row shares"
)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@cache
def compact_schema() -> str:
    """The published schema without its self-description (ids, titles): only what constrains."""
    return _compact(
        {k: v for k, v in schema().items() if k not in ("$schema", "$id", "title", "description")}
    )


@cache
def example_spec() -> str:
    """The worked example, in :func:`spec_text`'s layout."""
    return spec_text(json.loads((EXAMPLES / f"{EXAMPLE}.json").read_text(encoding="utf-8")))


def spec_text(data: dict[str, Any]) -> str:
    """A spec as the prompt shows one: one line per top-level field, list items one per line
    (readable, and half the tokens of an indented file); the cold start's teacher writes its
    replies in the same layout."""
    lines = []
    for key, value in data.items():
        if isinstance(value, list):
            items = ",\n  ".join(_compact(v) for v in value)
            lines.append(f'"{key}": [\n  {items}\n]')
        else:
            lines.append(f"{json.dumps(key)}: {_compact(value)}")
    return "{\n" + ",\n".join(lines) + "\n}"


def first_prompt(category: str, prompt: str = "full") -> list[dict[str, str]]:
    """The conversation a job starts with: the ``full`` ask (schema, rules, example) or the
    ``brief`` one a spec-writing cold start teaches."""
    if prompt not in PROMPTS:
        raise ValueError(f"unknown spec prompt {prompt!r} (choose one of {', '.join(PROMPTS)})")
    if prompt == "brief":
        brief = BRIEF_ASK.format(category=json.dumps(category, ensure_ascii=False))
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": brief}]
    ask = ASK.format(
        category=json.dumps(category, ensure_ascii=False),
        schema=compact_schema(),
        rules=RULES,
        example=example_spec(),
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask}]


def feedback(kind: str, problem: str) -> dict[str, str]:
    return {"role": "user", "content": FEEDBACK.format(kind=kind, problem=problem)}
